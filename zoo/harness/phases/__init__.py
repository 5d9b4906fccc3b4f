"""The built-in phases, one module each, found here: the package imports its modules (each
defines its phase, which registers itself in ``base.PHASES``), so a new phase is one file.
This package sits above its modules; they import ``base`` only, never the package."""

from __future__ import annotations

import importlib
import pkgutil

from zoo.analysis.counts import Topology
from zoo.harness.phases.base import PHASES, Phase
from zoo.harness.run_config import BenchConfig


def registered_phases() -> dict[str, type[Phase]]:
    """Every phase: this package's modules imported (each defines its phase), then the table."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    return PHASES


def phases_for(topology: Topology, config: BenchConfig) -> list[Phase]:
    """The phases one run performs, in order."""
    chosen = [cls() for cls in registered_phases().values() if topology in cls.topologies]
    return sorted((p for p in chosen if p.wanted(config)), key=lambda p: p.order)
