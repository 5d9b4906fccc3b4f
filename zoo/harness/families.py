"""The harness by model family: which benchmark a sweep point runs and which analysis its
row carries, for decoder-only, encoder-only and encoder-decoder models alike.

The family comes from ``zoo.analysis.counts.model_family`` (the one place that decides it); this
module maps each family to its benchmark (``BENCHES``) and its analysis (``ANALYSES``), so
the point runner, the executors and the subprocess entry point never test a kind. Columns a
family does not have are None in its rows (an encoder keeps no cache: no KV bytes, not 0),
so a grid mixing families (``arch=bert-base-uncased,gpt2``) gives each row the columns of
its own family.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from zoo.analysis.counts import Family, model_family
from zoo.errors import BenchError
from zoo.harness.child_run import child_main, run_child
from zoo.harness.phases.encode import EncoderMeasurement, bench_encoder
from zoo.harness.run import BenchConfig, Measurement
from zoo.harness.run import bench as decoder_bench
from zoo.specs.model import ModelSpec

KV_CURVE_MIN = 256  # the KV-against-context curve: powers of two from here to max_seq_len

BENCHES: dict[Family, Callable[[ModelSpec, BenchConfig], BaseModel]] = {
    "decoder": decoder_bench,
    "encoder": bench_encoder,
    "encoder-decoder": bench_encoder,
}
RESULTS: dict[Family, type[BaseModel]] = {
    "decoder": Measurement, "encoder": EncoderMeasurement, "encoder-decoder": EncoderMeasurement,
}


def measure(spec: ModelSpec, config: BenchConfig) -> BaseModel:
    """Run the benchmark of the spec's family: ``Measurement`` for a decoder-only model,
    ``EncoderMeasurement`` for the others."""
    return BENCHES[model_family(spec)](spec, config)


def family_of_run(spec: ModelSpec | None, config: BenchConfig) -> tuple[Family, ModelSpec]:
    """Which benchmark a run gets, decided here once for ``zoo bench`` and ``zoo.bench``: with
    ``config.weights`` the checkpoint's family (its spec read from its config.json or GGUF
    metadata, no weight loaded yet), else the spec's. Returns the family and that spec."""
    if config.weights:
        from zoo.hub.loading import checkpoint_spec

        spec = checkpoint_spec(config.weights)
    elif spec is None:
        raise BenchError("give a spec (an architecture) or weights to benchmark")
    return model_family(spec), spec


def bench(spec: Any, config: BenchConfig | None = None, **options: Any) -> BaseModel:
    """``zoo.bench``: measure a spec (a preset name, a mapping or a ModelSpec) or ``weights=``
    a checkpoint by its family's benchmark (``family_of_run``). Keyword options are
    BenchConfig fields; ``gen_len`` given for an encoder-only model is refused (it decodes
    nothing)."""
    from zoo.harness.run import make_config
    from zoo.model.build import as_spec

    model_spec = as_spec(spec) if spec is not None else None
    merged = make_config(**{**(config.model_dump() if config else {}), **options})
    family, run_spec = family_of_run(model_spec, merged)
    if family == "decoder":
        return decoder_bench(model_spec, config, **options)
    return bench_encoder(run_spec, merged, gen_len_given="gen_len" in options)


def context_lengths(max_seq_len: int) -> list[int]:
    """Powers of two from KV_CURVE_MIN below max_seq_len, then max_seq_len."""
    lengths, length = [], KV_CURVE_MIN
    while length < max_seq_len:
        lengths.append(length)
        length *= 2
    return [*lengths, max_seq_len]


def common_analysis(spec: ModelSpec, config: BenchConfig, dtype: Any) -> dict[str, Any]:
    """The columns every family has: name, depth, dtype, parameters, weight bytes."""
    from zoo.analysis.counts import count_params, weight_bytes

    count = count_params(spec)
    return {
        "arch": spec.name, "family": model_family(spec), "n_layers": spec.n_layers,
        "dtype": str(dtype).removeprefix("torch."), "params_total": count.total, "params_active": count.active,
        "params_embedding": count.embedding,
        "weight_bytes": weight_bytes(spec, dtype, config.weights_dtype, config.weights_group_size),
    }


