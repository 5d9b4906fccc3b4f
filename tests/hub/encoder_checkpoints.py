"""Tiny random transformers encoders and encoder-decoders (ModernBERT, T5, BART), saved by transformers.

Each is built from a tiny config, its weights perturbed (norm scales and biases are not
trivial), and saved with ``save_pretrained``; zoo then loads the folder as a user would.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

VOCAB = 96
# ModernBERT: 4 layers so both a global (0, 3) and local (1, 2) layer run; windows of 8
# tokens (|q - k| <= 4) that 20-token inputs cross; distinct RoPE bases per layer type
MODERNBERT = dict(
    hidden_size=32,
    num_hidden_layers=4,
    num_attention_heads=4,
    intermediate_size=48,
    vocab_size=VOCAB,
    local_attention=8,
    global_rope_theta=1000.0,
    local_rope_theta=50.0,
    max_position_embeddings=64,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
    cls_token_id=1,
    sep_token_id=2,
)
T5 = dict(
    d_model=32,
    d_kv=8,
    num_heads=4,
    d_ff=48,
    num_layers=2,
    num_decoder_layers=2,
    vocab_size=VOCAB,
    relative_attention_num_buckets=8,
    relative_attention_max_distance=12,
    dropout_rate=0.0,
    pad_token_id=0,
    eos_token_id=1,
    decoder_start_token_id=0,
)
BART = dict(
    d_model=32,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=48,
    decoder_ffn_dim=48,
    vocab_size=VOCAB,
    max_position_embeddings=64,
    dropout=0.0,
    pad_token_id=1,
    bos_token_id=0,
    eos_token_id=2,
    decoder_start_token_id=2,
    forced_eos_token_id=None,
)
CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "modernbert": ("ModernBertConfig", MODERNBERT),
    "t5": ("T5Config", T5),
    "t5_gated": ("T5Config", {**T5, "feed_forward_proj": "gated-gelu", "tie_word_embeddings": False}),
    "bart": ("BartConfig", BART),
}


def make_hf_model(family: str, auto_class: str, seed: int = 0):  # type: ignore[no-untyped-def]
    """A random transformers model of ``auto_class`` (e.g. AutoModelForMaskedLM), perturbed."""
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    cls_name, kwargs = CONFIGS[family]
    config = getattr(transformers, cls_name)(**kwargs)
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = getattr(transformers, auto_class).from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.05)
        for name, buffer in model.named_buffers():
            if name.endswith("final_logits_bias"):  # BART's logits bias is a buffer, zeros at init
                buffer.normal_(std=0.5)
    return model


def save_hf_model(family: str, auto_class: str, folder: Path):  # type: ignore[no-untyped-def]
    model = make_hf_model(family, auto_class)
    model.save_pretrained(folder)
    return model


def padded_batch(length: int = 20, pad_id: int = 0, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Two rows, the second right-padded by 6 (ids (2, length), attention_mask (2, length))."""
    ids = torch.randint(3, VOCAB, (2, length), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones_like(ids)
    mask[1, -6:] = 0
    ids[1, -6:] = pad_id
    return ids, mask


def save_tiny_bert(folder: Path) -> int:
    """A tiny random BertModel (no head, with its pooler) saved to ``folder``; its parameter count."""
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        vocab_size=VOCAB,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    model = transformers.BertModel(config).eval()
    model.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())
