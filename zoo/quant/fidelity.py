"""How far quantized weights move a model: logits against the unquantized model, perplexity.

The reference is the same model on the same weights before quantization, so the figures
measure the quantization alone. Prompts are fixed (drawn from a seeded generator), so two
runs of one model and weights dtype report the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from zoo.errors import BenchError
from zoo.files.safe_io import read_text

FIDELITY_PROMPTS = 2  # rows of fixed prompt tokens
FIDELITY_PROMPT_LEN = 32
FIDELITY_SEED = 1234
EVAL_WINDOW = 256  # perplexity: the text is scored in windows of this many tokens
EVAL_MAX_TOKENS = 2048  # and at most this many (keeps a CPU run short)
EVAL_MAX_BYTES = 16 << 20  # an --eval-text file larger than this is refused (it is cut to EVAL_MAX_TOKENS anyway)


@dataclass(frozen=True)
class Fidelity:
    """Logit agreement of a quantized model with its reference on the fixed prompts."""

    max_logit_error: float  # max |logit_q - logit_ref| over every position and vocab entry
    kl_divergence: float  # mean over positions of KL(ref || quantized), in nats


def fixed_prompts(vocab_size: int, device: torch.device, max_len: int = FIDELITY_PROMPT_LEN) -> torch.Tensor:
    """The fidelity prompts (FIDELITY_PROMPTS, at most FIDELITY_PROMPT_LEN), the same for every run."""
    generator = torch.Generator().manual_seed(FIDELITY_SEED)
    shape = (FIDELITY_PROMPTS, min(FIDELITY_PROMPT_LEN, max_len))
    return torch.randint(vocab_size, shape, generator=generator).to(device)


@torch.no_grad()
def logits_on(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """Float32 logits (B, T, vocab) of a whole-sequence forward (no cache)."""
    return model(tokens).float()  # (B, T, vocab)


def compare_logits(reference: torch.Tensor, quantized: torch.Tensor) -> Fidelity:
    """Max absolute logit error and mean KL(reference || quantized) over positions."""
    ref_logp = F.log_softmax(reference, dim=-1)  # (B, T, vocab)
    q_logp = F.log_softmax(quantized, dim=-1)  # (B, T, vocab)
    kl = (ref_logp.exp() * (ref_logp - q_logp)).sum(-1)  # (B, T)
    return Fidelity(max_logit_error=float((quantized - reference).abs().max()), kl_divergence=float(kl.mean()))


def text_tokens(path: str | Path, vocab_size: int, tokenizer: Any | None = None) -> torch.Tensor:
    """Token ids (N,) of a text file: through the checkpoint's own tokenizer (a
    ``tokenizers.Tokenizer``), or for random weights, which have none, the UTF-8 bytes."""

    file = Path(path)
    text = read_text(file, BenchError, "eval_text file", limit=EVAL_MAX_BYTES)
    if tokenizer is not None:
        ids = tokenizer.encode(text).ids
    else:
        if vocab_size < 256:
            raise BenchError(f"eval_text: byte tokens need a vocabulary of at least 256; the model has {vocab_size}")
        ids = list(text.encode("utf-8"))
    if len(ids) < 2:
        raise BenchError(f"eval_text: {file} holds fewer than 2 tokens; perplexity needs at least 2")
    return torch.tensor(ids[:EVAL_MAX_TOKENS], dtype=torch.long)


@torch.no_grad()
def perplexity(model: nn.Module, tokens: torch.Tensor, max_len: int) -> float:
    """exp of the mean next-token loss over ``tokens`` (N,), scored in independent windows."""
    window = min(EVAL_WINDOW, max_len)
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for start in range(0, tokens.numel() - 1, window):
        chunk = tokens[start : start + window + 1].to(device)  # (w + 1,)
        if chunk.numel() < 2:
            break
        logits = model(chunk[None, :-1]).float()[0]  # (w, vocab)
        total += float(F.cross_entropy(logits, chunk[1:], reduction="sum"))
        count += chunk.numel() - 1
    return math.exp(total / count)
