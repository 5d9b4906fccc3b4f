"""A run's weights dtype: quantize the built model, and measure what that did to it.

Before quantizing, the unquantized model gives the reference: its logits on the fixed
fidelity prompts and, with ``eval_text``, its perplexity. After, the same again on the
quantized model; the row carries both (the ``weights`` phase) (zoo/quant/fidelity.py has the definitions).
Runs without quantized weights report perplexity only, when a text is given.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from zoo.hub.text import checkpoint_text, resolve
from zoo.quant import QUANTIZED, fidelity, normalize, quantize


def _checkpoint_tokenizer(weights: str | None) -> Any:
    """The checkpoint's own tokenizer (tokenizer.json, or a GGUF's), None for random weights;
    a checkpoint without one is a CheckpointError, never silently bytes as token ids."""
    if weights is None:
        return None

    return checkpoint_text(resolve(weights, None)).tokenizer


def prepare_weights(model: nn.Module, config: Any, max_len: int, vocab_size: int) -> tuple[nn.Module, dict[str, Any]]:
    """The model with ``config.weights_dtype`` applied, and the fidelity fields of the run."""

    quantized = normalize(config.weights_dtype) in QUANTIZED
    device = next(model.parameters()).device
    tokens = None
    if config.eval_text is not None:
        tokens = fidelity.text_tokens(config.eval_text, vocab_size, _checkpoint_tokenizer(config.weights))
    fields: dict[str, Any] = {}
    if not quantized:
        if tokens is not None:
            fields["eval_perplexity"] = fidelity.perplexity(model, tokens, max_len)
        return model, fields
    prompts = fidelity.fixed_prompts(vocab_size, device, max_len)  # (P, T)
    reference = fidelity.logits_on(model, prompts)  # (P, T, vocab)
    if tokens is not None:
        fields["eval_perplexity_reference"] = fidelity.perplexity(model, tokens, max_len)
    with torch.no_grad():
        quantize(model, config.weights_dtype, config.weights_group_size)
    result = fidelity.compare_logits(reference, fidelity.logits_on(model, prompts))
    fields["fidelity_max_logit_error"] = result.max_logit_error
    fields["fidelity_kl"] = result.kl_divergence
    if tokens is not None:
        fields["eval_perplexity"] = fidelity.perplexity(model, tokens, max_len)
    return model, fields
