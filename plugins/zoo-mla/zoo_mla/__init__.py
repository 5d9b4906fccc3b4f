"""zoo-mla: DeepSeek's multi-head latent attention and MoE routing as a zoo plugin.

Installed, it adds the attention kind ``mla``, the FFN kind ``deepseek_moe`` and the
presets ``deepseek-v2-lite`` and ``deepseek-v3``. zoo finds it through the entry point
``[project.entry-points.zoo] mla = "zoo_mla"``; this module is the plugin: it holds the two
hook implementations, and imports torch-heavy modules only when zoo calls them.
"""

from __future__ import annotations

from collections.abc import Callable

import zoo

__version__ = "0.1.0"


@zoo.hookimpl
def zoo_register_components(register: Callable[..., None]) -> None:
    from zoo_mla.attention import MLAOptions, MultiHeadLatentAttention, build_mla
    from zoo_mla.moe import DeepSeekMoE, DeepSeekMoEOptions, build_deepseek_moe

    register("attention", "mla", build_mla, options=MLAOptions, module=MultiHeadLatentAttention)
    register("ffn", "deepseek_moe", build_deepseek_moe, options=DeepSeekMoEOptions, module=DeepSeekMoE)


@zoo.hookimpl
def zoo_register_architectures(register: Callable[..., None]) -> None:
    from zoo_mla.archs import PRESETS

    for name, factory in PRESETS.items():
        register(name, factory)
