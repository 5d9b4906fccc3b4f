"""A function compiled whole, on a code object of its own, and called without dynamo once warm.

``CompiledGraph(fn, **options)`` is ``torch.compile(fn, fullgraph=True, **options)`` on a copy
of ``fn`` with its own code object. Dynamo keeps a function's graphs (and their guards) on its
code object, checks each in turn at every call and gives up after ``recompile_limit`` of them
(with ``fullgraph``, an error). Shared, every compiled step of a process would pile onto one
list: a decode step would first check the guards of the prefill graph, and a process compiling
a dozen models (a benchmark) would hit the limit. A ``torch.no_grad``-decorated function is
worse: dynamo enters it through a wrapper whose code every compiled function shares. So the
functions compiled here run their graphs under a ``with`` block, and each copy has its own code.

Each call of a compiled function enters dynamo: it installs its frame hook, finds the code's
graphs, checks their guards (or, under the ``skip_guard_eval_unsafe`` stance, those that tell
graphs apart), then runs the bytecode it wrote for the graph: it gathers the graph's inputs
(every parameter and cache tensor), calls the compiled graph and replays the Python side
effects the trace recorded. Where the code holds one graph and the caller has said with that
stance that the warm graphs are the ones to run (``RunSteps.steady``, once a round recompiled
nothing), dynamo runs that bytecode without looking further, so it is called here as a plain
function instead, as vLLM calls its compiled models' code once warm: the same graph, the same
inputs, without dynamo's per-call work. On an AVX2 EPYC (two threads, bfloat16, each preset at
its own depth, 10 interleaved rounds) that work was 0.13 ms of a t5-small decode step (1.079x
decode), gpt2 1.031x, mamba-130m 1.028x, the same greedy tokens. With no graph yet, or several,
the call goes through dynamo, which compiles or chooses as always.
"""

from __future__ import annotations

import itertools
import types
from collections.abc import Callable
from typing import Any

import torch

_copies = itertools.count()


class CompiledGraph:
    """``fn`` compiled whole (fullgraph) on a code object of its own (module doc)."""

    def __init__(self, fn: Callable[..., torch.Tensor], **options: Any) -> None:
        name = f"{fn.__name__}_{next(_copies)}"
        code = fn.__code__.replace(co_name=name, co_qualname=name)
        self._function = types.FunctionType(code, fn.__globals__, name)
        self._compiled = torch.compile(self._function, fullgraph=True, **options)
        # dynamo's own answers (private: tests/model/test_compiled.py pins them), imported here, not
        # with the module: the compiler stack is ~1.5 s of an import that never compiles
        from torch._dynamo import eval_frame, mutation_guard

        self._dynamo, self._generations = eval_frame, mutation_guard.GenerationTracker
        self._direct: tuple[types.CodeType, Callable[..., torch.Tensor]] | None = None  # its graph's code, callable

    def __call__(self, *args: Any) -> torch.Tensor:
        if self._dynamo._is_skip_guard_eval_unsafe_stance():
            direct = self.warm_graph()
            if direct is not None:
                # what entering the compiled function does besides choosing the graph: a new
                # generation, which tells inductor's CUDA graph trees that this is a new call
                # (its outputs of the last call may be overwritten), not a nested one
                self._generations.generation += 1
                return direct(*args)
        return self._compiled(*args)

    def warm_graph(self) -> Callable[..., torch.Tensor] | None:
        """The bytecode dynamo wrote for this function's one graph, as a function; None while it
        has no graph or several (then only dynamo knows which one a call needs)."""
        entries = self._dynamo._debug_get_cache_entry_list(self._function.__code__)
        if len(entries) != 1 or entries[0].code.co_freevars:
            return None
        code = entries[0].code
        if self._direct is None or self._direct[0] is not code:
            self._direct = (code, types.FunctionType(code, self._function.__globals__, code.co_name))
        return self._direct[1]
