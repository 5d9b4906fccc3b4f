"""`zoo bench`'s rendering of one Row as a two-column table: what ran, the model, each phase,
the fidelity of quantized weights, the roofline and the environment (``row_table``); the
numbers keep their units and are never cut (``zoo.cli.output``)."""

from __future__ import annotations

from zoo.cli.output import TableData


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n:,} ({n / 2**20:,.1f} MiB)"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def _spread(median: float | None, low: float | None, high: float | None) -> str:
    return f"{_rate(median)} ({_rate(low)}–{_rate(high)})"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:,.1f} ms"


def _what_rows(m) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    """What was measured, first: the checkpoint and how its weights are held, or the architecture."""
    c = m.config
    if c.weights:
        return [("model", f"{c.weights} ({m.weights_dtype})")]
    return [("model", f"{m.arch}, random weights ({m.weights_dtype})")]


def _run_rows(m) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    c = m.config
    if m.topology == "decoder":
        shape = f"batch {c.batch_size} · prompt {c.prompt_len} · gen {c.gen_len}"
    elif m.topology == "encoder":
        shape = f"batch {c.batch_size} · length {m.seq_len}"
    else:
        shape = f"batch {c.batch_size} · length {m.seq_len} · gen {c.gen_len}"
    rows = [("run", f"{shape} · {c.repeats} repeats after {c.warmup} warm-up")]
    return rows + ([("implementations", m.impl)] if m.impl else [])


def _model_rows(m) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    rows = [
        ("params total / active / embedding", f"{m.params_total:,} / {m.params_active:,} / {m.params_embedding:,}"),
        ("weights dtype", m.weights_dtype),
        ("weight bytes", _bytes(m.weight_bytes)),
    ]
    if m.kv_bytes is not None:
        rows += [
            ("KV bytes per token", f"{m.kv_bytes_per_token:,}"),
            ("state bytes per sequence", _bytes(m.state_bytes)),
        ]
        if m.cross_kv_bytes is not None:
            rows += [
                (f"self KV bytes at {m.context_len} tokens", _bytes(m.self_kv_bytes)),
                (f"cross KV bytes of {m.memory_len} encoder tokens", _bytes(m.cross_kv_bytes)),
            ]
        rows.append((f"KV + state bytes at context {m.context_len}", _bytes(m.kv_bytes)))
    return rows


def _memory_rows(m) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    peaks = [
        ("peak memory, encoder", m.encoder_peak_bytes),
        ("peak memory, prefill", m.prefill_peak_bytes),
        ("peak memory, decode", m.decode_peak_bytes),
    ]
    energy = [
        ("energy per token, encoder", m.encoder_joules_per_token),
        ("energy per token, prefill", m.prefill_joules_per_token),
        ("energy per token, decode", m.decode_joules_per_token),
    ]
    return [
        *((name, _bytes(value)) for name, value in peaks if value is not None),
        ("memory measured as", m.memory_method),
        *((name, f"{value * 1000:,.2f} mJ") for name, value in energy if value is not None),
        *([("energy measured as", m.energy_method)] if m.energy_method else []),
    ]


def _phase_rows(m) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    rows = []
    if m.encoder_tokens_per_s is not None:
        rows += [
            (
                "encoder tokens/s (median (min–max))",
                _spread(m.encoder_tokens_per_s, m.encoder_tokens_per_s_min, m.encoder_tokens_per_s_max),
            ),
            ("encoder time", _ms(m.encoder_time_s)),
            ("encoder FLOPs per forward", f"{m.encoder_flops:,}"),
        ]
    if m.prefill_tokens_per_s is not None:
        what = "" if m.topology == "decoder" else " (start token)"
        rows.append(
            (
                f"prefill tokens/s{what} (median (min–max))",
                _spread(m.prefill_tokens_per_s, m.prefill_tokens_per_s_min, m.prefill_tokens_per_s_max),
            )
        )
    if m.decode_tokens_per_s is not None:
        rows += [
            (
                "decode tokens/s (median (min–max))",
                _spread(m.decode_tokens_per_s, m.decode_tokens_per_s_min, m.decode_tokens_per_s_max),
            ),
            (
                f"time to first token (median (min–max) of {m.config.repeats} repeats)",
                f"{_ms(m.time_to_first_token_s)} ({_ms(m.ttft_min_s)}–{_ms(m.ttft_max_s)})",
            ),
            (
                f"inter-token latency p50 / p90 / p99 (over {m.itl_steps} steps)",
                f"{_ms(m.itl_p50_s)} / {_ms(m.itl_p90_s)} / {_ms(m.itl_p99_s)}",
            ),
            ("FLOPs per decoded token", "-" if m.flops_per_token is None else f"{m.flops_per_token:,}"),
            ("bytes read per decode step", _bytes(m.decode_bytes_per_step)),
        ]
    return rows + _train_rows(m)


