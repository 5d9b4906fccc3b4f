"""`zoo bench`: measure one model — parameters, memory, KV cache, tokens/s — and record it."""

from __future__ import annotations

import argparse
import sys

from zoo.cli.common import add_spec_arguments, load_spec, progress_bar
from zoo.cli.output import TableData, add_format_arguments, print_json, print_table

DEFAULTS_NOTE = (
    "Defaults (batch 1, prompt 128, gen 16, 1 warm-up round, 2 timed repeats, float32 on "
    "CPU / bfloat16 on CUDA) keep `zoo bench --arch qwen3-0.6b` under a minute on a 2-core "
    "CPU, model build included. Weights are random unless --weights is given. Each run is "
    "appended to results/bench.jsonl (and rendered to .csv and .md) under the current folder, "
    "creating it: the documented default; --no-save writes nothing, --results-dir chooses the folder."
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench",
        help="measure params, memory, KV cache and tokens/s of one model",
        description="Measure one model: parameters, weight and KV bytes, peak memory and tokens/s "
        "of prefill and decode, time to first token. " + DEFAULTS_NOTE,
    )
    add_spec_arguments(p)
    _add_weights_arguments(p)
    _add_run_arguments(p)
    _add_train_arguments(p)
    add_format_arguments(p)
    p.add_argument(
        "--results-dir",
        default="results",
        help="where results are appended, created if absent (default: results/ under the current folder)",
    )
    p.add_argument("--results-name", default="bench", help="results file stem: NAME.jsonl, .csv, .md (default: bench)")
    p.add_argument("--no-save", action="store_true", help="do not append to the results files")
    p.set_defaults(func=run_bench)


def _add_weights_arguments(p: argparse.ArgumentParser) -> None:
    """Which weights, on which device, in which dtype and layout."""
    g = p.add_argument_group("weights")
    g.add_argument(
        "--weights",
        metavar="ID_OR_DIR",
        help="benchmark a real checkpoint instead of random weights: a "
        "hub id, a folder or a GGUF file (its 4- to 8-bit matrices stay packed as int4 / int8)",
    )
    g.add_argument(
        "--dequantize",
        action="store_true",
        help="load a GGUF's packed matrices as floats of --dtype instead (default float32 on CPU)",
    )
    g.add_argument(
        "--device", default="auto", help="auto (cuda, then mps, then cpu), cpu, cuda, cuda:N, mps (default: auto)"
    )
    g.add_argument(
        "--dtype",
        help="float32, bfloat16, float16 (default: bfloat16 on CUDA and for quantized weights, "
        "a packed GGUF's included; float32 elsewhere)",
    )
    g.add_argument(
        "--weights-dtype",
        metavar="KIND",
        help="bf16, float32 (the model in that dtype), int8 or int4 (weight-only quantized linear layers, "
        "the rest in --dtype, default bfloat16) (default: unquantized)",
    )
    g.add_argument(
        "--weights-group-size", type=int, metavar="N", help="int4 group size: 32, 64, 128, 256 (default: 32)"
    )
    g.add_argument(
        "--eval-text",
        metavar="FILE",
        help="report the perplexity of this UTF-8 text file, tokenized by "
        "the checkpoint's own tokenizer (a checkpoint without one is an error); random weights, which "
        "have no tokenizer, score its UTF-8 bytes (a quantization fidelity check)",
    )


def _add_run_arguments(p: argparse.ArgumentParser) -> None:
    """The shape and timing of the run."""
    g = p.add_argument_group("run")
    g.add_argument("--batch-size", type=int, default=1, help="rows per batch (default: 1)")
    g.add_argument("--prompt-len", type=int, default=128, help="prompt tokens per row (default: 128)")
    g.add_argument(
        "--gen-len",
        type=int,
        help="tokens generated per row, the first by prefill (default: 16; an encoder generates none)",
    )
    g.add_argument("--repeats", type=int, default=2, help="timed rounds; medians and spread over them (default: 2)")
    g.add_argument("--warmup", type=int, default=1, help="untimed rounds first (default: 1)")
    g.add_argument("--compile", action="store_true", help="torch.compile the decode step (reduce-overhead on CUDA)")
    g.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    g.add_argument(
        "--impl",
        default="auto",
        metavar="NAME",
        help="token-mixer implementations: auto (the fastest that runs here), reference (pure PyTorch) "
        "or a kernel's name: cpu-scan, cpu-step, mamba-ssm, fla (default: auto)",
    )
    g.add_argument("--seed", type=int, default=0, help="seed of the random weights and prompt (default: 0)")
    g.add_argument(
        "--predict",
        metavar="GPU",
        help="roofline estimate on a GPU: h100-sxm, h100-pcie, h200, a100-80gb, l4, rtx-4090",
    )


