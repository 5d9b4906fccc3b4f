"""`zoo bench`: measure one model — parameters, memory, KV cache, tokens/s — and record it."""

from __future__ import annotations

import argparse
import sys

from zoo.cli.common import add_spec_arguments, load_spec, progress_bar
from zoo.cli.output import TableData, add_format_arguments, print_json, print_table

DEFAULTS_NOTE = (
    "Defaults (batch 1, prompt 128, gen 16, 1 warm-up round, 2 timed repeats, float32 on "
    "CPU / bfloat16 on CUDA) keep `zoo bench --arch qwen3-0.6b` under a minute on a 2-core "
    "CPU, model build included. Weights are random unless --weights is given."
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench", help="measure params, memory, KV cache and tokens/s of one model",
        description="Measure one model: parameters, weight and KV bytes, peak memory and tokens/s "
        "of prefill and decode, time to first token. " + DEFAULTS_NOTE,
    )
    add_spec_arguments(p)
    p.add_argument("--weights", metavar="ID_OR_DIR", help="benchmark a real checkpoint instead of random weights")
    p.add_argument("--device", default="auto", help="auto (cuda, then mps, then cpu), cpu, cuda, cuda:N, mps (default: auto)")
    p.add_argument("--dtype", help="float32, bfloat16, float16 (default: bfloat16 on CUDA, float32 elsewhere)")
    p.add_argument("--batch-size", type=int, default=1, help="rows per batch (default: 1)")
    p.add_argument("--prompt-len", type=int, default=128, help="prompt tokens per row (default: 128)")
    p.add_argument("--gen-len", type=int, help="tokens generated per row, the first by prefill (default: 16; "
                   "an encoder generates none)")
    p.add_argument("--repeats", type=int, default=2, help="timed rounds; medians and spread over them (default: 2)")
    p.add_argument("--warmup", type=int, default=1, help="untimed rounds first (default: 1)")
    p.add_argument("--compile", action="store_true", help="torch.compile the decode step (reduce-overhead on CUDA)")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights and prompt (default: 0)")
    p.add_argument("--predict", metavar="GPU", help="roofline estimate on a GPU: h100-sxm, h100-pcie, h200, a100-80gb, l4, rtx-4090")
    p.add_argument("--weights-dtype", metavar="KIND",
                   help="bf16, float32 (the model in that dtype), int8 or int4 (weight-only quantized linear layers, "
                   "the rest in --dtype, default bfloat16) (default: unquantized)")
    p.add_argument("--weights-group-size", type=int, metavar="N", help="int4 group size: 32, 64, 128, 256 (default: 32)")
    p.add_argument("--eval-text", metavar="FILE", help="report the perplexity of this UTF-8 text file "
                   "(the checkpoint's tokenizer.json, else UTF-8 bytes as tokens)")
    add_format_arguments(p)
    p.add_argument("--results-dir", default="results", help="where results are appended (default: results/)")
    p.add_argument("--results-name", default="bench", help="results file stem: NAME.jsonl, .csv, .md (default: bench)")
    p.add_argument("--no-save", action="store_true", help="do not append to the results files")
    p.set_defaults(func=run_bench)


def run_bench(args: argparse.Namespace) -> int:
    from rich.console import Console

    from zoo.harness.run import bench, make_config

    config = make_config(
        device=args.device, dtype=args.dtype, batch_size=args.batch_size, prompt_len=args.prompt_len,
        repeats=args.repeats, warmup=args.warmup, compile=args.compile, seed=args.seed, weights=args.weights,
        predict=args.predict, threads=args.threads, **({} if args.gen_len is None else {"gen_len": args.gen_len}),
        weights_dtype=args.weights_dtype, weights_group_size=args.weights_group_size, eval_text=args.eval_text,
    )
    spec = None if args.weights and not (args.arch or args.spec_file or args.hf_config) else load_spec(args)
    if not args.no_save:  # an unwritable folder or damaged log fails now, not after the run
        from zoo.harness.report.tables import check_results

        check_results(args.results_dir, args.results_name)
    from zoo.harness.families import family_of_run

    family, run_spec = family_of_run(spec, config)  # --weights: the checkpoint's family, as --arch
    if family == "decoder":
        with progress_bar(Console(stderr=True), "bench") as update:
            measurement = bench(spec, config, progress=update)
        table = measurement_table
    else:
        from zoo.harness.phases.encode import bench_encoder

        measurement = bench_encoder(run_spec, config, gen_len_given=args.gen_len is not None)
        table = encoder_table
    saved = None
    if not args.no_save:  # every family's row goes to the same log (zoo.harness.report.tables)
        from zoo.harness.report.tables import append_result

        saved = append_result(measurement, args.results_dir, args.results_name)
    if args.format == "json":
        print_json(measurement.model_dump(mode="json"))
    else:
        print_table(table(measurement), args.format)
    if saved:
        sys.stderr.write(f"zoo: appended to {saved['jsonl']} (rendered: {saved['csv']}, {saved['md']})\n")  # unwrapped
    return 0


