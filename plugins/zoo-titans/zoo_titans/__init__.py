"""zoo-titans: Titans' neural long-term memory (Behrouz et al., 2025, "Titans: Learning to
Memorize at Test Time", arXiv 2501.00663) as a zoo plugin.

Installed, it adds the ``attention``-family kinds ``titans-mal`` (memory as a layer),
``titans-mag`` (memory as a gate beside sliding-window attention) and ``titans-mac``
(memory as context), and the presets ``titans``, ``titans-mal`` and ``titans-mac``. The memory is an MLP
whose weights are written at test time by a gradient step with momentum and forgetting:
its state per sequence is a set of weights, declared through ``state_layout`` like any
recurrent state, so cache bytes and the cache's allocation read the same declaration.
zoo finds it through the entry point ``[project.entry-points.zoo] titans = "zoo_titans"``;
it uses zoo's public API only.
"""

from __future__ import annotations

from collections.abc import Callable

import zoo

__version__ = "0.1.0"


@zoo.hookimpl
def zoo_register_components(register: Callable[..., None]) -> None:
    from zoo_titans.mac import MACOptions, TitansMAC, build_mac
    from zoo_titans.memory import MemoryOptions
    from zoo_titans.mixers import MAGOptions, TitansMAG, TitansMAL, build_mag, build_mal

    register("attention", "titans-mal", build_mal, options=MemoryOptions, module=TitansMAL)
    register("attention", "titans-mag", build_mag, options=MAGOptions, module=TitansMAG)
    register("attention", "titans-mac", build_mac, options=MACOptions, module=TitansMAC)


@zoo.hookimpl
def zoo_register_architectures(register: Callable[..., None]) -> None:
    from zoo_titans.archs import PRESETS

    for name, factory in PRESETS.items():
        register(name, factory)
