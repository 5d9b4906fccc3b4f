"""One run's record: ``Row``, the same schema for every topology and every phase.

A column a run did not fill is None (an encoder keeps no cache: ``kv_bytes`` is None, not 0;
a run without ``--predict`` has no predicted columns). Which phases ran is ``phases``. The
columns come from four places: the analysis of the spec (``analysis_columns``), each phase's
measurement (the fields it declares, ``zoo.harness.phases.base.Phase.fields``), the
roofline (``zoo.harness.prediction``) and the environment.

Logs written before this schema are read as it: their ``family`` is the ``topology``
(a decoder row named none), an encoder-decoder's ``decoder_prefill_tokens_per_s`` is its
``prefill_tokens_per_s``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, model_validator

from zoo.analysis.counts import Topology
from zoo.harness.environment import Environment
from zoo.harness.run_config import BenchConfig

LEGACY_NAMES = {  # old column -> this schema's
    "family": "topology",
    "decoder_prefill_tokens_per_s": "prefill_tokens_per_s",
    "predicted_decoder_prefill_tokens_per_s": "predicted_prefill_tokens_per_s",
}


def renamed_legacy(columns: dict[str, Any]) -> dict[str, Any]:
    """``columns`` with the old names of ``LEGACY_NAMES`` replaced (a sweep log's analysis and
    measurement dicts are read through this too)."""
    if not any(old in columns for old in LEGACY_NAMES):
        return columns
    out = {LEGACY_NAMES.get(key, key): value for key, value in columns.items() if key not in LEGACY_NAMES.values()}
    return {**out, **{k: columns[k] for k in LEGACY_NAMES.values() if k in columns}}


class Row(BaseModel):
    """Everything one run measured and the analysis beside it, with the environment."""

    arch: str
    topology: Topology = "decoder"
    config: BenchConfig
    phases: list[str] = []  # the phases that ran, in order
    # -- analysis of the spec (zoo.harness.analysis_columns) --
    n_layers: int | None = None
    params_total: int
    params_active: int | None = None
    params_embedding: int | None = None
    params_unembedding: int | None = None
    weight_bytes: int  # as laid out (tied once; packed weights and scales when quantized)
    weights_dtype: str = ""  # bf16, float32, float16, int8 or int4: how the linear weights were stored
    kv_bytes_per_token: int | None = None  # decoder self K/V per token
    cross_kv_bytes_per_token: int | None = None  # cross K/V per encoder token
    state_bytes: int | None = None  # fixed per sequence (recurrent state, convolution windows)
    kv_bytes: int | None = None  # the whole cache of the run (K/V, cross K/V and state)
    self_kv_bytes: int | None = None  # encoder-decoder: self K/V at gen_len decoder tokens
    cross_kv_bytes: int | None = None  # encoder-decoder: cross K/V of prompt_len encoder tokens
    context_len: int | None = None  # decoder positions cached (an encoder: its input length)
    memory_len: int | None = None  # encoder tokens the cross-attention keeps
    flops_per_token: int | None = None  # decode, at the midpoint context
    decode_bytes_per_step: int | None = None  # weights read + cache read at that context
    encoder_flops: int | None = None  # one encoder forward of the batch
    # -- memory --
    memory_method: str = ""
    energy_method: str | None = None  # the counter the *_joules_per_token fields read (None: no counter)
    impl: str | None = None  # the token mixers' implementations that ran: "mamba: cpu-scan" (zoo.components.kernels)
    peak_bytes: int | None = None  # the highest peak of any phase
    # -- phase encode --
    seq_len: int | None = None  # tokens per row through the encoder
    encoder_tokens_per_s: float | None = None  # median over repeats
    encoder_tokens_per_s_min: float | None = None
    encoder_tokens_per_s_max: float | None = None
    encoder_time_s: float | None = None
    encoder_peak_bytes: int | None = None
    encoder_joules_per_token: float | None = None  # the device's energy over the timed forwards (energy_method)
    # -- phase prefill (a decoder's prompt; an encoder-decoder's start token) --
    prefill_tokens_per_s: float | None = None  # median over repeats
    prefill_tokens_per_s_min: float | None = None
    prefill_tokens_per_s_max: float | None = None
    time_to_first_token_s: float | None = None  # median
    ttft_min_s: float | None = None
    ttft_max_s: float | None = None
    prefill_peak_bytes: int | None = None
    prefill_joules_per_token: float | None = None
    # -- phase decode --
    decode_tokens_per_s: float | None = None  # median over repeats, generated tokens only
    decode_tokens_per_s_min: float | None = None
    decode_tokens_per_s_max: float | None = None
    decode_tokens_per_s_runs: list[float] | None = None
    decode_peak_bytes: int | None = None
    itl_p50_s: float | None = None  # inter-token latency: percentiles of every timed decode step
    itl_p90_s: float | None = None
    itl_p99_s: float | None = None
    itl_steps: int | None = None  # how many steps they rest on: (gen_len - 1) x repeats
    decode_joules_per_token: float | None = None
    compile_s: float | None = None  # compiled runs: first calls of the compiled prefill and decode step
    # -- phase weights (quantized runs, --eval-text) --
    fidelity_max_logit_error: float | None = None  # against the same weights unquantized
    fidelity_kl: float | None = None  # mean KL(unquantized || quantized) per position, nats
    eval_perplexity: float | None = None  # of eval_text, this run's model
    eval_perplexity_reference: float | None = None  # of eval_text, unquantized (quantized runs only)
    # -- roofline (zoo.harness.prediction) --
    predicted_gpu: str | None = None
    predicted_encoder_tokens_per_s: float | None = None
    predicted_prefill_tokens_per_s: float | None = None
    predicted_decode_tokens_per_s: float | None = None
    predicted_bound: str | None = None  # "prefill: compute, decode: memory"
    roofline_source: str | None = None  # the peaks the fractions divide by: "spec sheet h100-sxm"
    roofline_bytes_per_s: float | None = None  # their bandwidth (CPU: the read bandwidth sampled in the run)
    encoder_roofline_fraction: float | None = None  # of the roofline on the device in hand
    prefill_roofline_fraction: float | None = None
    decode_roofline_fraction: float | None = None
    # -- phase train_step (--train) --
    train_tokens_per_s: float | None = None  # median over the timed steps
    train_tokens_per_s_min: float | None = None
    train_tokens_per_s_max: float | None = None
    train_step_s_p50: float | None = None
    train_step_s_p90: float | None = None
    train_peak_bytes: int | None = None  # measured (train_memory_probe says how)
    train_memory_probe: str | None = None
    train_memory_analysed: int | None = None  # zoo.analysis.training.training_memory's total
    train_mfu: float | None = None  # model FLOPs per step / step time / peak FLOP/s
    train_hfu: float | None = None  # hardware FLOPs (recomputation included) likewise
    train_peak_flops_source: str | None = None  # the row's roofline peaks: a GPU's spec sheet or the measured host
    train_peak_flops: float | None = None  # FLOP/s the MFU divides by (None: a board with no known peak)
    train_model_flops_per_step: int | None = None  # zoo.analysis.training.training_flops (the module graph, not 6N)
    train_loss: float | None = None
    train_objective: str | None = None
    predicted_train_tokens_per_s: float | None = None
    # -- phase train_run (--train-tokens): a short run from scratch on a text --
    train_held_out_loss: float | None = None  # mean loss (nats/token) on the text's held-out last tenth
    train_perplexity: float | None = None  # exp(train_held_out_loss)
    train_run_tokens: int | None = None  # tokens trained on (steps x rows x row length)
    train_run_tokens_per_s: float | None = None  # training tokens/s over the steps this run timed
    train_tokenizer: str | None = None  # "bytes" or the tokenizer.json trained with
    train_run_start_step: int | None = None  # 0: trained from scratch here; k: resumed from a checkpoint at step k
    train_run_dir: str | None = None  # the variant's checkpoint, loss curve and result (safetensors + JSON)
    train_curve: list[tuple[int, float]] | None = None  # (tokens seen, training loss) per step
    train_roofline_fraction: float | None = None
    environment: Environment
    timestamp: str

    @model_validator(mode="before")
    @classmethod
    def _legacy_columns(cls, data: Any) -> Any:
        return renamed_legacy(data) if isinstance(data, dict) else data

    def flat(self) -> dict[str, Any]:
        """One flat row (config and environment fields inlined) for CSV and tables."""
        row = self.model_dump(exclude={"config", "environment", "decode_tokens_per_s_runs", "phases", "train_curve"})
        row.update(self.config.model_dump())
        if self.topology == "encoder":
            row["gen_len"] = None  # an encoder decodes nothing: the config's default was not run
        row.update(self.environment.model_dump())
        runs = self.decode_tokens_per_s_runs
        row["decode_tokens_per_s_runs"] = None if runs is None else " ".join(f"{v:.3f}" for v in runs)
        row["phases"] = " ".join(self.phases)
        return row
