"""Stable building blocks for plugins: what out-of-tree components may import and subclass.

Plugins use ``zoo.specs.interfaces`` (the base classes and shared types) and this module (reusable
concrete parts); ``zoo.components.*`` is internal and may change. Names here keep their
meaning across releases.
"""

from __future__ import annotations

from zoo.components.activations import ACTIVATIONS
from zoo.components.attention import Attention, AttentionOptions
from zoo.components.ffn import MLP, GatedMLP
from zoo.components.linear import Linear
from zoo.components.moe import MoE, MoEOptions
from zoo.specs.interfaces import causal_keys_seen, visible_keys

__all__ = [
    "ACTIVATIONS",
    "MLP",
    "Attention",
    "AttentionOptions",
    "GatedMLP",
    "Linear",
    "MoE",
    "MoEOptions",
    "causal_keys_seen",
    "visible_keys",
]
