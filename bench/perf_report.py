"""The machine side of bench/vs_transformers.py: bandwidth probe, CPU description, Markdown.

The bandwidth is what a large float32 matrix-vector product streams (the matrix is far larger
than the last-level cache, so every byte comes from memory once per product), timed with
the same threads and medians as the models: the decode roofline then compares like with like.
Two products are timed, torch's ``torch.mv`` and zoo's own fused row kernel
(``zoo/components/row_product.py``), and the faster sets the bandwidth: a roofline set by the
slower kernel would let zoo's decode read above 100% of it.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from zoo.files.atomic import write_text_atomic
from zoo.components.row_product import compiled_row_product

PROBE_ROWS, PROBE_COLS = 16384, 8192  # 512 MiB of float32, far above the last-level caches here (32-105 MiB)


def bandwidth_probe(repeats: int = 5, device: str = "cpu") -> float:
    """Bytes/s of the faster large float32 matrix-vector product on ``device``: median of
    ``2 * repeats`` runs each. On CUDA only ``torch.mv`` runs (the row kernel is CPU-only),
    timed between synchronisations, so the roofline is the GPU's memory, not the host's."""
    on = torch.device(device)
    matrix = torch.randn(PROBE_ROWS, PROBE_COLS, device=on)  # (R, C)
    vector = torch.randn(PROBE_COLS, device=on)  # (C,)
    nbytes = matrix.numel() * matrix.element_size() + vector.numel() * 4 + PROBE_ROWS * 4
    products: dict[str, Callable[[], torch.Tensor]] = {"torch.mv": lambda: torch.mv(matrix, vector)}  # (R,)
    if on.type == "cpu":
        products["zoo row kernel"] = lambda: compiled_row_product(matrix, vector, None)  # (R,)
    sync = torch.cuda.synchronize if on.type == "cuda" else (lambda: None)
    with torch.inference_mode():
        return max(nbytes / _median_seconds(product, max(2 * repeats, 5), sync) for product in products.values())


def _median_seconds(product: Callable[[], torch.Tensor], runs: int, sync: Callable[[], None]) -> float:
    product()  # warm-up: pages touched, threads started, kernel compiled
    times = []
    for _ in range(runs):
        sync()
        start = time.perf_counter()
        product()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def cpu_description() -> str:
    """Model name and the flags that decide bf16 speed (avx512_bf16, amx_bf16)."""
    model = platform.processor() or platform.machine()
    flags: set[str] = set()
    try:
        info = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        for line in info.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Model name":
                model = value.strip()
            if key.strip() == "Flags":
                flags = set(value.split())
    except OSError:
        pass
    wanted = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile") if f in flags]
    return f"{model}, {os.cpu_count()} logical CPUs; flags: {' '.join(wanted) or 'unknown'}"


def _row(r: Any) -> str:
    c = r.case
    zoo_decode, hf_decode = r.rate(r.zoo, "decode"), r.rate(r.hf, "decode")
    roof = r.roofline_tokens_per_s
    return (
        f"| {c.family} | {c.dtype} | {c.batch} | {c.prompt} | {c.threads} "
        f"| {r.rate(r.zoo, 'prefill'):.0f} | {r.rate(r.hf, 'prefill'):.0f} | **{r.ratio('prefill'):.2f}** "
        f"| {zoo_decode:.2f} | {hf_decode:.2f} | **{r.ratio('decode'):.2f}** "
        f"| {r.bytes_per_token / 1e6:.0f} | {roof:.2f} | {zoo_decode / roof:.0%} | {hf_decode / roof:.0%} "
        f"| {'yes' if r.first_tokens_agree else 'no'} |"
    )


def write_markdown(results: list[Any], args: argparse.Namespace, command: str, bandwidths: dict[int, float], out: Path | None) -> str:
    """The results table (and how it was made) as Markdown; written whole to ``out`` if given."""
    import transformers

    lines = [
        "## Measured",
        "",
        f"- command: `{command}`",
        f"- machine: {cpu_description()}" + (f"; GPU: {torch.cuda.get_device_name()}" if args.device.startswith("cuda") else ""),
        f"- torch {torch.__version__}, transformers {transformers.__version__}, device {args.device}, "
        f"{'compiled' if args.compile else 'eager'}, transformers cache: {'static' if args.compile else args.hf_cache}",
        f"- {args.layers} layers per model, decode {args.decode} tokens after the prompt, "
        f"{args.repeats} alternating rounds per case; tokens/s are medians, ratios the median of per-round ratios",
        f"- bandwidth on {args.device} ({'torch.mv' if args.device.startswith('cuda') else 'the faster of torch.mv and zoo row kernel'}, float32, 512 MiB): "
        + ", ".join(f"{bw / 1e9:.1f} GB/s at {t} thread{'s' if t > 1 else ''}" for t, bw in sorted(bandwidths.items())),
        "",
        "| family | dtype | batch | prompt | threads | zoo prefill tok/s | hf prefill tok/s | prefill ratio "
        "| zoo decode tok/s | hf decode tok/s | decode ratio | MB read/token | roofline tok/s "
        "| zoo of roofline | hf of roofline | same first token |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *(_row(r) for r in results),
        "",
    ]
    text = "\n".join(lines)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        previous = out.read_text() if out.exists() else ""
        marker = "<!-- measured: regenerated by bench/vs_transformers.py below this line -->"
        head = previous.split(marker)[0].rstrip() + "\n\n" if marker in previous else previous
        write_text_atomic(out, f"{head}{marker}\n\n{text}")
    return text
