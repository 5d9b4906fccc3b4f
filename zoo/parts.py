"""The plugin-facing API: what out-of-tree parts import and subclass.

The slot bases and the types they share (``zoo.specs.interfaces``, which defines them; the
attention masks' ``visible_keys`` and ``causal_keys_seen``: ``zoo.specs.visibility``) and a
few reusable concrete parts; ``Kernel``, ``KernelChoice``, ``cpu_extension``, ``CppExtension``,
``CppFunction``, ``step_ready`` and ``CPP_FLOATS`` (C++: a kernel's inputs in the model's dtype
read as float32) give a plugin's mixer fast implementations beside its
reference (``zoo.components.kernels``; C++ CPU kernels as custom ops that compiled graphs call
too: ``zoo.components.cpu_ops``); ``CPP_PROJECTIONS`` (C++: ``layer_fits`` and
``projection_row``, a projection made by zoo's one-row products), ``step_tensors``,
``token_calls_run`` and ``past_cache_on`` let a mixer's one-token step take its projections
into the same C++ call, as zoo's recurrent mixers do (``cpu_steps.mamba2_token``); with
``TokenNorm`` and ``pre_norm_args`` (C++: ``pre_norm_fits``, ``pre_normed``, ``with_residual``
in ``CPP_PROJECTIONS``) its ``residual_token`` takes a pre-norm block's norm and residual into
that call too. Plugins
import from here, ``zoo``, ``zoo.errors`` and
``zoo.hub.family`` only (tests/test_house_rules.py checks it); ``zoo.components.*`` and
``zoo.specs.*`` are internal and may change. Names here keep their meaning across releases.
"""

from __future__ import annotations

from zoo.components.activations import ACTIVATIONS
from zoo.components.attention import Attention
from zoo.components.attention_options import AttentionOptions
from zoo.components.cpu_extension import cpu_extension
from zoo.components.cpu_ops import CppExtension, CppFunction
from zoo.components.cpu_steps import step_ready
from zoo.components.cpu_steps_source import FLOATS as CPP_FLOATS
from zoo.components.cpu_token_ops import pre_norm_args, token_calls_run
from zoo.components.ffn import MLP, GatedMLP
from zoo.components.kernels import Kernel, KernelChoice
from zoo.components.linear import Linear, StepTensors, step_tensors
from zoo.components.moe import MoE, MoEOptions
from zoo.components.row_product import PROJECTIONS as CPP_PROJECTIONS
from zoo.components.row_product import past_cache_on
from zoo.specs.interfaces import (
    Block,
    BuildContext,
    CrossMixer,
    Embedding,
    FeedForward,
    Head,
    Norm,
    Part,
    Positional,
    Positions,
    Rotation,
    TokenMixer,
    TokenNorm,
)
from zoo.specs.options import Options
from zoo.specs.state import NO_STATE, BlockState, HoldsState, LayerState, Memory, StatePer, StateTensor
from zoo.specs.visibility import causal_keys_seen, visible_keys

__all__ = [
    "ACTIVATIONS",
    "CPP_FLOATS",
    "CPP_PROJECTIONS",
    "MLP",
    "NO_STATE",
    "Attention",
    "AttentionOptions",
    "Block",
    "BlockState",
    "BuildContext",
    "CppExtension",
    "CppFunction",
    "CrossMixer",
    "Embedding",
    "FeedForward",
    "GatedMLP",
    "Head",
    "HoldsState",
    "Kernel",
    "KernelChoice",
    "LayerState",
    "Linear",
    "Memory",
    "MoE",
    "MoEOptions",
    "Norm",
    "Options",
    "Part",
    "Positional",
    "Positions",
    "Rotation",
    "StatePer",
    "StepTensors",
    "StateTensor",
    "TokenMixer",
    "TokenNorm",
    "causal_keys_seen",
    "cpu_extension",
    "past_cache_on",
    "pre_norm_args",
    "step_ready",
    "step_tensors",
    "token_calls_run",
    "visible_keys",
]
