"""The model: token embedding -> blocks -> final norm -> LM head, built from a ModelSpec.

Every part comes from the registry; this file knows no component kind by name. Models are
built on the meta device first (no memory), then materialised on the target device and
initialised, so a 0.6B model is ready in seconds and analysis never allocates.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn

from zoo.components.linear import Linear
from zoo.errors import PluginError, SpecError
from zoo.interfaces import BuildContext, Positional, Positions, StateTensor, TokenMixer
from zoo.model_spec import LayerSpec, ModelSpec, ResolvedComponent

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
}


def resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype:
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise SpecError(f"dtype: unknown dtype {dtype!r}; allowed: {', '.join(sorted(DTYPES))}")
    return DTYPES[dtype]


def _tag(module: nn.Module, family: str) -> nn.Module:
    """Mark a module with the family it was built for (for per-component counts)."""
    module._zoo_family = family  # type: ignore[assignment]
    return module


def _norm_factory(component: ResolvedComponent):  # type: ignore[no-untyped-def]
    def make_norm(dim: int) -> nn.Module:
        return _tag(component.entry.factory(component.options, dim), "norm")

    return make_norm


class ZooModel(nn.Module):
    """A decoder-only language model assembled from registered components."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.spec = spec
        d = spec.d_model
        self.embed = _tag(nn.Embedding(spec.vocab_size, d), "embedding")
        layer_specs = spec.layer_specs()
        self.positionals = nn.ModuleList()
        positional_index: dict[str, int] = {}
        self.layer_positional: list[int] = []
        blocks = []
        # references into blocks, not registered twice: the token mixers that keep state
        # between calls, in cache order, and each block's index into them
        self._stateful: list[tuple[str, TokenMixer]] = []
        for layer in layer_specs:
            ctx = self._context(layer)
            key = repr((layer.positional.to_dict(), _head_geometry(layer)))
            if key not in positional_index:
                positional_index[key] = len(self.positionals)
                self.positionals.append(_tag(_build(layer.positional, ctx), "positional"))
            self.layer_positional.append(positional_index[key])
            attention = _tag(_build(layer.attention, ctx), "attention")
            ffn = _build(layer.ffn, ctx)
            block = _build(layer.block, ctx, attention=attention, ffn=None if ffn is None else _tag(ffn, "ffn"))
            blocks.append(_tag(block, "block"))
            self._stateful.append((f"layers.{layer.index}.attention", attention))
        self.layers = nn.ModuleList(blocks)
        self.final_norm = _norm_factory(_base(spec, "norm"))(d)
        self.lm_head = _tag(Linear(d, spec.vocab_size, bias=False), "unembedding")
        self.embedding_scale = spec.resolved_embedding_scale
        self.tie_weights()

    def _context(self, layer: LayerSpec) -> BuildContext:
        spec = self.spec
        return BuildContext(
            d_model=spec.d_model,
            n_layers=spec.n_layers,
            layer_index=layer.index,
            vocab_size=spec.vocab_size,
            max_seq_len=spec.max_seq_len,
            layer=layer,
            make_norm=_norm_factory(layer.norm),
        )

    def tie_weights(self) -> None:
        if self.spec.tie_embeddings:
            self.lm_head.weight = self.embed.weight

    # ---- structure ------------------------------------------------------------------------
    def stateful_modules(self) -> list[tuple[str, TokenMixer]]:
        """(path, module) of every token mixer the cache keeps state for, in cache order."""
        return list(self._stateful)

    @property
    def attention_modules(self) -> list[TokenMixer]:
        """The blocks' self-attention mixers, layer by layer."""
        return [module for _, module in self._stateful]

    def state_layout(self, batch_size: int, max_len: int, memory_len: int = 0) -> list[dict[str, StateTensor]]:
        """What each stateful mixer keeps between calls, as it declares it (cache order)."""
        return [module.state_layout(batch_size, max_len, memory_len) for _, module in self._stateful]

    def positions_for(self, ids: torch.Tensor) -> list[Positions]:
        """One Positions per distinct positional module; rotations computed once, shared."""
        shared = []
        for module in self.positionals:
            assert isinstance(module, Positional)
            shared.append(Positions(ids=ids, positional=module, rotation=module.rotation(ids)))
        return shared

    # ---- forward --------------------------------------------------------------------------
    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor | None = None,
        cache: Any = None,
        cache_time: torch.Tensor | None = None,
        last_only: bool = False,
    ) -> torch.Tensor:
        """Logits (B, T, vocab) for input_ids (B, T).

        Without a cache the whole sequence attends causally. With one, ``cache_time`` (T,)
        gives the cache slots of these tokens (default: the next free slots, claimed from
        the cache's device-side write position, so a decode step has no Python-int state)
        and ``positions`` (B, T) their positions (default: the times less each row's left
        padding). ``last_only`` returns only the last position's logits (B, 1, vocab).
        """
        B, T = input_ids.shape
        claimed = cache is not None and cache_time is None
        if claimed:
            cache_time = cache.advance(T)  # (T,)
        if positions is None:
            if cache is not None:
                positions = cache.positions(cache_time)  # (B, T)
            else:
                base = cache_time if cache_time is not None else torch.arange(T, device=input_ids.device)
                positions = base[None, :].expand(B, T)
        x = self.embed(input_ids)  # (B, T, d)
        if self.embedding_scale is not None:
            x = x * torch.tensor(self.embedding_scale, dtype=x.dtype)
        shared = self.positions_for(positions)
        x = shared[self.layer_positional[0]].positional.embed(x, positions)
        for i, block in enumerate(self.layers):
            state = None if cache is None else cache.layer(i, cache_time, claimed)
            x = block(x, shared[self.layer_positional[i]], state)  # (B, T, d)
        if last_only:
            x = x[:, -1:]
        return self.lm_head(self.final_norm(x))  # (B, T, vocab)


