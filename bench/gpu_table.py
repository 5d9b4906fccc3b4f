"""The GPU table: every family's speed on the CUDA device in hand, in one command.

    python bench/gpu_table.py                      # the full table on the GPU, within --budget-s
    python bench/gpu_table.py --tiny               # the same table at tiny sizes (a CPU: under a minute)

Each case runs through ``zoo bench``'s own code (``zoo.harness.run.bench``; on CUDA in a fresh
interpreter per case, so an out-of-memory case cannot take the table down) and becomes one
line: model, mode, tokens/s, the fraction of the spec-sheet roofline (the phase's own
prediction on the device's GPU row, ``zoo.analysis.devices``), the fraction of the bandwidth
measured here by a copy probe, compile seconds, time to first token and, where NVML is
present (``pip install zoo[energy]``), joules per token of the case's dominant phase: the
row's own ``*_joules_per_token``, read around its timed rounds only (build, warm-up and
compilation excluded).

The command budgets itself: a case whose estimated time exceeds what is left of
``--budget-s`` (default 1,200 s), or whose weights and cache exceed the free device memory,
is skipped with the reason. Every finished line is appended to
``results/gpu-<device>.jsonl`` and the Markdown ``results/gpu-<device>.md`` is rewritten
whole after each case, so a table cut short keeps what it measured; ``--resume`` keeps the
cases an earlier run on the same device measured and runs the rest, so a lent GPU's short
sessions complete the table in turns.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

LLAMA_1B = dict(vocab=128256, dim=2048, n_layers=16, n_heads=32, n_kv_heads=8, head_dim=64, hidden=8192)
LLAMA_8B = dict(vocab=128256, dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, head_dim=128, hidden=14336)
GDN_HYBRID = {
    "layers": {
        "0::4,1::4,2::4": {
            "attention": {
                "kind": "gated_deltanet",
                "n_k_heads": 8,
                "n_v_heads": 16,
                "head_k_dim": 128,
                "head_v_dim": 128,
            }
        }
    }
}
TINY_WIDTHS = {  # option -> tiny value, for every component that has the option (--tiny)
    "n_heads": 4,
    "n_kv_heads": 2,
    "head_dim": 16,
    "hidden": 64,
    "n_experts": 4,
    "top_k": 2,
    "shared_hidden": 32,
    "dt_rank": 4,
    "d_state": 8,
    "state_size": 16,
    "chunk_size": 16,
    "n_k_heads": 2,
    "n_v_heads": 4,
    "head_k_dim": 16,
    "head_v_dim": 16,
    "n_groups": 1,
    "window": 32,
}


@dataclass(frozen=True)
class Case:
    model: str  # a preset, or "gpt-fast loop" (bench/gpt_fast_ref.py)
    mode: str
    options: dict[str, Any]  # BenchConfig fields
    estimate_s: float  # on an H100, build and compile included (what the budget subtracts)
    overrides: dict[str, Any] = field(default_factory=dict)  # spec overrides (a hybrid's layers)
    plugin: str | None = None  # the entry point a preset needs (skipped without it)


def _decode(model: str, batch: int, compiled: bool, estimate: float, **extra: Any) -> Case:
    mode = f"decode b{batch} {'compiled' if compiled else 'eager'}"
    return Case(
        model, mode, {"batch_size": batch, "compile": compiled, "prompt_len": 128, "gen_len": 129}, estimate, **extra
    )


def _first_token(model: str, prompt: int, estimate: float) -> Case:
    return Case(model, f"ttft {prompt}", {"prompt_len": prompt, "gen_len": 2, "repeats": 5}, estimate)


def _prefill(model: str, estimate: float, **extra: Any) -> Case:
    return Case(model, "prefill 2048", {"prompt_len": 2048, "gen_len": 2}, estimate, **extra)


def _gpt_fast(shape: str, batch: int, estimate: float) -> Case:
    """gpt-fast's own decode loop (bench/gpt_fast_ref.py) at a model's shape: the reference."""
    options = {"batch_size": batch, "compile": True, "prompt_len": 128, "gen_len": 129, "shape": shape}
    return Case("gpt-fast loop", f"decode b{batch} compiled ({shape})", options, estimate)


def cases() -> list[Case]:
    """The table's rows in tiers, so that a short budget (a lent GPU's 15 minutes) still has
    every family: each family's eager decode, then its compiled decode (the path a GPU user
    takes: CUDA graphs), then prefill, batch, first-token and quantized rows, then the
    large models. Estimates are seconds of a whole case (a fresh interpreter, build, compile,
    rounds): the ``wall_s`` an H200 took where one ran (2026-11-28: eager decodes 16-18 s, the
    Gated DeltaNet hybrid 35, llama-3.2-1b compiled 158 with coordinate-descent tuning, the
    gpt-fast loop 30), guesses beside them elsewhere."""
    gdn = {"overrides": GDN_HYBRID}
    families: list[tuple[str, dict[str, Any]]] = [
        ("llama-3.2-1b", {}),
        ("qwen3-0.6b", {}),
        ("mamba-130m", {}),
        ("mamba2-130m", {}),
        ("qwen3-1.7b", gdn),
        ("rwkv-4-169m-pile", {"plugin": "rwkv"}),
    ]
    rows = [_decode(arch, 1, False, 35 if extra is gdn else 20, **extra) for arch, extra in families]
    rows += [Case("bert-base-uncased", "encoder 512", {"prompt_len": 512, "batch_size": 8}, 10)]
    rows += [_decode("t5-base", 1, False, 20)]
    rows += [_decode("llama-3.2-1b", 1, True, 160), _gpt_fast("llama-3.2-1b", 1, 30)]
    rows += [_decode(arch, 1, True, 160, **extra) for arch, extra in families[1:5]]
    rows += [_prefill(arch, 30, **extra) for arch, extra in families[:5]]
    rows += [_decode("llama-3.2-1b", 8, c, 160 if c else 20) for c in (False, True)]
    rows += [_gpt_fast("llama-3.2-1b", 8, 30)]
    rows += [_first_token("llama-3.2-1b", 128, 12), _first_token("llama-3.2-1b", 1024, 12)]
    rows += [
        Case(
            "llama-3.2-1b",
            f"decode b1 {w} compiled",
            {"weights_dtype": w, "compile": True, "prompt_len": 128, "gen_len": 129},
            160,
        )
        for w in ("int8", "int4")
    ]
    rows += [_decode("mamba-370m", 1, False, 20), _prefill("mamba-370m", 30)]
    rows += [_decode("llama-3.1-8b", b, c, 200 if c else 60) for c in (True, False) for b in (1, 8)]
    rows += [_gpt_fast("llama-3.1-8b", 1, 60)]
    for arch in ("qwen3-30b-a3b", "gpt-oss-20b"):
        rows += [_decode(arch, 1, True, 240), _decode(arch, 1, False, 120), _prefill(arch, 90)]
    return rows


def tiny_spec(spec: Any) -> Any:
    """The spec at tiny sizes: 2 layers, width 64, 256 tokens, every width option of
    ``TINY_WIDTHS`` its component has (per-layer overrides too) set small."""
    from zoo.harness.sweep.points import reduced_depth

    spec = reduced_depth(spec, 2)
    data = spec.to_dict()
    data.update(d_model=64, vocab_size=256, max_seq_len=min(spec.max_seq_len, 4096))

    def shrink(component: Any) -> None:
        if isinstance(component, dict):
            as_many_kv = component.get("n_kv_heads") is not None and component.get("n_kv_heads") == component.get(
                "n_heads"
            )
            for key in TINY_WIDTHS.keys() & component.keys():
                if isinstance(component[key], int) and not isinstance(component[key], bool):
                    component[key] = min(component[key], TINY_WIDTHS[key])
            if as_many_kv:  # multi-head attention stays multi-head
                component["n_kv_heads"] = component["n_heads"]
            for value in component.values():
                shrink(value)

    shrink(data)
    return type(spec).model_validate(data)


def tiny_options(case: Case) -> dict[str, Any]:
    """The case's options at tiny sizes: short prompts and generations, one timed round."""
    opts = {**case.options, "repeats": 1, "warmup": 1, "compile": False}
    opts["prompt_len"] = min(opts.get("prompt_len", 128), 32)
    if "gen_len" in opts:
        opts["gen_len"] = min(opts["gen_len"], 5)
    return opts


