"""Gated DeltaNet's training step on the CPU, as ratios from interleaved rounds (one thread).

1. The mixer's forward + backward (B 64, T 64, d_model 64, 4 heads of 16: the MQAR probe's
   layer), this tree's code against a git revision's (``--against``, default dfeb267, before
   the speed-ups; the revision's module must import from this tree), after checking both give
   the same gradients.
2. One training step of the probe's 2-layer model, Gated DeltaNet against Mamba2, and Gated
   DeltaNet with ``chunk_size`` 16 against its default 64 (numerics only: on a CPU the chunk's
   (C, C) products and solve dominate at head width 16, the state products at 128).

    python bench/gdn_train_step.py --against dfeb267
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
PROBE = ["n_layers=2", "d_model=64", "attention.n_heads=4", "attention.n_kv_heads=4", "attention.head_dim=16"]
GDN = ["attention.kind=gated_deltanet", "attention.n_k_heads=4", "attention.n_v_heads=4"]
GDN += ["attention.head_k_dim=16", "attention.head_v_dim=16"]
MAMBA2 = ["attention.kind=mamba2", "attention.head_dim=16", "attention.state_size=16"]


def revision_module(rev: str) -> type:
    """GatedDeltaNet as ``rev`` had it (its delta_rule too), loaded from a temporary folder."""
    folder = Path(tempfile.mkdtemp())
    for name in ("gated_deltanet", "delta_rule"):
        text = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{rev}:zoo/components/{name}.py"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        text = text.replace("from zoo.components.delta_rule import", "from rev_delta_rule import")
        (folder / f"rev_{name}.py").write_text(text.split("\n@hookimpl")[0])
    sys.path.insert(0, str(folder))
    spec = importlib.util.spec_from_file_location("rev_gated_deltanet", folder / "rev_gated_deltanet.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.GatedDeltaNet


def interleaved(fns: dict[str, Callable[[], None]], rounds: int) -> dict[str, float]:
    """Median seconds per call of each function, timed in alternating rounds."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: sorted(t)[len(t) // 2] for name, t in times.items()}


def mixer_ratio(rev: str, rounds: int) -> float:
    from zoo.components.gated_deltanet import GatedDeltaNet

    torch.manual_seed(0)
    ours, theirs = GatedDeltaNet(64, 4, 4, 16, 16), revision_module(rev)(64, 4, 4, 16, 16)
    theirs.load_state_dict(ours.state_dict())
    x, weights = torch.randn(64, 64, 64), torch.randn(64, 64, 64)
    for module in (ours, theirs):
        (module.mix(x) * weights).sum().backward()
    for (name, a), b in zip(ours.named_parameters(), theirs.parameters()):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-4, rtol=1e-3, msg=name)
    times = interleaved(
        {
            "ours": lambda: (ours.mix(x) * weights).sum().backward(),
            "theirs": lambda: (theirs.mix(x) * weights).sum().backward(),
        },
        rounds,
    )
    return times["ours"] / times["theirs"]


def model_ratios(rounds: int) -> tuple[float, float]:
    import zoo
    from zoo.training.mqar import MQARSetting, mqar, recall_loss

    base = zoo.spec("llama-3.2-1b").override(PROBE + ["ffn.kind=none"]).override({"vocab_size": 256})
    variants = (("gdn", GDN), ("gdn-chunk16", GDN + ["attention.chunk_size=16"]), ("mamba2", MAMBA2))
    models = {name: zoo.build(base.override(sets), seed=0) for name, sets in variants}
    x, y = mqar(MQARSetting(vocab_size=256, seq_len=64, num_kv_pairs=8), 64, 0)

    def step(model: torch.nn.Module) -> Callable[[], None]:
        return lambda: (model.zero_grad(), recall_loss(model, x, y).backward())  # type: ignore[func-returns-value]

    times = interleaved({name: step(model) for name, model in models.items()}, rounds)
    return times["gdn"] / times["mamba2"], times["gdn-chunk16"] / times["gdn"]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--against", default="dfeb267", help="git revision whose GatedDeltaNet is the baseline (pre-speed-up)"
    )
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"mixer forward+backward, this tree / {args.against}: {mixer_ratio(args.against, args.rounds):.3f}")
    vs_mamba2, chunk16 = model_ratios(args.rounds)
    print(f"probe model training step, Gated DeltaNet / Mamba2: {vs_mamba2:.3f}")
    print(f"probe model training step, Gated DeltaNet chunk_size 16 / 64: {chunk16:.3f}")