def encoder_table(m) -> TableData:  # type: ignore[no-untyped-def]
    """An EncoderMeasurement as a two-column table."""
    c, e = m.config, m.environment
    rows = [
        ("run", f"batch {c.batch_size} · length {m.seq_len} · {c.repeats} repeats after {c.warmup} warm-up"),
        ("params total", f"{m.params_total:,}"),
        ("weight bytes", _bytes(m.weight_bytes)),
        ("encoder tokens/s (median (min–max))",
         f"{_rate(m.encoder_tokens_per_s)} ({_rate(m.encoder_tokens_per_s_min)}–{_rate(m.encoder_tokens_per_s_max)})"),
        ("encoder time", f"{m.encoder_time_s * 1000:,.1f} ms"),
        ("encoder FLOPs per forward", f"{m.encoder_flops:,}"),
        ("peak memory", _bytes(m.peak_bytes)),
        ("memory measured as", m.memory_method),
    ]
    if m.family == "encoder-decoder":
        rows += [
            ("decoder prefill tokens/s (start token)", _rate(m.decoder_prefill_tokens_per_s)),
            ("decode tokens/s", _rate(m.decode_tokens_per_s)),
            (f"self KV bytes at {c.gen_len} tokens", _bytes(m.self_kv_bytes)),
            (f"cross KV bytes of {m.seq_len} encoder tokens", _bytes(m.cross_kv_bytes)),
        ]
    if m.predicted_gpu:
        rows += [(f"roofline on {m.predicted_gpu}: encoder tokens/s", _rate(m.predicted_encoder_tokens_per_s))]
        if m.family == "encoder-decoder":
            rows += [(f"roofline on {m.predicted_gpu}: decoder prefill tokens/s", _rate(m.predicted_decoder_prefill_tokens_per_s)),
                     (f"roofline on {m.predicted_gpu}: decode tokens/s", _rate(m.predicted_decode_tokens_per_s))]
        rows += [("roofline bound", m.predicted_bound),
                 ("achieved fraction, encoder", "-" if m.encoder_roofline_fraction is None else f"{m.encoder_roofline_fraction:.1%}")]
    rows += [("device", f"{e.device} ({e.device_name})"), ("dtype", e.dtype), ("SDPA backend", e.sdpa_backend),
             ("threads", str(e.threads)), ("torch", e.torch_version), ("zoo commit", e.zoo_commit or "-")]
    return TableData(f"zoo bench: {m.arch} ({m.family})", ["measure", "value"], [[n, v] for n, v in rows], right={"value"})


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n:,} ({n / 2**20:,.1f} MiB)"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def _fidelity_rows(m) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    rows = []
    if m.fidelity_max_logit_error is not None:
        rows += [("max logit error vs unquantized", f"{m.fidelity_max_logit_error:.4g}"),
                 ("KL(unquantized || this), nats/token", f"{m.fidelity_kl:.4g}")]
    if m.eval_perplexity is not None:
        rows.append(("perplexity of --eval-text", f"{m.eval_perplexity:.4g}"))
    if m.eval_perplexity_reference is not None:
        rows.append(("perplexity unquantized", f"{m.eval_perplexity_reference:.4g}"))
    return rows


def measurement_table(m) -> TableData:  # type: ignore[no-untyped-def]
    """Every field of a Measurement as a two-column table, grouped."""
    c, e = m.config, m.environment
    rows = [
        ("run", f"batch {c.batch_size} · prompt {c.prompt_len} · gen {c.gen_len} · {c.repeats} repeats after {c.warmup} warm-up"),
        ("params total / active / embedding", f"{m.params_total:,} / {m.params_active:,} / {m.params_embedding:,}"),
        ("weights dtype", m.weights_dtype),
        ("weight bytes", _bytes(m.weight_bytes)),
        ("KV bytes per token", f"{m.kv_bytes_per_token:,}"),
        ("state bytes per sequence", _bytes(m.state_bytes)),
        (f"KV + state bytes at context {m.context_len}", _bytes(m.kv_bytes)),
        ("peak memory, prefill", _bytes(m.prefill_peak_bytes)),
        ("peak memory, decode", _bytes(m.decode_peak_bytes)),
        ("memory measured as", m.memory_method),
        ("prefill tokens/s (median (min–max))", f"{_rate(m.prefill_tokens_per_s)} ({_rate(m.prefill_tokens_per_s_min)}–{_rate(m.prefill_tokens_per_s_max)})"),
        ("decode tokens/s (median (min–max))", f"{_rate(m.decode_tokens_per_s)} ({_rate(m.decode_tokens_per_s_min)}–{_rate(m.decode_tokens_per_s_max)})"),
        ("time to first token", f"{m.time_to_first_token_s * 1000:,.1f} ms"),
        ("FLOPs per decoded token", "-" if m.flops_per_token is None else f"{m.flops_per_token:,}"),
        ("bytes read per decode step", _bytes(m.decode_bytes_per_step)),
    ]
    rows += _fidelity_rows(m)
    if m.predicted_gpu:
        rows += [
            (f"roofline on {m.predicted_gpu}: prefill tokens/s", _rate(m.predicted_prefill_tokens_per_s)),
            (f"roofline on {m.predicted_gpu}: decode tokens/s", _rate(m.predicted_decode_tokens_per_s)),
            ("roofline bound", m.predicted_bound),
            ("achieved fraction, prefill / decode",
             "-" if m.prefill_roofline_fraction is None else f"{m.prefill_roofline_fraction:.1%} / {m.decode_roofline_fraction:.1%}"),
        ]
    rows += [
        ("device", f"{e.device} ({e.device_name})"),
        ("dtype", e.dtype),
        ("SDPA backend", e.sdpa_backend),
        ("compile", e.compile_mode if m.compile_s is None else f"{e.compile_mode}, {m.compile_s:,.1f} s to compile"),
        ("threads", str(e.threads)),
        ("torch", e.torch_version),
        ("zoo commit", e.zoo_commit or "-"),
    ]
    return TableData(f"zoo bench: {m.arch}", ["measure", "value"], [[n, v] for n, v in rows], right={"value"})