def _train_rows(m) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    """The training step's lines (``--train``)."""
    if m.train_tokens_per_s is None:
        return []
    c = m.config
    return [
        (
            f"training step ({m.train_objective}, {c.train_optimizer}, {c.train_precision}"
            f"{', checkpointed' if c.train_checkpointing else ''}) tokens/s (median (min–max))",
            _spread(m.train_tokens_per_s, m.train_tokens_per_s_min, m.train_tokens_per_s_max),
        ),
        ("training step time p50 / p90", f"{_ms(m.train_step_s_p50)} / {_ms(m.train_step_s_p90)}"),
        ("training memory, measured / analysed", f"{_bytes(m.train_peak_bytes)} / {_bytes(m.train_memory_analysed)}"),
        ("MFU / HFU", _mfu(m)),
    ]


def _mfu(m) -> str:  # type: ignore[no-untyped-def]
    """MFU and HFU with the formula's numbers and the peak they divide by."""
    if m.train_mfu is None:
        return f"- ({m.train_peak_flops_source})"
    return (
        f"{m.train_mfu:.1%} / {m.train_hfu:.1%} = {m.train_model_flops_per_step:.3g} FLOPs/step / "
        f"{_ms(m.train_step_s_p50)} / {m.train_peak_flops:.3g} FLOP/s ({m.train_peak_flops_source})"
    )


def _fidelity_rows(m) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    rows = []
    if m.fidelity_max_logit_error is not None:
        rows += [
            ("max logit error vs unquantized", f"{m.fidelity_max_logit_error:.4g}"),
            ("KL(unquantized || this), nats/token", f"{m.fidelity_kl:.4g}"),
        ]
    if m.eval_perplexity is not None:
        rows.append(("perplexity of --eval-text", f"{m.eval_perplexity:.4g}"))
    if m.eval_perplexity_reference is not None:
        rows.append(("perplexity unquantized", f"{m.eval_perplexity_reference:.4g}"))
    return rows


RATES = (("encoder", "encoder"), ("prefill", "prefill"), ("decode", "decode"))  # (row prefix, label)


def _roofline_rows(m) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    rows = []
    if m.predicted_gpu:
        rows += [
            (f"roofline on {m.predicted_gpu}: {label} tokens/s", _rate(getattr(m, f"predicted_{prefix}_tokens_per_s")))
            for prefix, label in RATES
            if getattr(m, f"predicted_{prefix}_tokens_per_s") is not None
        ]
        rows.append(("roofline bound", m.predicted_bound))
    fractions = [
        (label, getattr(m, f"{prefix}_roofline_fraction"))
        for prefix, label in RATES
        if getattr(m, f"{prefix}_tokens_per_s") is not None
    ]
    if m.roofline_source or m.predicted_gpu:
        text = " / ".join("-" if f is None else f"{f:.1%}" for _, f in fractions)
        rate = "" if m.roofline_bytes_per_s is None else f": {m.roofline_bytes_per_s / 1e9:.1f} GB/s"
        rows.append((f"achieved fraction, {' / '.join(label for label, _ in fractions)}", text))
        # what the fractions divide by, on a row of its own: in the label it set the label column's width
        rows.append(
            ("roofline from", f"{m.roofline_source}{rate}" if m.roofline_source else "no peaks known for this device")
        )
    return rows


def row_table(m) -> TableData:  # type: ignore[no-untyped-def]
    """A Row as a two-column table: what ran, the model, each phase, the roofline, the environment."""
    e = m.environment
    rows = [
        *_what_rows(m),
        *_run_rows(m),
        *_model_rows(m),
        *_memory_rows(m),
        *_phase_rows(m),
        *_fidelity_rows(m),
        *_roofline_rows(m),
    ]
    compile_text = e.compile_mode
    if m.compile_s is not None:
        compile_text += f", guards {e.compile_guards}, {m.compile_s:,.1f} s to compile"
    rows += [
        ("device", f"{e.device} ({e.device_name})"),
        ("dtype", e.dtype),
        ("SDPA backend", e.sdpa_backend),
        ("compile", compile_text),
        ("threads", str(e.threads)),
        ("torch", e.torch_version),
        ("zoo commit", e.zoo_commit or "-"),
    ]
    title = f"zoo bench: {m.arch}" + ("" if m.topology == "decoder" else f" ({m.topology})")
    # values left-aligned, beside their labels: text and figures with units share the column, and right-aligned
    # under its longest value (the memory method's, the roofline's basis) a short one sat 60 characters away
    return TableData(title, ["measure", "value"], [[n, v] for n, v in rows], right=set())
