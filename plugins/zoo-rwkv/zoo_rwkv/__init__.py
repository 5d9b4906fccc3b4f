"""zoo-rwkv: RWKV-4 as a zoo plugin, a block unlike any built-in one.

Installed, it adds the kinds ``rwkv`` of three families (``attention``: time mixing, a
recurrent token mixer; ``ffn``: channel mixing; ``block``: the RWKV block wiring them), the
Hugging Face checkpoint family ``rwkv`` (``zoo.from_pretrained`` / ``save_pretrained`` of
transformers' ``RwkvForCausalLM``) and the preset ``rwkv-4-169m-pile``. zoo finds it through
the entry point ``[project.entry-points.zoo] rwkv = "zoo_rwkv"``; this module is the plugin
and imports torch-heavy modules only when zoo calls its hooks. It uses zoo's public API
only: ``zoo``, ``zoo.specs.interfaces``, ``zoo.parts``, ``zoo.errors``, ``zoo.hub.family``.
"""

from __future__ import annotations

from collections.abc import Callable

import zoo

__version__ = "0.1.0"


@zoo.hookimpl
def zoo_register_components(register: Callable[..., None]) -> None:
    from zoo_rwkv.block import RwkvBlock, RwkvBlockOptions, build_rwkv_block
    from zoo_rwkv.channel_mix import ChannelMix, ChannelMixOptions, build_channel_mix
    from zoo_rwkv.time_mix import TimeMix, TimeMixOptions, build_time_mix

    register("attention", "rwkv", build_time_mix, options=TimeMixOptions, module=TimeMix)
    register("ffn", "rwkv", build_channel_mix, options=ChannelMixOptions, module=ChannelMix)
    register("block", "rwkv", build_rwkv_block, options=RwkvBlockOptions, module=RwkvBlock)


@zoo.hookimpl
def zoo_register_architectures(register: Callable[..., None]) -> None:
    from zoo_rwkv.archs import PRESETS

    for name, factory in PRESETS.items():
        register(name, factory)


@zoo.hookimpl
def zoo_register_checkpoint_formats(register: Callable[..., None]) -> None:
    from zoo_rwkv import hub

    register(hub)
