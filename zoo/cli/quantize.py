"""`zoo quantize`: post-training 4-bit quantization of a checkpoint (AWQ or round-to-nearest),
saved as an AWQ checkpoint and measured against RTN (perplexity on held-out text, KL)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("quantize", help="quantize a checkpoint to 4-bit (AWQ or RTN) and measure it")
    p.add_argument(
        "--method",
        choices=("awq", "rtn"),
        default="awq",
        help="awq: activation-aware scales (Lin et al. 2023); rtn: round to nearest",
    )
    p.add_argument("--calib", required=True, type=Path, metavar="FILE", help="calibration text (UTF-8)")
    p.add_argument("--weights", required=True, metavar="REPO_OR_DIR", help="the float checkpoint")
    p.add_argument("--out", required=True, type=Path, metavar="DIR", help="folder for the AWQ-format checkpoint")
    p.add_argument("--bits", type=int, choices=(4,), default=4, help="weight bits (4)")
    p.add_argument("--group-size", type=int, default=128, help="inputs per scale and zero (32, 64, 128, 256)")
    p.add_argument(
        "--eval-text",
        type=Path,
        metavar="FILE",
        help="held-out text for perplexity and KL (default: the last quarter of --calib, not calibrated on)",
    )
    p.set_defaults(func=run_quantize)


def run_quantize(args: argparse.Namespace) -> int:
    from zoo.harness.ptq import quantize_checkpoint

    report = quantize_checkpoint(args.weights, args.calib, args.out, args.method, args.group_size, args.eval_text)
    print(f"saved {report.out} ({report.calibration_tokens} calibration tokens, {report.eval_tokens} held out)")
    print(f"{'method':<8} {'perplexity':>11} {'KL vs float':>12} {'calib output error':>19} {'(RTN)':>11}")
    print(f"{'float':<8} {report.float_perplexity:>11.4f} {'':>12} {'':>19} {'':>11}")
    for f in report.figures:
        print(f"{f.method:<8} {f.perplexity:>11.4f} {f.kl:>12.6f} {f.output_error:>19.6g} {f.rtn_output_error:>11.6g}")
    return 0