def _head_geometry(layer: LayerSpec) -> tuple[Any, Any]:
    """What a positional encoding reads of its layer's mixer (documented in zoo.interfaces):
    layers whose heads differ get their own rotation."""
    options = layer.attention.options
    return getattr(options, "head_dim", None), getattr(options, "rope_head_dim", None)


def _base(spec: ModelSpec, family: str) -> ResolvedComponent:
    from zoo.model_spec import resolve_component

    return resolve_component(family, getattr(spec, family), family, {"d_model": spec.d_model})


def _build(component: ResolvedComponent, ctx: BuildContext, **modules: Any) -> Any:
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
    return module


def as_spec(spec: ModelSpec | str | Mapping[str, Any]) -> ModelSpec:
    """A ModelSpec from a spec, a preset name or a dict."""
    if isinstance(spec, ModelSpec):
        return spec
    if isinstance(spec, str):
        from zoo.archs import preset

        return preset(spec)
    if isinstance(spec, Mapping):
        return ModelSpec.model_validate(spec)
    raise SpecError(f"expected a ModelSpec, a preset name or a dict, got {type(spec).__name__}")


def init_weights(model: nn.Module, std: float = 0.02) -> None:
    """Random initialisation: N(0, std) for matrices and embeddings, zero biases, unit norms."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=std)
                bias = getattr(module, "bias", None)
                if bias is not None:
                    nn.init.zeros_(bias)
            elif hasattr(module, "reset_parameters") and module is not model:
                module.reset_parameters()
            sinks = getattr(module, "sinks", None)
            if isinstance(sinks, nn.Parameter):
                nn.init.zeros_(sinks)


def init_buffers(model: nn.Module) -> None:
    """Recompute derived buffers (RoPE frequencies) after materialisation or a dtype cast."""
    for module in model.modules():
        if isinstance(module, Positional):
            module.init_buffers()


_INIT_FUNCTIONS = ("uniform_", "normal_", "trunc_normal_", "constant_", "zeros_", "ones_", "kaiming_uniform_", "kaiming_normal_", "xavier_uniform_", "xavier_normal_")


@contextlib.contextmanager
def _skip_torch_init() -> Iterator[None]:
    """Make torch.nn.init a no-op while modules are constructed on meta.

    Meta tensors hold no values, yet torch's default initialisers still run on them (and
    the first meta normal_ imports torch's compiler stack, seconds); ``build`` initialises
    real tensors afterwards, once.
    """
    saved = {name: getattr(nn.init, name) for name in _INIT_FUNCTIONS}
    try:
        for name in _INIT_FUNCTIONS:
            setattr(nn.init, name, lambda tensor, *args, **kwargs: tensor)
        yield
    finally:
        for name, fn in saved.items():
            setattr(nn.init, name, fn)


def build(
    spec: ModelSpec | str | Mapping[str, Any],
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = None,
    *,
    init: bool = True,
    seed: int | None = None,
) -> ZooModel:
    """Build a model from a spec (or preset name) on ``device`` in ``dtype``.

    ``device="meta"`` allocates nothing (analysis). Otherwise the model is built on meta,
    materialised on the device and, unless ``init=False`` (weights about to be loaded),
    randomly initialised.
    """
    spec = as_spec(spec)
    torch_dtype = resolve_dtype(dtype)
    with torch.device("meta"), _skip_torch_init():
        model = ZooModel(spec)
    model.to(dtype=torch_dtype)
    target = torch.device(device) if device is not None else torch.device("cpu")
    if target.type == "meta":
        return model
    model.to_empty(device=target)
    model.tie_weights()
    init_buffers(model)
    if init:
        if seed is None:
            init_weights(model)
        else:
            devices = [target] if target.type == "cuda" else []
            with torch.random.fork_rng(devices=devices, device_type=target.type if devices else "cuda"):
                torch.manual_seed(seed)
                init_weights(model)
    return model
