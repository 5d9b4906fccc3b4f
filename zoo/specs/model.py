"""ModelSpec: a validated, serialisable description of a model (decoder-only, encoder-only).

Each component field is ``{"kind": name, ...options}``; the registry validates the options of
that kind (unknown keys are errors). ``layers`` holds per-layer overrides keyed by a layer
selector ("0,2,4", "1-3", "0::2", "5::6"), merged over the base components for those layers.
``embedding`` and ``head`` are model-level parts (one each), also built by the registry.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, PositiveInt, PrivateAttr, ValidationError, model_validator

from zoo.errors import SpecError, allowed, did_you_mean
from zoo.files.safe_io import load_json, load_yaml, read_text
from zoo.specs.components import (
    COMPONENT_FIELDS,
    DEFAULT_KINDS,
    MODEL_PARTS,
    ComponentSpec,
    LayerSpec,
    ResolvedComponent,
    as_component_dict,
    format_validation_error,
)
from zoo.specs.interfaces import TokenMixer
from zoo.specs.layer_selectors import parse_layer_selector
from zoo.specs.overrides import parse_updates, prune_layer_overrides, set_nested
from zoo.specs.published import PublishedParams
from zoo.specs.registry import get_registry
from zoo.specs.resolution import merge_component, resolve_component
from zoo.specs.strict_numbers import StrictNumbers

T = TypeVar("T")
# Analysis builds each layer as Python objects on the meta device (about 6 ms a layer), so the
# depth is bounded: real models have at most a few hundred layers; 10**7 would take hours.
MAX_LAYERS = 1024


class StackSpec(BaseModel):
    """The encoder of an encoder-decoder: its depth, component overrides merged over the
    top-level ones (e.g. ``attention: {causal: false}``), its own per-layer selectors and
    whether it ends with a norm."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    n_layers: PositiveInt = Field(le=MAX_LAYERS, description=f"at most {MAX_LAYERS}")
    norm: dict[str, Any] | None = None
    positional: dict[str, Any] | None = None
    attention: dict[str, Any] | None = None
    ffn: dict[str, Any] | None = None
    block: dict[str, Any] | None = None
    layers: dict[str, dict[str, Any]] = Field(default_factory=dict)
    final_norm: bool = True