def _add_train_arguments(p: argparse.ArgumentParser) -> None:
    """The optional training step (phase train_step)."""
    g = p.add_argument_group("training step")
    g.add_argument(
        "--train",
        action="store_true",
        help="also time a training step: forward, backward and optimizer "
        "on random tokens (batch --batch-size, sequence --prompt-len), with MFU and peak memory",
    )
    g.add_argument(
        "--train-optimizer",
        choices=("adamw", "sgd", "adafactor"),
        default="adamw",
        help="the training step's optimizer (default: adamw)",
    )
    g.add_argument(
        "--train-precision",
        choices=("float32", "bf16-mixed"),
        default="float32",
        help="float32, or bf16 autocast over float32 master weights (default: float32)",
    )
    g.add_argument("--train-checkpointing", action="store_true", help="recompute each block's forward in backward")


def run_bench(args: argparse.Namespace) -> int:
    from rich.console import Console

    from zoo.harness.run import bench
    from zoo.harness.run_config import make_config

    options = dict(
        device=args.device,
        dtype=args.dtype,
        batch_size=args.batch_size,
        prompt_len=args.prompt_len,
        repeats=args.repeats,
        warmup=args.warmup,
        compile=args.compile,
        seed=args.seed,
        weights=args.weights,
        predict=args.predict,
        threads=args.threads,
        dequantize=args.dequantize,
        **({} if args.gen_len is None else {"gen_len": args.gen_len}),
        weights_dtype=args.weights_dtype,
        weights_group_size=args.weights_group_size,
        eval_text=args.eval_text,
        impl=args.impl,
        **(
            {
                "train": True,
                "train_optimizer": args.train_optimizer,
                "train_precision": args.train_precision,
                "train_checkpointing": args.train_checkpointing,
            }
            if args.train
            else {}
        ),
    )
    make_config(**options)  # a bad option is one line before anything is read or measured
    spec = None if args.weights and not (args.arch or args.spec_file or args.hf_config) else load_spec(args)
    if not args.no_save:  # an unwritable folder or damaged log fails now, not after the run
        from zoo.harness.report.tables import check_results

        check_results(args.results_dir, args.results_name)
    with progress_bar(Console(stderr=True), "bench") as update:
        row = bench(spec, progress=update, **options)
    saved = None
    if not args.no_save:  # every topology's row goes to the same log (zoo.harness.report.tables)
        from zoo.harness.report.tables import append_result

        saved = append_result(row, args.results_dir, args.results_name)
    if args.format == "json":
        print_json(row.model_dump(mode="json"))
    elif args.format == "csv":  # every column, raw numbers: the results CSV's rendering of this one row
        from zoo.harness.report.tables import render_csv

        sys.stdout.write(render_csv([row]))
    else:
        print_table(row_table(row), args.format)
    if saved:
        sys.stderr.write(f"zoo: appended to {saved['jsonl']} (rendered: {saved['csv']}, {saved['md']})\n")  # unwrapped
    return 0


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
        where = " (no peaks known for this device)"
        if m.roofline_source:
            rate = "" if m.roofline_bytes_per_s is None else f": {m.roofline_bytes_per_s / 1e9:.1f} GB/s"
            where = f" ({m.roofline_source}{rate})"
        rows.append((f"achieved fraction, {' / '.join(label for label, _ in fractions)}{where}", text))
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
    compile_text = e.compile_mode if m.compile_s is None else f"{e.compile_mode}, {m.compile_s:,.1f} s to compile"
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
    return TableData(title, ["measure", "value"], [[n, v] for n, v in rows], right={"value"})
