"""Building and running one stack of blocks (the decoder, or an encoder-decoder's encoder).

A stack is the positional modules its layers use (one per distinct positional spec and
what that kind reads of its layer, ``Positional.layer_key``: never by layer index), the
blocks, and the token mixers among them that keep state between calls. Every part comes
from the registry; ``build_component`` checks each is the class its plugin declared at
registration.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from zoo.errors import PluginError, SpecError
from zoo.specs.interfaces import BuildContext, Positional, Positions, TokenMixer
from zoo.specs.model import LayerSpec, ModelSpec, ResolvedComponent


def tag(module: nn.Module, family: str) -> nn.Module:
    """Mark a module with the family it was built for (for per-component counts)."""
    module._zoo_family = family  # type: ignore[assignment]
    return module


def norm_factory(component: ResolvedComponent):  # type: ignore[no-untyped-def]
    def make_norm(dim: int) -> nn.Module:
        return tag(component.entry.factory(component.options, dim), "norm")

    return make_norm


def build_component(component: ResolvedComponent, ctx: BuildContext, **modules: Any) -> Any:
    """Build one component and check it is the class its plugin declared at registration."""
    entry = component.entry
    module = entry.factory(component.options, ctx, **modules)
    if module is None and component.family == "ffn":
        return None  # no FFN branch (kind none)
    declared = entry.module or nn.Module
    if not isinstance(module, declared):
        raise PluginError(
            f"plugin {entry.plugin!r}: {component.family} kind {component.kind!r} built a "
            f"{type(module).__name__}, not the {declared.__name__} it declared at registration"
        )
    return tag(module, component.family if component.family != "head" else "unembedding")


def context(spec: ModelSpec, layer: LayerSpec, role: str) -> BuildContext:
    return BuildContext(
        d_model=spec.d_model,
        n_layers=spec.n_layers,
        layer_index=layer.index,
        vocab_size=spec.vocab_size,
        max_seq_len=spec.max_seq_len,
        layer=layer,
        make_norm=norm_factory(layer.norm),
        role=role,
        embedding_scale=spec.resolved_embedding_scale,
        tie_embeddings=spec.tie_embeddings,
        state_dtype=torch.float32 if spec.state_dtype == "float32" else None,
    )


def positional_key(layer: LayerSpec, ctx: BuildContext) -> str:
    """Layers with equal keys share one positional module: the resolved positional spec
    plus what its kind reads of the layer (RoPE: the rotated channels per head)."""
    component = layer.positional
    declared = component.entry.module  # a Positional subclass: checked when its plugin registered
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
    """A stack's modules. ``mixers``: (path, mixer) of the stateful ones, in cache order;
    ``states[i]``: block i's (self, cross) indices into ``mixers``."""

    positionals: nn.ModuleList
    layer_positional: list[int]
    blocks: nn.ModuleList
    input_positional: int = 0  # index into positionals: the stack input's embed / position_ids
    mixers: list[tuple[str, TokenMixer]] = field(default_factory=list)
    states: list[tuple[int, int | None]] = field(default_factory=list)


def build_layers(spec: ModelSpec, role: str, prefix: str = "", cross: ResolvedComponent | None = None) -> Layers:
    """The blocks of ``spec`` (each with a cross-attention of kind ``cross`` when given)."""
    built = Layers(nn.ModuleList(), [], nn.ModuleList())
    positional_index: dict[str, int] = {}
    first_layer: list[int] = []  # per positional module, the first layer that uses it
    for layer in spec.layer_specs():
        ctx = context(spec, layer, role)
        key = positional_key(layer, ctx)
        if key not in positional_index:
            positional_index[key] = len(built.positionals)
            built.positionals.append(build_component(layer.positional, ctx))
            first_layer.append(layer.index)
        built.layer_positional.append(positional_index[key])
        attention = build_component(layer.attention, ctx)
        modules: dict[str, Any] = {"attention": attention, "ffn": build_component(layer.ffn, ctx)}
        path = f"{prefix}layers.{layer.index}"
        built.mixers.append((f"{path}.attention", attention))
        cross_index = None
        if cross is not None:
            cross_ctx = context(spec, layer, "cross_attention")
            modules["cross_attention"] = tag(build_component(cross, cross_ctx), "attention")
            cross_index = len(built.mixers)
            built.mixers.append((f"{path}.cross_attention", modules["cross_attention"]))
        built.states.append((len(built.mixers) - 1 - (cross is not None), cross_index))
        built.blocks.append(build_component(layer.block, ctx, **modules))
    built.input_positional = input_positional(built.positionals, first_layer)
    return built


def shared_positions(
    positionals: nn.ModuleList, ids: torch.Tensor, key_valid: torch.Tensor | None = None
) -> list[Positions]:
    """One Positions per distinct positional module; rotations computed once, shared."""
    shared = []
    for module in positionals:
        assert isinstance(module, Positional)
        shared.append(Positions(ids=ids, positional=module, rotation=module.rotation(ids), key_valid=key_valid))
    return shared