def device_slug(device: Any) -> str:
    import torch

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def copy_bandwidth(device: Any) -> float:
    """Bytes/s of a large device-to-device copy (read + write counted): the bandwidth this
    device reaches, beside the spec sheet's."""
    import torch

    n = (1 << 28) if device.type == "cuda" else (1 << 24)  # 1 GiB / 64 MiB of float32
    src = torch.empty(n, device=device)
    dst = torch.empty_like(src)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    dst.copy_(src)
    sync()
    times = []
    for _ in range(5):
        start = time.perf_counter()
        dst.copy_(src)
        sync()
        times.append(time.perf_counter() - start)
    return 2 * src.numel() * src.element_size() / sorted(times)[2]


def measure_case(case: Case, tiny: bool, device: Any, isolate: bool, timeout: float) -> dict[str, Any]:
    """One line of the table (raises for a failed case; the caller records why)."""
    import torch

    if case.model == "gpt-fast loop":
        from gpt_fast_ref import Shape, decode_tokens_per_s

        shape = Shape(**(LLAMA_1B if case.options["shape"] == "llama-3.2-1b" else LLAMA_8B))
        opts = case.options
        if tiny:
            shape = Shape(vocab=256, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, hidden=64)
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        out = decode_tokens_per_s(
            shape,
            batch=opts["batch_size"],
            prompt_len=32 if tiny else opts["prompt_len"],
            gen_len=5 if tiny else opts["gen_len"],
            device=device,
            dtype=dtype,
            compile=opts["compile"] and not tiny,
        )
        return {"decode_tokens_per_s": out["decode_tokens_per_s"], "compile_s": out["compile_s"] or None}
    import zoo
    from zoo.harness.run import bench, measure_in_subprocess
    from zoo.harness.run_config import make_config

    spec = zoo.spec(case.model).override(case.overrides) if case.overrides else zoo.spec(case.model)
    opts = tiny_options(case) if tiny else dict(case.options)
    if tiny:
        spec = tiny_spec(spec)
    config = make_config(device=str(device), **opts)
    row = measure_in_subprocess(spec, config, timeout=timeout) if isolate else bench(spec, config)
    return row.model_dump(mode="json")


