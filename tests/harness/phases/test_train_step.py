"""The train_step phase (``zoo bench --train``): one more phase file and its Row fields, the
step measured by zoo.training on a copy of the run's model (the inference phases' weights
untouched), its memory beside the analysis."""

from __future__ import annotations

import zoo

TINY = {
    "n_layers": 2,
    "d_model": 64,
    "attention.n_heads": 4,
    "attention.n_kv_heads": 2,
    "attention.head_dim": 16,
    "ffn.hidden": 128,
    "vocab_size": 256,
}


def test_a_train_step_fills_its_row_fields_beside_the_inference_phases():
    spec = zoo.spec("llama-3.2-1b").override(TINY)
    row = zoo.bench(spec, prompt_len=32, gen_len=3, repeats=2, warmup=1, threads=1, train=True)
    assert row.phases[-1] == "train_step" and "decode" in row.phases
    assert row.train_tokens_per_s > 0 and row.train_step_s_p50 > 0
    assert row.train_objective == "causal-lm"
    # hand count of what the analysis must at least hold: float32 weights, their gradients, AdamW's two moments
    params = sum(p.numel() for p in zoo.build(spec, device="meta").parameters())
    assert row.train_memory_analysed >= 4 * params * 4
    assert abs(row.train_peak_bytes - row.train_memory_analysed) <= 0.1 * row.train_peak_bytes


def test_without_train_the_phase_does_not_run():
    row = zoo.bench(zoo.spec("llama-3.2-1b").override(TINY), prompt_len=16, gen_len=3, repeats=1, threads=1)
    assert "train_step" not in row.phases and row.train_tokens_per_s is None


def test_mfu_divides_by_the_rows_host_peak_and_the_formula_holds():
    """The MFU's peak is the measured host's (``zoo hardware``'s cache, seeded here with a fixed
    float32 matmul rate), the same peaks the roofline columns use, not a probe of its own."""
    from tests.conftest import FIXED_HOST_FLOPS

    row = zoo.bench(zoo.spec("llama-3.2-1b").override(TINY), prompt_len=16, gen_len=3, repeats=2, threads=1, train=True)
    assert row.train_peak_flops == FIXED_HOST_FLOPS["float32"]
    assert row.train_peak_flops_source.startswith("measured host (")
    assert row.train_mfu == row.train_model_flops_per_step / row.train_step_s_p50 / row.train_peak_flops


def test_the_mfu_of_a_known_gpu_is_against_its_spec_sheet_and_unknown_boards_get_none(monkeypatch):
    import torch

    from zoo.training import measure

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    peak, source = measure.device_peak(torch.device("cuda"), torch.bfloat16)
    assert peak == 989.4e12 and source.startswith("spec sheet h100")  # NVIDIA's dense BF16 figure for the SXM board
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA L40S")
    assert measure.device_peak(torch.device("cuda"), torch.bfloat16)[0] is None
