"""Where an eager CPU decode step's time goes: zoo's one-row products, its layer steps (an
attention's or feed-forward's products and what runs between them as one call: ``attention_token``,
``mlp_token``), its attention calls, its other C++ ops (the recurrent steps, the greedy pick, fused
activations) and the rest (Python between the calls and torch's small ops: norms, adds, views),
per family, one process.

Each C++ call is timed where the model makes it (``CppExtension.op``, wrapped for the run), so the
parts add up to the step; the rest is the step less them. A second pass runs the same steps with
every product's output taken from a cache (no weights read; the layer steps still read theirs): its
rest is the same Python and small ops on warm caches, so ``rest`` against ``rest, no weights
read`` shows what streaming a step's weights through the caches costs the code between the
products. Rounds interleave the two passes and the families; figures are medians over rounds,
milliseconds per decode step.

    python bench/eager_step_split.py --families gpt2,mamba-130m,t5-small --dtype bfloat16 --layers 0
"""

from __future__ import annotations

import collections
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import family_speed as fs  # the sibling bench script (run from bench/): its families, builds and prompts
import torch

from zoo.components.cpu_ops import CppExtension
from zoo.harness.run import host_paths
from zoo.model.sampling import greedy
from zoo.quant import int4_cpu

PARTS = ("products", "layer steps", "attention", "other C++")


def _part(function: str) -> str:
    if function in ("row_product", "row_product_fitting"):
        return "products"
    if function.endswith("_token"):  # attention_token, mlp_token: a layer's products and what runs between them
        return "layer steps"
    return "attention" if "attention" in function else "other C++"


def _timed(
    call: Callable[..., torch.Tensor], part: str, spent: dict[str, float], outputs: dict | None, weight_at: int
) -> Callable[..., torch.Tensor]:
    """``call`` timed into ``spent[part]``; with ``outputs`` (the no-weights pass), a product
    returns its first output for that weight (argument ``weight_at``) and input shape instead of
    reading the weight."""

    def timed(*args: object) -> torch.Tensor:
        start = time.perf_counter()
        if outputs is not None:
            weight, x = args[weight_at], args[1 - weight_at]
            key = (weight.data_ptr(), x.shape)  # type: ignore[attr-defined]
            out = outputs.get(key)
            if out is None:
                out = outputs[key] = call(*args)
        else:
            out = call(*args)
        spent[part] += time.perf_counter() - start
        return out

    return timed


@contextmanager
def timed_ops(spent: dict[str, float], cached: bool) -> Iterator[None]:
    """Every zoo C++ call timed into ``spent`` by part; ``cached``: a product returns its first
    output for that weight and input shape instead of reading the weight. An int4 layer's product
    (an int4 head: its own call, not a layer step's) is bound once by ``int4_cpu`` (``_MM``), so it
    is timed there, as a product."""
    original, int4_mm = CppExtension.op, int4_cpu._MM
    outputs: dict[tuple[int, torch.Size], torch.Tensor] = {}

    def op(self: CppExtension, function: str) -> Callable[..., torch.Tensor]:
        part = _part(function)
        return _timed(original(self, function), part, spent, outputs if cached and part == "products" else None, 0)

    CppExtension.op = op  # type: ignore[method-assign]
    int4_cpu._MM = _timed(int4_mm, "products", spent, outputs if cached else None, 1)
    try:
        yield
    finally:
        CppExtension.op = original  # type: ignore[method-assign]
        int4_cpu._MM = int4_mm


def one_pass(case: fs.Case, ids: torch.Tensor, steps: int, cached: bool) -> dict[str, float]:
    """Milliseconds per decode step: the whole step and each part (``PARTS``, then ``rest``)."""
    spent: dict[str, float] = collections.defaultdict(float)
    with host_paths(torch.device("cpu"), case.model):  # the products' paths as a `zoo bench` run here takes them
        cache, logits = fs._prefill(case, ids, ids.shape[1] + steps)
        token = greedy(logits)[:, None]  # (1, 1)
        with timed_ops(spent, cached):
            start = time.perf_counter()
            for _ in range(steps):
                token = greedy(case.run.decode(case.model, token, cache))[:, None]
            step = (time.perf_counter() - start) / steps * 1e3
    parts = {part: spent[part] / steps * 1e3 for part in PARTS}
    return {"step": step, **parts, "rest": step - sum(parts.values())}


def _median(rows: list[dict[str, float]], key: str) -> float:
    return statistics.median(row[key] for row in rows)


def main() -> None:
    args, cases = fs.eager_cases(__doc__.splitlines()[0], "gpt2,mamba-130m,t5-small", rounds=5)
    ids = torch.randint(0, 50000, (1, args.prompt_len), generator=torch.Generator().manual_seed(0))  # (1, P)
    runs: dict[tuple[str, bool], list[dict[str, float]]] = collections.defaultdict(list)
    with torch.no_grad():
        for case in cases:  # warm-up: kernels built, pages touched
            one_pass(case, ids % case.spec.vocab_size, 3, False)
        for index in range(args.rounds):
            for case in cases:
                for cached in (False, True) if index % 2 == 0 else (True, False):
                    runs[case.family, cached].append(one_pass(case, ids % case.spec.vocab_size, args.decode, cached))
    header = ["family", "layers", "step ms", *(f"{p} ms" for p in PARTS), "rest ms", "rest share"]
    header.append("rest, no weights read")
    print(f"{args.dtype}, batch 1, prompt {args.prompt_len}, {args.decode} steps, {args.threads} threads,")
    print(f"{args.rounds} interleaved rounds (medians); rest: Python and torch's small ops between zoo's C++ calls\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for case in cases:
        real, warm = runs[case.family, False], runs[case.family, True]
        cells = [_median(real, key) for key in ("step", *PARTS, "rest")]
        share = f"{_median(real, 'rest') / _median(real, 'step'):.0%}"
        warm_rest = f"{_median(warm, 'rest'):.2f}"
        row = [case.family, str(case.spec.n_layers), *(f"{c:.2f}" for c in cells), share, warm_rest]
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
