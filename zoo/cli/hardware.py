"""`zoo hardware`: the roofline of the machine in hand — the measured host peaks every CPU row's
``*_roofline_fraction`` divides by (``zoo.analysis.host_probe``), and a CUDA board's spec sheet."""

from __future__ import annotations

import argparse
from typing import Any

from zoo.cli.output import TableData, add_format_arguments, print_json, print_table


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "hardware",
        help="the measured roofline of this machine (bandwidth, matmul FLOP/s per dtype)",
        description="Show the peaks every bench row on this machine is a fraction of: the CPU's copy and "
        "one-row product bandwidth and matmul FLOP/s per dtype, measured once per machine and thread count "
        "(a few seconds) and cached in zoo's cache folder; with a CUDA board of zoo's table, its spec sheet too.",
    )
    p.add_argument("--threads", type=int, help="torch CPU threads to measure at (default: torch's choice)")
    p.add_argument("--refresh", action="store_true", help="measure again, replacing the cached figures")
    add_format_arguments(p, formats=("table", "json", "csv", "md"))
    p.set_defaults(func=run_hardware)


def run_hardware(args: argparse.Namespace) -> int:
    import torch

    from zoo.analysis.devices import device_peaks
    from zoo.analysis.host_machine import cpu_description
    from zoo.analysis.host_probe import host_peaks
    from zoo.errors import BenchError

    if args.threads is not None:
        if args.threads < 1:
            raise BenchError(f"--threads: {args.threads} (allowed: 1 or more)")
        torch.set_num_threads(args.threads)
    host = host_peaks(refresh=args.refresh)
    document: dict[str, Any] = {
        "host": {**host.to_json(), "bandwidth": host.bandwidth, "description": cpu_description()}
    }
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name()
        board = device_peaks("cuda", name)
        document["cuda"] = {
            "device_name": name,
            "source": board.source if board else None,
            "bandwidth": board.bandwidth if board else None,
        }
    if args.format == "json":
        print_json(document)
        return 0
    print_table(_host_table(host, document["host"]["description"]), args.format)
    return 0


def _host_table(host: Any, description: str) -> TableData:
    rows: list[list[Any]] = [
        ["copy bandwidth", host.copy_bytes_per_s / 1e9, "GB/s", "read + written by a large copy_"],
        ["read bandwidth", host.read_bytes_per_s / 1e9, "GB/s", "read by a large sum"],
        *[
            [f"one-row product {dtype}", rate / 1e9, "GB/s", "weight bytes streamed"]
            for dtype, rate in host.gemv_bytes_per_s.items()
        ],
        ["roofline bandwidth", host.bandwidth / 1e9, "GB/s", "the fastest of the above"],
        *[
            [f"one-row path {dtype}", None, "", f"{'zoo row kernel' if faster else 'torch'}: the faster, runs take it"]
            for dtype, faster in host.row_kernel_faster.items()
        ],
        *[
            [f"step weights {dtype}", None, "", f"{'fetched past the caches' if faster else 'read through'}: faster"]
            for dtype, faster in host.past_cache_faster.items()
        ],
        *[
            [f"matmul {dtype}", rate / 1e9, "GFLOP/s", "square GEMM, the faster of torch's and oneDNN's"]
            for dtype, rate in host.matmul_flops.items()
        ],
        *[
            [f"several-row path {dtype}", None, "", "widened to float32: its matmul under half float32's, runs take it"]
            for dtype in host.widened_matmul_dtypes
        ],
        *[
            [f"several-row path {dtype}", None, "", "oneDNN's linear: faster than torch's matmul, runs take it"]
            for dtype, faster in host.onednn_faster.items()
            if faster
        ],
    ]
    title = (
        f"{description}; torch {host.machine['torch']}, {host.machine['threads']} threads; "
        f"fingerprint {host.fingerprint}; probe {host.probe_bytes >> 20} MiB, {host.probe_seconds:.1f} s"
    )
    return TableData(title, ["peak", "value", "unit", "measured as"], rows)
