"""What a benchmark run's ``compile`` option does: the prefill and decode step it times.

Either way the model's projections are fused first (``zoo.fuse_projections``: q|k|v and
gate|up each one Linear, exact). Fewer, larger products cost fewer calls and stream their
weights in longer runs. Eager, that was 1.07x on SmolLM2-135M's Q4_1 GGUF decode
(int4, one thread, interleaved in one process). Dense llama-3.2-1b layers were unchanged
(0.995-1.002x), and a tiny float32 model gained 1.17x (``python bench/fused_projections.py``).

Eager (``compile=False``): ``zoo.model.generation.prefill`` and ``decode_step`` as they are.

Compiled: the prefill and the decode step each compiled whole
(``compile_prefill``, ``compile_decode_step``). On CUDA both use inductor's CUDA graphs (what
``mode="reduce-overhead"`` sets) with ``coordinate_descent_tuning`` on: inductor then tunes
the block sizes of the Triton kernels it generates (the fused norms, rotations,
activations and cache writes between the products; the products themselves stay cuBLAS
calls it does not tune) by trying neighbouring configurations on the device, once, at
compile time. Batch-1 decode is those small kernels back to back, where the default
heuristic configurations leave bandwidth unused: the issue measured llama-3.2-1b decode at
645 against 765 tokens/s (+18%) on an H100. It costs compile time only (reported as ``compile_s``) and changes nothing
on the CPU, whose C++ kernels it does not tune. On the CPU inductor writes the graph's own code
as C++ instead (``cpp_wrapper``): the calls between kernels, zoo's C++ kernels among them (their
ops' CPU kernels, ``zoo.components.cpu_ops``), leave Python. Decode, 4 layers, bfloat16, two
threads on an AVX2 EPYC, interleaved against the Python wrapper: t5-small 1.13x, mamba-130m
1.05x, gpt2 1.04x (prefill 1.06-1.27x), for the same compile time (gpt2: 31 s cold, 4.7 s
from inductor's cache, either way).

A compiled prefill is specialised to the prompt's shape; the run warms up with the full
prompt so that timed rounds replay the graph (on a GPU an eager prefill is a few hundred
kernel launches and host-side dispatches, a fixed cost whatever the prompt's length).

``compile_s`` is the sum of the first call of each compiled function: tracing, compiling
(and on CUDA autotuning and recording the graph) plus one run. On CUDA each first call is
synchronised so the run's own device time is not left for later calls.

Guards: before every call of a compiled function dynamo checks the guards of its graphs
(the cache's tensors, the token, python values the trace read) to pick one or recompile.
The steps are built to compile once (positions and time slots are tensors the graph reads,
not python numbers it specialises on), so in the steady state of a run those checks decide
nothing, yet they cost a t5-small decode step (4 layers, float32, two threads) 0.34 ms of
6.7 (1.03-1.05x interleaved, gpt2 1.02x). A compiled run therefore warms up twice: the
first round makes the graphs, the second runs under dynamo's ``fail_on_recompile`` stance
(``RunSteps.settle``); where nothing recompiled, the timed calls run under
``skip_guard_eval_unsafe`` (``RunSteps.steady``), as vLLM calls its compiled graphs
without the guards once warm: under that stance each step's one graph is called without
dynamo at all (``zoo.model.compiled.CompiledGraph``: t5-small 1.08x, gpt2 1.03x decode). Where
something did recompile the guards stay; the row's ``compile_guards`` says which.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch

from zoo.components.fused import fuse_projections
from zoo.model.generation import compile_decode_step, compile_prefill, decode_step, prefill

CUDA_INDUCTOR_OPTIONS = {"triton.cudagraphs": True, "coordinate_descent_tuning": True}
CUDA_MODE = "reduce-overhead + coordinate_descent_tuning"
CPU_INDUCTOR_OPTIONS = {"cpp_wrapper": True}
CPU_MODE = "default + cpp_wrapper"


@dataclass
class RunSteps:
    """The prefill and decode step a run times, how they were compiled, and the compile cost."""

    prefill: Callable[..., torch.Tensor]
    decode: Callable[..., torch.Tensor]
    mode: str = "none"
    first_calls_s: list[float] = field(default_factory=list)
    settled: bool | None = None  # compiled: whether the settling warm-up rounds recompiled nothing

    @property
    def compile_s(self) -> float | None:
        """Seconds of the compiled functions' first calls; None when nothing was compiled."""
        return sum(self.first_calls_s) if self.mode != "none" else None

    @property
    def guards(self) -> str:
        """What the timed calls do with dynamo's guards: the row's ``compile_guards``."""
        if self.mode == "none":
            return "none"
        return "skipped once warm" if self.settled else "checked"

    def settle(self, warm_round: Callable[[], None]) -> None:
        """Run ``warm_round`` again after the round that compiled the graphs: compiled, under
        dynamo's ``fail_on_recompile`` stance, so that the steady state is known to need no
        new graph (module doc). A recompile ends the round and keeps the guards."""
        if self.mode == "none":
            warm_round()
            return
        try:
            with torch.compiler.set_stance("fail_on_recompile"):
                warm_round()
        except RuntimeError as err:
            if "fail_on_recompile" not in str(err):
                raise
            self.settled = False
            return
        self.settled = self.settled is not False

    def steady(self) -> AbstractContextManager[object]:
        """The timed calls' context: once settled, dynamo runs the warm graphs without checking
        their guards (``skip_guard_eval_unsafe``); otherwise nothing changes."""
        if self.settled:
            return torch.compiler.set_stance(skip_guard_eval_unsafe=True)
        return nullcontext()


def compile_options(device: torch.device) -> tuple[dict[str, Any], str]:
    """``torch.compile`` keyword options for this device and the mode name to report."""
    if device.type == "cuda":  # mode and options are exclusive: reduce-overhead's option spelled out
        return {"options": dict(CUDA_INDUCTOR_OPTIONS)}, CUDA_MODE
    return {"options": dict(CPU_INDUCTOR_OPTIONS)}, CPU_MODE


def _timing_first_call(
    fn: Callable[..., torch.Tensor], device: torch.device, sink: list[float]
) -> Callable[..., torch.Tensor]:
    """``fn``, whose first call's duration (synchronised on CUDA) is appended to ``sink``."""
    done = False

    def call(*args: Any, **kwargs: Any) -> torch.Tensor:
        nonlocal done
        if done:
            return fn(*args, **kwargs)
        start = time.perf_counter()
        out = fn(*args, **kwargs)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        sink.append(time.perf_counter() - start)
        done = True
        return out

    return call


def run_steps(model: torch.nn.Module, device: torch.device, compiled: bool) -> RunSteps:
    """The model's projections fused, then the eager steps or both steps compiled (module doc)."""
    fuse_projections(model)
    if not compiled:
        return RunSteps(prefill, decode_step)
    options, mode = compile_options(device)
    steps = RunSteps(prefill, decode_step, mode)
    steps.prefill = _timing_first_call(compile_prefill(**options), device, steps.first_calls_s)
    steps.decode = _timing_first_call(compile_decode_step(**options), device, steps.first_calls_s)
    return steps
