"""A C++ kernel module against its own source at another git revision, inside real decode steps.

A change to one fused kernel (Mamba-1's ``cpu_mamba_step``, a recurrent step of ``cpu_steps``)
moves a whole decode step by a few percent, less than this shared machine's swing between two
runs minutes apart; only an in-process, interleaved comparison sees it. This builds the module's
file as it was at ``--against`` (``git show``) beside the working tree's, its extension under
another name (so both register their ops), and decodes with the family's model on each in turn:
eager steps swap the module's ``EXTENSION`` between rounds (callers look it up at each call);
compiled steps build one model per side, each traced while its extension is the module's, so
each graph calls its own ops. The old file imports today's sibling modules (row_product's
sources and the like): the comparison is that one file's change.

    python bench/kernel_vs_revision.py --module zoo.components.cpu_mamba_step --against 480e8f0~2 \
        --family mamba-130m --dtype bfloat16 --step eager --rounds 10

Prints each side's median decode tokens/s and the median of the rounds' speed ratios
(working tree over ``--against``).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import statistics
import subprocess
import sys
import types
from pathlib import Path

import family_speed as fs  # the sibling bench script (run from bench/): its families, builds and prompts
import torch

ROOT = Path(__file__).resolve().parents[1]


def module_at(module: types.ModuleType, revision: str) -> types.ModuleType:
    """``module``'s file as it was at ``revision``, imported under another name, its extension
    renamed (the name's string literal replaced) so that its ops register beside today's."""
    path = Path(module.__file__ or "").resolve().relative_to(ROOT)
    source = subprocess.run(
        ["git", "show", f"{revision}:{path}"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    name = module.EXTENSION.name
    tag = subprocess.run(
        ["git", "rev-parse", "--short", revision], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()
    if f'"{name}"' not in source:
        sys.exit(f"{path} at {revision}: no extension named {name!r} in it")
    old = types.ModuleType(f"{module.__name__}_at_{tag}")
    old.__file__ = str(ROOT / path)
    exec(compile(source.replace(f'"{name}"', f'"{name}_at_{tag}"'), old.__file__, "exec"), old.__dict__)
    return old


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--module", default="zoo.components.cpu_mamba_step")
    parser.add_argument("--against", required=True, help="a git revision: the module's file there")
    parser.add_argument("--family", default="mamba-130m")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--step", default="eager", choices=["eager", "compiled"])
    parser.add_argument("--layers", type=int, default=0, help="0: the preset's own depth")
    parser.add_argument("--decode", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    module = importlib.import_module(args.module)
    extensions = {"working tree": module.EXTENSION, args.against: module_at(module, args.against).EXTENSION}
    for side, extension in extensions.items():
        if extension.load() is None:
            sys.exit(f"{side}: the extension does not build here")
    fs.stage_plugins([args.family])
    ids = torch.randint(0, 50000, (1, 128), generator=torch.Generator().manual_seed(0))  # (1, P)
    max_len = ids.shape[1] + args.decode
    cases: dict[str, fs.Case] = {}
    with torch.no_grad():
        for side, extension in extensions.items():  # compiled: a model a side, traced on its side's ops
            module.EXTENSION = extension
            if args.step == "eager" and cases:  # eager: one model, both sides' calls
                cases[side] = fs.Case(**{**vars(next(iter(cases.values()))), "prefill": [], "decode": []})
                continue
            case = fs.build(args.family, "auto", args.layers, args.dtype, args.step)
            fs.one_round(case, ids, 3, max_len)
            case.run.settle(functools.partial(fs.one_round, case, ids, 3, max_len))
            case.decode.clear(), case.prefill.clear()
            cases[side] = case
        for index in range(args.rounds):
            for side in list(cases)[:: (-1) ** index]:  # the order flipped every round
                module.EXTENSION = extensions[side]
                fs.one_round(cases[side], ids, args.decode, max_len)
    base = cases[args.against].decode
    print(f"{args.family} {args.dtype} {args.step}, {args.threads} threads, {args.rounds} interleaved rounds:")
    for side, case in cases.items():
        ratios = sorted(a / b for a, b in zip(case.decode, base, strict=True))
        print(
            f"  {side}: decode {statistics.median(case.decode):.1f} tok/s, {statistics.median(ratios):.3f}x "
            f"{args.against}'s (rounds {ratios[0]:.3f}-{ratios[-1]:.3f})"
        )


if __name__ == "__main__":
    main()