class ModelSpec(StrictNumbers):
    """A language model: sizes, one component of each family, per-layer overrides; an
    `encoder` stack makes it an encoder-decoder, `attention.causal: false` an encoder."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: str | None = None
    source: str | None = Field(default=None, description="URL of the config this spec follows")
    vocab_size: PositiveInt
    d_model: PositiveInt
    n_layers: PositiveInt = Field(le=MAX_LAYERS, description=f"at most {MAX_LAYERS}")
    max_seq_len: PositiveInt
    tie_embeddings: bool = True
    embedding_scale: float | Literal["sqrt_d_model"] | None = Field(
        default=None, description="multiply token embeddings by this (Gemma: sqrt_d_model)"
    )
    norm: ComponentSpec
    positional: ComponentSpec
    attention: ComponentSpec
    ffn: ComponentSpec
    block: ComponentSpec = ComponentSpec(kind=DEFAULT_KINDS["block"])
    embedding: ComponentSpec = ComponentSpec(kind=DEFAULT_KINDS["embedding"])
    head: ComponentSpec = ComponentSpec(kind=DEFAULT_KINDS["head"])
    final_norm: bool = Field(True, description="a norm after the last block (false: post-norm encoders, BERT)")
    encoder: StackSpec | None = Field(
        None, description="encoder-decoder: the encoder stack (the top level is the decoder)"
    )
    cross_attention: ComponentSpec | None = Field(
        None, description="encoder-decoder: the decoder's cross-attention kind"
    )
    decoder_start_token_id: int | None = Field(None, ge=0, description="encoder-decoder: first decoder token")
    published: PublishedParams | None = Field(
        None, description="parameter counts the authors published (shown beside zoo's; used in no computation)"
    )
    state_dtype: Literal["float32", "cache"] = Field(
        "float32",
        description="recurrent and SSM states: float32 (as transformers and the reference kernels keep "
        "them) or the cache's dtype; convolution windows and K/V always take the cache's dtype",
    )
    layers: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="per-layer overrides: selector -> {component: {...}}"
    )
    # what this immutable spec resolves to (layers, parts, the encoder), each made once
    _resolved: dict[str, Any] = PrivateAttr(default_factory=dict)

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise SpecError(format_validation_error(exc)) from None

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any) -> ModelSpec:  # type: ignore[override]
        if isinstance(obj, ModelSpec):
            return obj
        if not isinstance(obj, Mapping):
            raise SpecError(f"<spec>: expected a mapping of spec fields, got {type(obj).__name__}")
        return cls(**dict(obj))

    @model_validator(mode="before")
    @classmethod
    def _normalise_components(cls, data: Any) -> Any:
        """Validate every component against its registered kind, defaults filled in."""
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        unknown = set(data) - set(cls.model_fields)
        if unknown:
            key = sorted(unknown)[0]
            raise SpecError(
                f"{key}: unknown key{did_you_mean(key, cls.model_fields)}; allowed: {allowed(cls.model_fields)}"
            )
        n_layers = data.get("n_layers")
        if isinstance(n_layers, int) and not isinstance(n_layers, bool) and n_layers > MAX_LAYERS:
            raise SpecError(
                f"n_layers: {n_layers:,} layers is more than zoo models and analyses (at most {MAX_LAYERS:,})"
            )
        context = _context(data)
        for slot, default_kind in DEFAULT_KINDS.items():
            data[slot] = data.get(slot) or default_kind
        for slot in (*COMPONENT_FIELDS, *MODEL_PARTS):
            if slot in data:
                data[slot] = resolve_component(slot, data[slot], slot, context).to_dict()
        layers = data.get("layers") or {}
        if not isinstance(layers, Mapping):
            raise SpecError(f"layers: expected a mapping of layer selector -> overrides, got {layers!r}")
        n_layers = data.get("n_layers")
        normalised: dict[str, dict[str, Any]] = {}
        for key, override in layers.items():
            if not isinstance(override, Mapping):
                raise SpecError(f"layers.{key}: expected a mapping of family -> options, got {override!r}")
            for field in override:
                if field not in COMPONENT_FIELDS:
                    raise SpecError(
                        f"layers.{key}.{field}: unknown component{did_you_mean(str(field), COMPONENT_FIELDS)}; "
                        f"allowed: {allowed(COMPONENT_FIELDS)}"
                    )
            normalised[str(key)] = {
                f: as_component_dict(v, f"layers.{key}.{f}") if isinstance(v, str) else dict(v)
                for f, v in override.items()
            }
            if isinstance(n_layers, int) and n_layers > 0 and all(f in data for f in COMPONENT_FIELDS):
                for index in parse_layer_selector(str(key), n_layers):
                    _resolve_layer(data, normalised, index, context)
        data["layers"] = normalised
        _check_encoder(data, context)
        return data

    # ---- per-layer view -------------------------------------------------------------------
    def layer(self, index: int) -> LayerSpec:
        """The components of layer ``index`` with every override applied."""
        if not 0 <= index < self.n_layers:
            raise SpecError(f"layer index {index} is out of range; allowed: 0..{self.n_layers - 1}")
        return self.layer_specs()[index]

    def layer_specs(self) -> tuple[LayerSpec, ...]:
        """Every layer's resolved components, resolved once per spec."""
        return self.derived("layers", lambda: _resolve_layers(self.model_dump()))

    def iter_layers(self) -> Iterable[LayerSpec]:
        return iter(self.layer_specs())

    def encoder_spec(self) -> ModelSpec | None:
        """The encoder stack as a spec of its own (components merged over the top level,
        bidirectional attention, no head), or None for a single-stack model."""
        if self.encoder is None:
            return None
        return self.derived("encoder", lambda: _encoder_spec(self.model_dump()))

    def part(self, slot: str) -> ResolvedComponent:
        """A model-level component (``embedding``, ``head``, the base ``norm``, or an
        encoder-decoder's ``cross_attention``), resolved once per spec."""
        raw = getattr(self, slot)
        if raw is None:
            raise SpecError(f"{slot}: this spec has none")
        context = {"d_model": self.d_model, "max_seq_len": self.max_seq_len}
        return self.derived(f"part:{slot}", lambda: resolve_component(slot, raw, slot, context))

    def derived(self, key: str, make: Callable[[], T]) -> T:
        """``make()``, kept on this spec under ``key``: the spec is immutable, so what is
        derived from it (its resolved layers, the meta model the analysis counts) is made
        once per spec, never keyed by its text nor cleared."""
        if key not in self._resolved:
            self._resolved[key] = make()
        value: T = self._resolved[key]
        return value

    @property
    def resolved_embedding_scale(self) -> float | None:
        if self.embedding_scale == "sqrt_d_model":
            return math.sqrt(self.d_model)
        return self.embedding_scale

    # ---- overrides ------------------------------------------------------------------------
    def override(self, updates: Mapping[str, Any] | Iterable[str] | str) -> ModelSpec:
        """A new validated spec with dotted-key updates applied ('attention.n_kv_heads': 1).

        Accepts a mapping, or 'key=value' strings whose values are read as YAML scalars.
        Setting ``X.kind`` swaps the component: options the new kind lacks are dropped and
        its defaults apply.
        """
        pairs = parse_updates(updates)
        data = self.model_dump()
        component_updates: dict[str, dict[str, Any]] = {}
        for dotted, value in pairs:
            head, *rest = dotted.split(".")
            if head not in type(self).model_fields:
                raise SpecError(
                    f"{dotted}: unknown key{did_you_mean(head, type(self).model_fields)}; "
                    f"allowed: {allowed(type(self).model_fields)}"
                )
            if head in COMPONENT_FIELDS or head in MODEL_PARTS or (head == "cross_attention" and data.get(head)):
                if not rest:
                    component_updates[head] = {**component_updates.get(head, {}), **as_component_dict(value, head)}
                else:
                    set_nested(component_updates.setdefault(head, {}), rest, value)
            elif not rest:
                data[head] = value
            else:
                target = data.setdefault(head, {})
                if not isinstance(target, dict):
                    raise SpecError(f"{dotted}: {head} is not a mapping; set it as a whole")
                set_nested(target, rest, value)
        for slot, update in component_updates.items():
            old_kind = data[slot]["kind"]
            data[slot] = merge_component(slot, data[slot], update)
            if data[slot]["kind"] != old_kind and slot in COMPONENT_FIELDS:
                data["layers"] = prune_layer_overrides(data.get("layers") or {}, slot, data[slot]["kind"])
        return type(self)(**data)

    # ---- io -------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=None, width=100)

    def to_json(self, indent: int = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_file(cls, path: str | Path) -> ModelSpec:
        """Read a spec from a YAML or JSON file."""
        path = Path(path)
        text = read_text(path, SpecError, "spec file")
        data = (
            load_json(text, SpecError, str(path)) if path.suffix == ".json" else load_yaml(text, SpecError, str(path))
        )
        if not isinstance(data, Mapping):
            raise SpecError(f"{path}: expected a mapping of spec fields at the top level")
        if set(data) == {"spec", "analysis"} and isinstance(data["spec"], Mapping):
            data = data["spec"]  # `zoo show --format json` output: the analysis is derived, not read
        try:
            return cls.model_validate(data)
        except SpecError as exc:
            raise SpecError(f"{path}: {exc}") from None

    @classmethod
    def from_hf_config(cls, config: str | Path | Mapping[str, Any]) -> ModelSpec:
        """A spec from a Hugging Face config.json (path or parsed dict).

        The spec knows no checkpoint format: the reader (``zoo.hub.config.spec_from_hf_config``)
        is looked up in the registry, which wires built-in parts in by name, so this module
        never imports the hub (the hub imports it).
        """
        spec: ModelSpec = get_registry().spec_reader("hf_config")(config)
        return spec


def _encoder_data(data: Mapping[str, Any]) -> dict[str, Any]:
    """The top-level fields with the encoder's overrides merged in (a spec of its own)."""
    encoder = dict(data["encoder"])
    out = {k: v for k, v in data.items() if k not in ("encoder", "cross_attention", "decoder_start_token_id", "layers")}
    out.update(
        n_layers=encoder["n_layers"], layers=encoder.get("layers") or {}, final_norm=encoder.get("final_norm", True)
    )
    out["head"] = {"kind": "none"}
    out["name"] = f"{data.get('name') or 'model'}-encoder"
    for slot in COMPONENT_FIELDS:
        update = encoder.get(slot)
        if update:
            out[slot] = merge_component(slot, as_component_dict(data[slot], slot), update)
    return out


def _encoder_spec(data: Mapping[str, Any]) -> ModelSpec:
    return ModelSpec(**_encoder_data(data))


def _check_encoder(data: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    """encoder and cross_attention come together; both must resolve (errors say where)."""
    encoder, cross = data.get("encoder"), data.get("cross_attention")
    if (encoder is None) != (cross is None):
        missing = "cross_attention" if cross is None else "encoder"
        raise SpecError(
            f"{missing}: required when {'encoder' if cross is None else 'cross_attention'} is set "
            "(an encoder-decoder needs both; a single-stack model neither)"
        )
    if encoder is None:
        return
    data["cross_attention"] = resolve_component("cross_attention", cross, "cross_attention", context).to_dict()
    if isinstance(encoder, StackSpec):
        encoder = encoder.model_dump()
    if not isinstance(encoder, Mapping):
        raise SpecError(f"encoder: expected a mapping like {{n_layers: 6, ...}}, got {encoder!r}")
    try:
        encoder_spec = _encoder_spec({**data, "encoder": StackSpec(**encoder).model_dump()})
    except ValidationError as exc:
        raise SpecError(format_validation_error(exc, prefix="encoder")) from None
    except SpecError as exc:
        raise SpecError(f"encoder: {exc}") from None
    _check_bidirectional(encoder_spec)


def _check_bidirectional(encoder: ModelSpec) -> None:
    """An encoder's mixers see every token: each kind must declare it can
    (``TokenMixer.bidirectional``); a recurrent scan cannot."""
    for layer in encoder.layer_specs():
        mixer = layer.attention.module
        if not (issubclass(mixer, TokenMixer) and mixer.bidirectional):
            registry = get_registry()
            able = [
                k for k in registry.kinds("attention") if _is_bidirectional(registry.component("attention", k).module)
            ]
            raise SpecError(
                f"encoder.attention.kind: {layer.attention.kind} cannot be bidirectional (layer {layer.index} of the "
                f"encoder, whose mixers see every token); allowed: {allowed(able)}"
            )


def _is_bidirectional(module: type) -> bool:
    return issubclass(module, TokenMixer) and module.bidirectional


def _resolve_layers(data: Mapping[str, Any]) -> tuple[LayerSpec, ...]:
    """Every layer's components; layers under the same set of selectors are resolved once."""
    n_layers = int(data["n_layers"])
    context = _context(data)
    overrides: Mapping[str, Mapping[str, Any]] = data["layers"]
    members = {key: set(parse_layer_selector(key, n_layers)) for key in overrides}
    resolved: dict[tuple[str, ...], LayerSpec] = {}
    layers = []
    for index in range(n_layers):
        group = tuple(key for key in overrides if index in members[key])
        if group not in resolved:
            resolved[group] = _resolve_layer(data, overrides, index, context)
        layers.append(dataclasses.replace(resolved[group], index=index))
    return tuple(layers)


def _context(data: Mapping[str, Any]) -> dict[str, Any]:
    return {"d_model": data.get("d_model"), "max_seq_len": data.get("max_seq_len")}


def _resolve_layer(
    data: Mapping[str, Any], overrides: Mapping[str, Mapping[str, Any]], index: int, context: Mapping[str, Any]
) -> LayerSpec:
    n_layers = int(data["n_layers"])
    parts: dict[str, Any] = {f: as_component_dict(data[f], f) for f in COMPONENT_FIELDS}
    paths = {f: f for f in COMPONENT_FIELDS}
    for key, override in overrides.items():
        if index in parse_layer_selector(key, n_layers):
            for slot, update in override.items():
                parts[slot] = merge_component(slot, parts[slot], update)
                paths[slot] = f"layers.{key}.{slot}"
    resolved = {f: resolve_component(f, parts[f], paths[f], context) for f in COMPONENT_FIELDS}
    return LayerSpec(index=index, **resolved)
