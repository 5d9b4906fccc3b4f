"""BERT and RoBERTa: tiny checkpoints saved by transformers load through from_pretrained and
compute what transformers computes (hidden states, pooler, masked-LM logits), padding included."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

import zoo
from zoo.hub.config import spec_from_hf_config

transformers = pytest.importorskip("transformers")

TINY = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=48,
    max_position_embeddings=40,
    type_vocab_size=2,
)


def _hf(cls_name: str, config_name: str, seed: int = 0, **extra):  # type: ignore[no-untyped-def]
    transformers.logging.set_verbosity_error()
    config = getattr(transformers, config_name)(**{**TINY, **extra})
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = getattr(transformers, cls_name)(config).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    return model


def _batch(pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    ids = torch.randint(3, 99, (3, 9))
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[1, 6:] = 0  # right padding, as tokenizers pad encoders
    mask[2, 3:] = 0
    ids = ids.masked_fill(mask == 0, pad_id)
    types = torch.zeros_like(ids)
    types[:, 4:] = 1
    return ids, mask, types


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_base_model_hidden_states_and_pooler_match_transformers(tmp_path, family):
    cls, cfg = ("BertModel", "BertConfig") if family == "bert" else ("RobertaModel", "RobertaConfig")
    hf = _hf(cls, cfg, pad_token_id=1 if family == "roberta" else 0)
    hf.save_pretrained(tmp_path)
    model = zoo.from_pretrained(tmp_path, progress=False)
    assert model.spec.head.kind == "pooler" and not model.can_generate
    ids, mask, types = _batch(hf.config.pad_token_id)
    with torch.no_grad():
        want = hf(input_ids=ids, attention_mask=mask, token_type_ids=types)
        hidden = model(ids, attention_mask=mask, token_type_ids=types)
    real = mask.bool()
    torch.testing.assert_close(hidden[real], want.last_hidden_state[real], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(model.lm_head.pool(hidden), want.pooler_output, atol=1e-4, rtol=1e-4)
    assert zoo.count_params(model).total == sum(p.numel() for p in hf.parameters())


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_masked_lm_logits_match_transformers_and_the_decoder_is_tied(tmp_path, family):
    cls, cfg = ("BertForMaskedLM", "BertConfig") if family == "bert" else ("RobertaForMaskedLM", "RobertaConfig")
    hf = _hf(cls, cfg, pad_token_id=1 if family == "roberta" else 0)
    hf.save_pretrained(tmp_path)
    model = zoo.from_pretrained(tmp_path, progress=False)
    assert model.spec.head.kind == "masked_lm" and model.lm_head.weight is model.embed.weight
    ids, mask, types = _batch(hf.config.pad_token_id)
    with torch.no_grad():
        want = hf(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
        got = model(ids, attention_mask=mask, token_type_ids=types)  # (B, T, vocab)
    real = mask.bool()
    torch.testing.assert_close(got[real], want[real], atol=1e-4, rtol=1e-4)
    assert zoo.count_params(model).total == sum(p.numel() for p in hf.parameters())
    out = zoo.save_pretrained(model, tmp_path / "again")
    back = getattr(transformers, cls).from_pretrained(out).eval()
    with torch.no_grad():
        torch.testing.assert_close(
            back(input_ids=ids, attention_mask=mask, token_type_ids=types).logits[real],
            want[real],
            atol=1e-5,
            rtol=1e-5,
        )


def test_legacy_bert_names_load(tmp_path):
    """Pre-trained BERT files carry TensorFlow-era names (LayerNorm.gamma/beta) under `bert.`,
    plus the next-sentence head and a pooler beside the masked-LM head."""
    hf = _hf("BertForPreTraining", "BertConfig")
    hf.save_pretrained(tmp_path)
    from safetensors.torch import load_file, save_file

    tensors = load_file(tmp_path / "model.safetensors")
    renamed = {
        k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
        for k, v in tensors.items()
    }
    assert any(k.startswith("bert.") for k in renamed) and any(k.endswith("gamma") for k in renamed)
    save_file(renamed, tmp_path / "model.safetensors", metadata={"format": "pt"})
    model = zoo.from_pretrained(tmp_path, progress=False)
    ids, mask, types = _batch(0)
    with torch.no_grad():
        want = hf(input_ids=ids, attention_mask=mask, token_type_ids=types).prediction_logits
        got = model(ids, attention_mask=mask, token_type_ids=types)
    torch.testing.assert_close(got[mask.bool()], want[mask.bool()], atol=1e-4, rtol=1e-4)


def test_bert_preset_counts_and_config():
    spec = zoo.spec("bert-base-uncased")
    assert zoo.count_params(spec).total == 109_482_240  # BertModel, with the pooler
    assert zoo.count_params(spec.override({"head.kind": "none"})).total == 108_891_648
    config = {
        "model_type": "bert",
        "architectures": ["BertForMaskedLM"],
        "vocab_size": 30522,
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": 512,
        "type_vocab_size": 2,
        "initializer_range": 0.02,
        "layer_norm_eps": 1e-12,
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
        "use_cache": True,
        "classifier_dropout": None,
        "gradient_checkpointing": False,
        "transformers_version": "4.6.0.dev0",
    }
    masked = spec_from_hf_config(config)
    assert masked.head.kind == "masked_lm" and zoo.count_params(masked).total == 109_514_298
    pooled = spec_from_hf_config({**config, "architectures": ["BertModel"]})
    assert zoo.count_params(pooled).total == 109_482_240
    json.dumps(pooled.to_dict())


def test_an_encoder_refuses_to_generate():
    tiny = {
        "n_layers": 1,
        "d_model": 32,
        "attention.n_heads": 2,
        "attention.n_kv_heads": 2,
        "attention.head_dim": 16,
        "ffn.hidden": 64,
    }
    model = zoo.build(zoo.spec("bert-base-uncased").override(tiny), seed=0)
    with pytest.raises(zoo.errors.GenerationError, match="cannot generate"):
        zoo.generate(model, torch.tensor([[1, 2, 3]]), max_new_tokens=2)


def test_sentence_embeddings_are_normalised_means_over_real_tokens(tmp_path):
    hf = _hf("BertModel", "BertConfig")
    hf.save_pretrained(tmp_path)
    model = zoo.from_pretrained(tmp_path, progress=False)
    ids, mask, types = _batch(0)
    vectors = zoo.embed(model, ids, mask)  # (B, d)
    with torch.no_grad():
        hidden = hf(input_ids=ids, attention_mask=mask).last_hidden_state
    want = torch.nn.functional.normalize((hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True), dim=-1)
    torch.testing.assert_close(vectors, want, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(vectors.norm(dim=-1), torch.ones(3))
    alone = zoo.embed(model, ids[2:, :3], mask[2:, :3])  # padding changes nothing
    torch.testing.assert_close(alone, vectors[2:], atol=1e-5, rtol=1e-5)
