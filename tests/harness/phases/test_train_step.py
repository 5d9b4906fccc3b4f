"""The train_step phase (``zoo bench --train``): one more phase file and its Row fields, the
step measured by zoo.training on a copy of the run's model (the inference phases' weights
untouched), its memory beside the analysis."""

from __future__ import annotations

import zoo

TINY = {"n_layers": 2, "d_model": 64, "attention.n_heads": 4, "attention.n_kv_heads": 2, "attention.head_dim": 16,
        "ffn.hidden": 128, "vocab_size": 256}


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
