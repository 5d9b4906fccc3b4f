"""zoo's training loss equals transformers' on the same weights and batch."""

from __future__ import annotations

import torch
import transformers

import zoo
from zoo.training.config import TrainConfig
from zoo.training.objectives import objective_for


def test_tiny_llama_loss_equals_transformers(tmp_path) -> None:
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    reference = transformers.LlamaForCausalLM(config).eval()
    reference.save_pretrained(tmp_path, safe_serialization=True)
    model = zoo.from_pretrained(str(tmp_path))
    ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(0))
    batch = objective_for(model, TrainConfig()).batch(ids)
    ours = objective_for(model, TrainConfig()).loss(model, batch)
    theirs = reference(input_ids=ids, labels=ids).loss
    assert abs(float(ours) - float(theirs)) < 1e-5


def test_tiny_bert_masked_lm_loss_equals_transformers(tmp_path) -> None:
    config = transformers.BertConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    reference = transformers.BertForMaskedLM(config).eval()
    reference.save_pretrained(tmp_path, safe_serialization=True)
    model = zoo.from_pretrained(str(tmp_path)).eval()
    objective = objective_for(model, TrainConfig(mask_token_id=103 % 128))
    ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(0))
    batch = objective.batch(ids, torch.Generator().manual_seed(1))
    ours = objective.loss(model, batch)
    theirs = reference(input_ids=batch.input_ids, labels=batch.labels).loss
    assert abs(float(ours) - float(theirs)) < 1e-5
