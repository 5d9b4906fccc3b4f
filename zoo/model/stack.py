"""Building and running one stack of blocks (the decoder, or an encoder-decoder's encoder).

A stack is the positional modules its layers use (one per distinct positional spec and
what that kind reads of its layer, ``Positional.layer_key``: never by layer index), the
blocks, and the token mixers among them that keep state between calls. Every part comes
from the registry; ``build_component`` checks each is the class its plugin declared at
registration.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from zoo.errors import PluginError, SpecError
from zoo.specs.components import LayerSpec, ResolvedComponent
from zoo.specs.interfaces import Block, BuildContext, CrossMixer, FeedForward, Positional, Positions, TokenMixer
from zoo.specs.model import ModelSpec
from zoo.specs.registry import get_registry
from zoo.specs.state import HoldsState

# the parts of a block that may keep state, in cache order within a layer
STATEFUL_PARTS: tuple[str, ...] = ("attention", "cross_attention", "ffn")


class PartFamilies:
    """What each module was built as (its slot's family, for per-component counts), noted as
    the build makes them. The finished model keeps ``by_path`` (``ZooModel.part_families``):
    paths, not the modules, so a module swapped in place (a quantized head) keeps its family."""

    def __init__(self) -> None:
        self._families: dict[int, str] = {}  # id(module) -> family, while the build holds the modules

    def note(self, module: Any, family: str) -> Any:
        if module is not None:
            self._families[id(module)] = family
        return module

    def by_path(self, model: nn.Module) -> dict[str, str]:
        return {
            path: self._families[id(module)]
            for path, module in model.named_modules(remove_duplicate=False)
            if id(module) in self._families
        }


def norm_factory(component: ResolvedComponent, families: PartFamilies) -> Callable[[int], nn.Module]:
    def make_norm(dim: int) -> nn.Module:
        module: nn.Module = families.note(component.factory(component.options, dim), "norm")
        return module

    return make_norm


def build_component(component: ResolvedComponent, ctx: BuildContext, families: PartFamilies, **modules: Any) -> Any:
    """Build one component and check it is the class its plugin declared at registration."""
    module = component.factory(component.options, ctx, **modules)
    if module is None and component.slot == "ffn":
        return None  # no FFN branch (kind none)
    declared = component.module
    if not isinstance(module, declared):
        raise PluginError(
            f"plugin {component.plugin!r}: {component.slot} kind {component.kind!r} built a "
            f"{type(module).__name__}, not the {declared.__name__} it declared at registration"
        )
    counted_as = {"head": "unembedding", "cross_attention": "attention"}.get(component.slot, component.slot)
    return families.note(module, counted_as)


def context(spec: ModelSpec, layer: LayerSpec, role: str, families: PartFamilies) -> BuildContext:
    return BuildContext(
        d_model=spec.d_model,
        n_layers=spec.n_layers,
        layer_index=layer.index,
        vocab_size=spec.vocab_size,
        max_seq_len=spec.max_seq_len,
        layer=layer,
        make_norm=norm_factory(layer.norm, families),
        role=role,
        embedding_scale=spec.resolved_embedding_scale,
        tie_embeddings=spec.tie_embeddings,
        state_dtype=torch.float32 if spec.state_dtype == "float32" else None,
    )


def positional_key(layer: LayerSpec, ctx: BuildContext) -> str:
    """Layers with equal keys share one positional module: the resolved positional spec
    plus what its kind reads of the layer (RoPE: the rotated channels per head)."""
    component = layer.positional
    declared = component.module  # a Positional subclass: checked when its plugin registered
    assert declared is not None and issubclass(declared, Positional)
    return repr((component.to_dict(), declared.layer_key(component.options, ctx)))


def _acts_on_input(module: nn.Module) -> bool:
    """Whether a positional module adds to the embeddings or renumbers the positions."""
    kind = type(module)
    return kind.embed is not Positional.embed or kind.position_ids is not Positional.position_ids


def input_positional(positionals: nn.ModuleList, first_layer: list[int]) -> int:
    """The module whose ``embed`` and ``position_ids`` act on the stack's input: the one that
    overrides them, whichever layer it belongs to (a hybrid's first layer may take no
    positions); with none, the first layer's (both hooks are then the identity)."""
    acting = [i for i, module in enumerate(positionals) if _acts_on_input(module)]
    if len(acting) > 1:
        layers = ", ".join(f"layers.{first_layer[i]} ({type(positionals[i]).__name__})" for i in acting)
        raise SpecError(
            f"positional: {layers} each add positions to the token embeddings; a stack adds one, "
            "so give those layers the same positional spec"
        )
    return acting[0] if acting else 0


@dataclass
class Layers:
    """A stack's modules. ``stateful``: (path, part) of the parts that keep state, in cache
    order; ``states[i]``: block i's {part name: index into ``stateful``}; ``mixers`` and
    ``cross``: the blocks' self- and cross-attention, layer by layer (references)."""

    positionals: nn.ModuleList
    layer_positional: list[int]
    blocks: nn.ModuleList
    input_positional: int = 0  # index into positionals: the stack input's embed / position_ids
    stateful: list[tuple[str, HoldsState]] = field(default_factory=list)
    states: list[dict[str, int]] = field(default_factory=list)
    mixers: list[TokenMixer] = field(default_factory=list)
    cross: list[CrossMixer] = field(default_factory=list)


def build_layers(spec: ModelSpec, role: str, families: PartFamilies, prefix: str = "") -> Layers:
    """The blocks of ``spec`` (each with its cross-attention when the spec has one)."""
    built = Layers(nn.ModuleList(), [], nn.ModuleList())
    positional_index: dict[str, int] = {}
    first_layer: list[int] = []  # per positional module, the first layer that uses it
    cross = spec.part("cross_attention") if role == "decoder" and spec.cross_attention is not None else None
    for layer in spec.layer_specs():
        ctx = context(spec, layer, role, families)
        key = positional_key(layer, ctx)
        if key not in positional_index:
            positional_index[key] = len(built.positionals)
            built.positionals.append(build_component(layer.positional, ctx, families))
            first_layer.append(layer.index)
        built.layer_positional.append(positional_index[key])
        parts: dict[str, Any] = {
            "attention": build_component(layer.attention, ctx, families),
            "ffn": build_component(layer.ffn, ctx, families),
        }
        if cross is not None:
            parts["cross_attention"] = build_component(cross, ctx, families)
            built.cross.append(parts["cross_attention"])
        built.mixers.append(parts["attention"])
        check_block(layer, parts)
        states: dict[str, int] = {}
        for name in STATEFUL_PARTS:
            part = parts.get(name)
            if isinstance(part, HoldsState) and part.stateful:
                states[name] = len(built.stateful)
                built.stateful.append((f"{prefix}layers.{layer.index}.{name}", part))
        built.states.append(states)
        built.blocks.append(build_component(layer.block, ctx, families, **parts))
    built.input_positional = input_positional(built.positionals, first_layer)
    return built


def check_block(layer: LayerSpec, parts: dict[str, Any]) -> None:
    """The block kind declares what it wires: a cross-attention, a stateful FFN's state."""
    block = layer.block.module
    assert issubclass(block, Block)  # checked when its plugin registered
    registry = get_registry()
    if "cross_attention" in parts and not block.takes_cross_attention:
        able = [k for k in registry.kinds("block") if _declares(registry.component("block", k).module, "cross")]
        raise SpecError(
            f"block.kind: {layer.block.kind} blocks take no cross-attention; allowed with "
            f"cross_attention: {', '.join(able)}"
        )
    ffn = parts.get("ffn")
    if isinstance(ffn, FeedForward) and ffn.stateful and not block.feeds_ffn_state:
        able = [k for k in registry.kinds("block") if _declares(registry.component("block", k).module, "ffn_state")]
        raise SpecError(
            f"layers.{layer.index}.ffn.kind: {layer.ffn.kind} keeps state between calls, which a "
            f"{layer.block.kind} block does not pass it; allowed block kinds: {', '.join(able) or 'none'}"
        )


def _declares(block: type, capability: str) -> bool:
    if not issubclass(block, Block):
        return False
    return block.takes_cross_attention if capability == "cross" else block.feeds_ffn_state


def shared_positions(
    positionals: nn.ModuleList, ids: torch.Tensor, key_valid: torch.Tensor | None = None
) -> list[Positions]:
    """One Positions per distinct positional module; rotations computed once, shared."""
    shared = []
    for module in positionals:
        assert isinstance(module, Positional)
        shared.append(Positions(ids=ids, positional=module, rotation=module.rotation(ids), key_valid=key_valid))
    return shared