def decoder_analysis(spec: ModelSpec, config: BenchConfig, dtype: Any) -> dict[str, Any]:
    """A decoder-only model: K/V per token and state per sequence, the cache at prompt + gen
    tokens, FLOPs per decoded token at the midpoint context (None where a plugin's mixer
    declares none) and the cache against context."""
    from zoo.analysis.counts import cache_bytes, flops_per_token
    from zoo.errors import PluginError

    context = config.prompt_len + config.gen_len
    try:
        flops = flops_per_token(spec, config.prompt_len + config.gen_len // 2)
    except PluginError:
        flops = None
    per_token = cache_bytes(spec, 1, 1, dtype=dtype)
    return {
        **common_analysis(spec, config, dtype),
        "kv_bytes_per_token": per_token.token, "state_bytes": per_token.sequence, "context_len": context,
        "kv_bytes": cache_bytes(spec, config.batch_size, context, dtype=dtype).total, "flops_per_token": flops,
        "kv_curve": [[n, cache_bytes(spec, 1, n, dtype=dtype).total] for n in context_lengths(spec.max_seq_len)],
    }


def encoder_analysis(spec: ModelSpec, config: BenchConfig, dtype: Any) -> dict[str, Any]:
    """An encoder-only model: FLOPs of one forward of the batch; no cache, so every KV column
    is None (not applicable, not zero)."""
    from zoo.analysis.counts import forward_flops

    B, S = config.batch_size, config.prompt_len
    return {
        **common_analysis(spec, config, dtype),
        "kv_bytes_per_token": None, "state_bytes": None, "context_len": S, "kv_bytes": None,
        "flops_per_token": None, "encoder_flops": forward_flops(spec, S, S, B),
    }


def encoder_decoder_analysis(spec: ModelSpec, config: BenchConfig, dtype: Any) -> dict[str, Any]:
    """An encoder-decoder: the encoder's FLOPs over ``prompt_len`` tokens; the decoder's
    self K/V per generated token and cross K/V per encoder token; the whole cache at
    ``gen_len`` decoder tokens and ``prompt_len`` encoder tokens; FLOPs per decoded token
    at the decoder's midpoint context."""
    from zoo.analysis.counts import cache_bytes, encoder_flops, forward_flops

    B, S, G = config.batch_size, config.prompt_len, config.gen_len
    per_token = cache_bytes(spec, 1, 1, 1, dtype=dtype)
    return {
        **common_analysis(spec, config, dtype),
        "kv_bytes_per_token": per_token.token, "cross_kv_bytes_per_token": per_token.memory,
        "state_bytes": per_token.sequence, "context_len": G, "memory_len": S,
        "kv_bytes": cache_bytes(spec, B, G, S, dtype=dtype).total,
        "flops_per_token": forward_flops(spec, 1, 1 + G // 2, memory_len=S), "encoder_flops": encoder_flops(spec, S, B),
        "kv_curve": [[n, cache_bytes(spec, 1, n, S, dtype=dtype).total] for n in context_lengths(spec.max_seq_len)],
    }


# the row analysis of each family (sweep points: ``zoo.harness.sweep.points.analyse``)
ANALYSES: dict[Family, Callable[[ModelSpec, BenchConfig, Any], dict[str, Any]]] = {
    "decoder": decoder_analysis, "encoder": encoder_analysis, "encoder-decoder": encoder_decoder_analysis,
}


# ---- a run in a fresh interpreter ------------------------------------------------------------
def measure_in_subprocess(spec: ModelSpec, config: BenchConfig, timeout: float | None = None) -> BaseModel:
    """``measure(spec, config)`` in a new Python process (``isolation="interpreter"``); the
    measurement comes back as JSON (``zoo.harness.child_run``: a ZooError in the child is a
    BenchError here with its message, a crash a BenchError with the tail of its stderr)."""
    request = {"spec": spec.to_dict(), "config": config.model_dump()}
    reply = run_child("zoo.harness.families", request, timeout)
    return RESULTS[reply["family"]].model_validate(reply["measurement"])


def _child_measure(request: dict[str, Any]) -> dict[str, Any]:
    spec = ModelSpec.model_validate(request["spec"])
    family = model_family(spec)
    measurement = BENCHES[family](spec, BenchConfig.model_validate(request["config"]))
    return {"family": family, "measurement": measurement.model_dump(mode="json")}


if __name__ == "__main__":
    raise SystemExit(child_main(_child_measure))
