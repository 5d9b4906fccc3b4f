"""What an eager decode step gains from its layers' one-call steps: each family's model decoding
with the attention's, cross-attention's and feed-forward's one-token C++ calls (``attention_token``,
``cross_attention_token``, ``mlp_token``), the recurrent mixers' (``mamba_token``, ``mamba2_token``,
``gdn_token``, ``linear_token``, ``infini_token``, the zoo-rwkv plugin's ``time_mix_token`` and
``channel_mix_token``: projections and step in one) and the one-row products' checks in C++
(``row_product.eager_row_product``), against the same model with the modules' own calls (their
``_token_step``s declining, the products checked in Python as a compiled graph checks them), the
two alternated in every round of one process. Both give the same tokens
(tests/components/test_cpu_layer_steps.py).

    python bench/layer_steps.py --families gpt2,qwen3-0.6b,t5-small --dtype bfloat16 --rounds 10
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

import family_speed as fs  # the sibling bench script (run from bench/): its families, builds and prompts
import torch

import zoo.components.ffn as ffn
import zoo.components.linear as linear
from zoo.components import row_product as rows
from zoo.components.attention import Attention
from zoo.components.cross_attention import CrossAttention
from zoo.components.gated_deltanet import GatedDeltaNet
from zoo.components.infini_attention import InfiniAttention
from zoo.components.linear_attention import LinearAttention
from zoo.components.mamba import MambaMixer
from zoo.components.mamba2 import Mamba2Mixer
from zoo.harness.run import host_paths
from zoo.model.sampling import greedy


def _python_checked(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor | None:
    return rows.row_product(weight, x, bias) if linear.uses_row_kernel(x, weight) else None


def _plugin_mixers() -> list[type]:
    """The zoo-rwkv plugin's mixers, whose one-call steps (``time_mix_token``,
    ``channel_mix_token``) are built on ``zoo.parts``, where the plugin is installed."""
    try:
        from zoo_rwkv.channel_mix import ChannelMix
        from zoo_rwkv.time_mix import TimeMix
    except ImportError:
        return []
    return [TimeMix, ChannelMix]


@contextmanager
def modules_own_calls() -> Iterator[None]:
    """The modules' own calls: no one-call layer steps, the products' checks in Python."""
    classes = [Attention, CrossAttention, MambaMixer, Mamba2Mixer, GatedDeltaNet, LinearAttention, InfiniAttention]
    classes += _plugin_mixers()
    saved = [cls._token_step for cls in classes], ffn._token_step, linear._one_row
    for cls in classes:
        cls._token_step = lambda *args: None  # type: ignore[method-assign,assignment]
    ffn._token_step = lambda *args: None
    linear._one_row = _python_checked
    try:
        yield
    finally:
        for cls, step in zip(classes, saved[0], strict=True):
            cls._token_step = step  # type: ignore[method-assign]
        ffn._token_step, linear._one_row = saved[1], saved[2]


def ms_per_step(case: fs.Case, ids: torch.Tensor, steps: int, own_calls: bool) -> float:
    """Milliseconds per eager greedy decode step after prefilling ``ids`` (1, P)."""
    with host_paths(torch.device("cpu"), case.model), modules_own_calls() if own_calls else nullcontext():
        cache, logits = fs._prefill(case, ids, ids.shape[1] + steps + 1)
        token = greedy(logits)[:, None]  # (1, 1)
        start = time.perf_counter()
        for _ in range(steps):
            token = greedy(case.run.decode(case.model, token, cache))[:, None]
        return (time.perf_counter() - start) / steps * 1e3


def main() -> None:
    families = "gpt2,qwen3-0.6b,t5-small,rwkv,mamba-130m,mamba2-130m,gated-deltanet,linear,infini"
    args, cases = fs.eager_cases(__doc__.splitlines()[0], families, rounds=10)
    ids = torch.randint(0, 50000, (1, args.prompt_len), generator=torch.Generator().manual_seed(0))  # (1, P)
    times: dict[tuple[str, bool], list[float]] = {(case.family, own): [] for case in cases for own in (False, True)}
    with torch.no_grad():
        for case in cases:  # warm-up: kernels built, pages touched
            for own in (False, True):
                ms_per_step(case, ids % case.spec.vocab_size, 3, own)
        for index in range(args.rounds):
            for case in cases:
                for own in (True, False) if index % 2 == 0 else (False, True):
                    times[case.family, own].append(ms_per_step(case, ids % case.spec.vocab_size, args.decode, own))
    print(f"{args.dtype}, batch 1, prompt {args.prompt_len}, {args.decode} eager steps, {args.threads} threads,")
    print(f"{args.rounds} interleaved rounds (medians; speed-up: the median of the rounds' ratios)\n")
    print("| family | layers | modules' own calls ms | one-call steps ms | speed-up |")
    print("|---|---|---|---|---|")
    for case in cases:
        own, steps = times[case.family, True], times[case.family, False]
        ratio = statistics.median(a / b for a, b in zip(own, steps, strict=True))
        medians = f"{statistics.median(own):.2f}", f"{statistics.median(steps):.2f}"
        print("| " + " | ".join([case.family, str(case.spec.n_layers), *medians, f"{ratio:.3f}x"]) + " |")


if __name__ == "__main__":
    main()