def table_line(case: Case, row: dict[str, Any], bandwidth: float) -> dict[str, Any]:
    """The table's columns from a Row (or the reference loop's dict)."""
    mode = case.mode
    rate_key = (
        "encoder_tokens_per_s"
        if mode.startswith("encoder")
        else "prefill_tokens_per_s"
        if mode.startswith(("prefill", "ttft"))
        else "decode_tokens_per_s"
    )
    rate = row.get(rate_key)
    fraction = row.get(rate_key.replace("_tokens_per_s", "_roofline_fraction"))
    achieved = None
    if rate_key == "decode_tokens_per_s" and rate and row.get("decode_bytes_per_step"):
        batch = row.get("config", {}).get("batch_size", 1)
        achieved = row["decode_bytes_per_step"] * rate / batch / bandwidth
    return {
        "model": case.model,
        "mode": mode,
        "tokens_per_s": rate,
        "roofline_fraction": fraction,
        "measured_bandwidth_fraction": achieved,
        "compile_s": row.get("compile_s"),
        "ttft_s": row.get("time_to_first_token_s"),
        "joules_per_token": row.get(rate_key.replace("_tokens_per_s", "_joules_per_token")),
        "impl": row.get("impl"),
        "status": "ok",
    }


def markdown(device_name: str, bandwidth: float, lines: list[dict[str, Any]], budget_s: float) -> str:
    head = [
        "model",
        "mode",
        "tokens/s",
        "of roofline",
        "of measured bandwidth",
        "compile s",
        "TTFT ms",
        "J/token",
        "status",
        "measured",
    ]
    out = [
        f"# GPU table: {device_name}",
        "",
        f"Measured copy bandwidth {bandwidth / 1e9:,.0f} GB/s (the last run); its budget {budget_s:,.0f} s; "
        "`python bench/gpu_table.py` (zoo bench's own code per case; with `--resume`, rows an earlier "
        "run measured are kept: `measured` says when).",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for x in lines:
        cells = [
            x["model"],
            x["mode"],
            _num(x.get("tokens_per_s"), "{:,.1f}"),
            _num(x.get("roofline_fraction"), "{:.1%}"),
            _num(x.get("measured_bandwidth_fraction"), "{:.1%}"),
            _num(x.get("compile_s"), "{:.1f}"),
            _num(x.get("ttft_s") and x["ttft_s"] * 1000, "{:.2f}"),
            _num(x.get("joules_per_token"), "{:.4f}"),
            x["status"],
            x.get("timestamp", "")[:16].replace("T", " ") if x["status"] == "ok" else "",
        ]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def _num(value: Any, fmt: str) -> str:
    return "" if value is None else fmt.format(value)


def fits_memory(case: Case, device: Any, tiny: bool) -> str | None:
    """Why the case cannot fit the free device memory (None when it can or when unknown)."""
    import torch

    if tiny or device.type != "cuda" or case.model == "gpt-fast loop":
        return None
    import zoo
    from zoo.analysis.counts import cache_bytes, weight_bytes

    spec = zoo.spec(case.model).override(case.overrides) if case.overrides else zoo.spec(case.model)
    o = case.options
    need = (
        weight_bytes(spec, torch.bfloat16, o.get("weights_dtype"))
        + cache_bytes(
            spec, o.get("batch_size", 1), o.get("prompt_len", 128) + o.get("gen_len", 2), dtype=torch.bfloat16
        ).total
    )
    free = torch.cuda.mem_get_info(device)[0]
    if need > 0.9 * free:
        return f"skipped: needs {need / 2**30:,.1f} GiB, {free / 2**30:,.1f} GiB free"
    return None


def measured_before(jsonl: Path, device_name: str) -> dict[tuple[str, str], dict[str, Any]]:
    """The newest measured ("ok") line of each case an earlier run on ``device_name`` saved in
    ``jsonl``: what ``--resume`` keeps instead of measuring again."""
    from zoo.harness.sweep.results_log import parse_rows

    kept: dict[tuple[str, str], dict[str, Any]] = {}
    if not jsonl.exists():
        return kept
    for line in parse_rows(jsonl.read_bytes(), jsonl):  # a torn last line (a run cut off) is skipped
        if line.get("status") == "ok" and line.get("device") == device_name:
            kept[line["model"], line["mode"]] = line
    return kept


def run_table(args: argparse.Namespace) -> list[dict[str, Any]]:
    import torch

    from zoo.files.atomic import write_text_atomic
    from zoo.harness.sweep.results_log import append_row
    from zoo.specs.registry import get_registry

    device = torch.device("cuda" if torch.cuda.is_available() and not args.cpu else "cpu")
    tiny = args.tiny or device.type != "cuda"
    isolate = device.type == "cuda" if args.isolate is None else args.isolate
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    slug = device_slug(device) + ("-tiny" if tiny else "")
    jsonl, md = out_dir / f"gpu-{slug}.jsonl", out_dir / f"gpu-{slug}.md"
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (tiny sizes)"
    bandwidth = copy_bandwidth(device)
    plugins = get_registry().plugins
    start, lines = time.monotonic(), []
    earlier = measured_before(jsonl, name) if args.resume else {}
    selected = [c for c in cases() if not args.only or re.search(args.only, f"{c.model} {c.mode}")]
    for case in selected:
        if (case.model, case.mode) in earlier:  # measured by an earlier run on this device: kept
            lines.append(earlier[case.model, case.mode])
            continue
        left = args.budget_s - (time.monotonic() - start)
        estimate = 1.0 if tiny else case.estimate_s
        reason = None
        if case.plugin and case.plugin not in plugins:
            reason = f"skipped: plugin {case.plugin} not installed"
        elif estimate > left:
            reason = f"skipped: needs ~{estimate:.0f} s, {max(left, 0):.0f} s left"
        else:
            reason = fits_memory(case, device, tiny)
        if reason is None:
            line = _run_one(case, tiny, device, isolate, min(left, 3 * estimate + 60), bandwidth)
        else:
            line = {"model": case.model, "mode": case.mode, "status": reason}
        line.update(device=name, torch=torch.__version__, timestamp=time.strftime("%Y-%m-%dT%H:%M:%S"))
        lines.append(line)
        append_row(jsonl, line)
        write_text_atomic(md, markdown(name, bandwidth, lines, args.budget_s))
        print(
            f"{case.model:>20}  {case.mode:<24} {line['status']}  {_num(line.get('tokens_per_s'), '{:,.1f}')}",
            file=sys.stderr,
            flush=True,
        )
    write_text_atomic(md, markdown(name, bandwidth, lines, args.budget_s))
    print(md.read_text())
    return lines


def _run_one(case: Case, tiny: bool, device: Any, isolate: bool, timeout: float, bandwidth: float) -> dict[str, Any]:
    """The case's line, with ``wall_s`` (the whole case: build, compile, rounds) for the next budget."""
    start = time.monotonic()
    try:
        line = table_line(case, measure_case(case, tiny, device, isolate, timeout), bandwidth)
    except Exception as exc:
        line = {"model": case.model, "mode": case.mode, "status": f"failed: {str(exc).splitlines()[0][:200]}"}
    return {**line, "wall_s": round(time.monotonic() - start, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--budget-s", type=float, default=1200.0, help="stop starting cases after this (default 1200)")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes (the default without CUDA)")
    parser.add_argument("--cpu", action="store_true", help="run on the CPU even where CUDA is present")
    parser.add_argument("--only", help="a regular expression on 'model mode': run the matching cases only")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the cases an earlier run on this device measured (the .jsonl's newest 'ok' line of\n"
        "each) and run the rest: a lent GPU's short sessions complete the table in turns",
    )
    parser.add_argument("--out", default="results", help="folder of gpu-<device>.md and .jsonl (default results/)")
    parser.add_argument(
        "--isolate",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="each case in a fresh interpreter (default: on CUDA)",
    )
    args = parser.parse_args(argv)
    lines = run_table(args)
    return 0 if all(not x["status"].startswith("failed") for x in lines) else 1


if __name__ == "__main__":
    raise SystemExit(main())
