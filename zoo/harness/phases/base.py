"""What a phase is: one measurement over the model a run built, filling its own row fields.

A run (``zoo.harness.run``) resolves its model source, builds or loads the model once, then
runs every phase that applies to the model's topology and is wanted by the options, in
``order``, and gathers what each returns into one ``Row``. A phase is a subclass of
``Phase``: defining it registers it (``__init_subclass__``), after checking that the row
fields it fills exist on ``Row`` and the options it reads exist on ``BenchConfig``. The
built-in phases are the modules of this package, all imported by ``zoo.harness.phases.registered_phases``, so
adding one is its own file plus its fields on ``Row``, and no list to edit elsewhere.

``predict`` is the phase's analytic counterpart: its FLOPs and bytes and, on a device's
peaks, the least time it can take (``zoo.analysis.devices.step_roofline``). A phase with a
``rate_field`` (``<what>_tokens_per_s``) gets ``predicted_<rate_field>`` (on ``--predict``'s
GPU) and ``<what>_roofline_fraction`` (measured over predicted on the device in hand).

Phases run with autograd as torch leaves it: an inference phase takes ``torch.no_grad``
itself (zoo's prefill and decode step do), a training step does not; the model comes in
``eval()`` mode, and a phase that changes that puts it back.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from zoo.analysis.counts import Topology
from zoo.analysis.devices import DevicePeaks
from zoo.errors import BenchError
from zoo.harness.measure import Probe
from zoo.harness.row import Row
from zoo.harness.run_config import BenchConfig, Progress
from zoo.harness.shape import RunShape
from zoo.specs.model import ModelSpec

TOPOLOGIES: frozenset[Topology] = frozenset({"decoder", "encoder", "encoder-decoder"})
PHASES: dict[str, type[Phase]] = {}  # name -> class, filled as phase classes are defined


@dataclass
class RunContext:
    """What a phase measures with: the model built once, its spec and topology, the run's
    options and shape, the device, dtype and memory probe, a progress callback, and
    ``shared`` (values phases of one run share, made once: ``ctx.share(key, make)``)."""

    model: Any  # a ZooModel (a phase may replace it: the weights phase quantizes it)
    spec: ModelSpec
    topology: Topology
    config: BenchConfig
    shape: RunShape
    device: torch.device
    dtype: torch.dtype
    probe: Probe
    progress: Progress
    shared: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)  # sdpa_backend, compile_mode: first phase to learn it

    def share(self, key: str, make: Callable[[], Any]) -> Any:
        if key not in self.shared:
            self.shared[key] = make()
        return self.shared[key]

    def note(self, **facts: Any) -> None:
        """Environment facts a phase learned (the first phase to report one keeps it)."""
        for key, value in facts.items():
            self.environment.setdefault(key, value)


class Phase(ABC):
    """One measurement of a run. Subclasses set the class variables and ``measure``."""

    name: ClassVar[str]
    order: ClassVar[int]  # run order: encode 10, prefill 20, decode 30; the weights phase (0) first
    topologies: ClassVar[frozenset[Topology]]
    fields: ClassVar[tuple[str, ...]]  # Row fields ``measure`` fills
    options: ClassVar[tuple[str, ...]] = ()  # BenchConfig fields it reads beyond the run's own
    rate_field: ClassVar[str | None] = None  # its headline rate, set beside its roofline

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if getattr(cls, "__abstractmethods__", None):
            return
        where = f"phase {getattr(cls, 'name', cls.__qualname__)!r} ({cls.__module__})"
        rate = [] if cls.rate_field is None else [f"predicted_{cls.rate_field}", fraction_field(cls.rate_field)]
        unknown = [f for f in (*cls.fields, *rate) if f not in Row.model_fields]
        if unknown:
            raise TypeError(f"{where}: fills {unknown}, not fields of zoo.harness.row.Row; add them there")
        if cls.rate_field is not None and cls.rate_field not in cls.fields:
            raise TypeError(f"{where}: rate_field {cls.rate_field!r} is not among its fields")
        bad = [o for o in cls.options if o not in BenchConfig.model_fields]
        if bad or not cls.topologies <= TOPOLOGIES:
            raise TypeError(f"{where}: options {bad} or topologies {sorted(cls.topologies - TOPOLOGIES)} unknown")
        previous = PHASES.get(cls.name)
        if previous is not None and previous.__qualname__ != cls.__qualname__:
            raise TypeError(f"{where}: the name is taken by {previous.__module__}.{previous.__qualname__}")
        PHASES[cls.name] = cls

    def wanted(self, config: BenchConfig) -> bool:
        """Whether the options ask for this phase (it applies to the topology already)."""
        return True

    @abstractmethod
    def measure(self, ctx: RunContext) -> dict[str, Any]:
        """Run the phase; its row fields (a subset of ``fields``)."""

    def predict(
        self,
        spec: ModelSpec,
        config: BenchConfig,
        device: DevicePeaks | None,
        dtype: torch.dtype,
        held: nn.Module | None = None,
    ) -> dict[str, Any] | None:
        """The analytic counterpart (``step_roofline``'s dict: flops, bytes, seconds,
        tokens_per_s, bound; the last three None without ``device``), or None if it has none.
        ``held``: the loaded model when it holds its own packed layers (a GGUF): weights are
        read as it holds them (``zoo.analysis.counts.weight_bytes_read``)."""
        return None


def fraction_field(rate_field: str) -> str:
    """The row field of a rate's achieved fraction of its roofline: decode_tokens_per_s -> decode_roofline_fraction."""
    return rate_field.removesuffix("_tokens_per_s") + "_roofline_fraction"


def run_phase(phase: Phase, ctx: RunContext) -> dict[str, Any]:
    """``phase.measure(ctx)``, its fields checked against what it declared."""
    values = phase.measure(ctx)
    extra = sorted(set(values) - set(phase.fields))
    if extra:
        raise BenchError(f"phase {phase.name!r}: returned {extra}, not among its declared fields {list(phase.fields)}")
    return values
