"""The model: embedding -> [encoder] -> blocks -> final norm -> head, built from a ModelSpec.

Every part comes from the registry; this file knows no component kind by name. Models are
built on the meta device first (no memory), then materialised on the target device and
initialised, so a 0.6B model is ready in seconds and analysis never allocates.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from zoo.errors import GenerationError, SpecError
from zoo.files.host_memory import rehome
from zoo.model.sampling import check_seed
from zoo.model.stack import PartFamilies, build_component, build_layers, context, norm_factory, shared_positions
from zoo.specs.interfaces import CrossMixer, Embedding, Positional, Positions, TokenMixer
from zoo.specs.model import ModelSpec
from zoo.specs.presets import preset
from zoo.specs.state import BlockState, HoldsState, Memory, StateTensor

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


class Encoder(nn.Module):
    """An encoder-decoder's encoder stack: its own positionals, embedding, blocks and final norm.

    Its embedding module is built from the same embedding spec, its token table tied to the
    model's (``tie``), so what a stack adds to the table is its own: BART normalises each
    stack's embeddings with a LayerNorm of its own. It never keeps state.
    """

    def __init__(self, spec: ModelSpec, families: PartFamilies) -> None:
        super().__init__()
        self.spec = spec
        self.embed = build_component(
            spec.part("embedding"), context(spec, spec.layer_specs()[0], "encoder", families), families
        )
        layers = build_layers(spec, "encoder", families, "encoder.")
        self.positionals, self.layers = layers.positionals, layers.blocks
        self.layer_positional = layers.layer_positional
        self.input_positional = layers.input_positional
        self.final_norm = norm_factory(spec.part("norm"), families)(spec.d_model) if spec.final_norm else None

    def tie(self, embedding: Embedding) -> None:
        """Share the model's token table (after materialisation or loading)."""
        self.embed.weight = embedding.weight

    def forward(
        self, input_ids: torch.Tensor, valid: torch.Tensor | None, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        """input_ids (B, S), valid (B, S) or None -> hidden states (B, S, d). Positions number
        the slots (an encoder's padding shifts nothing, as in transformers)."""
        B, S = input_ids.shape
        base = torch.arange(S, device=input_ids.device)[None, :].expand(B, S)
        first = self.positionals[self.input_positional]
        assert isinstance(first, Positional)
        shared = shared_positions(self.positionals, first.position_ids(base, valid), valid)
        x = self.embed(input_ids, shared[self.input_positional], token_type_ids)  # (B, S, d)
        for i, block in enumerate(self.layers):
            x = block(x, shared[self.layer_positional[i]])
        return x if self.final_norm is None else self.final_norm(x)


class ZooModel(nn.Module):
    """A model assembled from registered components: embedding -> [encoder] -> blocks ->
    final norm -> head. Decoder-only, encoder-only (bidirectional attention, a masked-LM,
    pooler or no head) and encoder-decoder models are all specs of this one class."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.spec = spec
        first = spec.layer_specs()[0]
        families = PartFamilies()
        self.embed = build_component(spec.part("embedding"), context(spec, first, "decoder", families), families)
        encoder_spec = spec.encoder_spec()
        layers = build_layers(spec, "decoder", families)
        self.positionals = layers.positionals
        self.layer_positional = layers.layer_positional
        self.input_positional = layers.input_positional
        self.layers = layers.blocks
        # references into blocks, not registered twice: the parts that keep state in cache
        # order, each block's {part: index into them}, and the self- and cross-mixers
        self._stateful: list[tuple[str, HoldsState]] = layers.stateful
        self._states = layers.states
        self._mixers: list[TokenMixer] = layers.mixers
        self._cross: list[CrossMixer] = layers.cross
        self.final_norm = norm_factory(spec.part("norm"), families)(spec.d_model) if spec.final_norm else None
        self.lm_head = build_component(spec.part("head"), context(spec, first, "decoder", families), families)
        self.encoder = None if encoder_spec is None else Encoder(encoder_spec, families)
        # declared at build, kept on the model (quantization may swap the head's Linear):
        # what each module path was built as, and what the head declares
        self.part_families: dict[str, str] = families.by_path(self)
        self.head_gives_logits: bool = self.lm_head.logits
        self.head_tied: bool = self.lm_head.tied
        # how loaded weights are held when a checkpoint says more than the dtype (a GGUF's
        # "Q4_1 -> int4 x168; the rest float32"); None for built or float checkpoints
        self.weights_layout: str | None = None
        self.checkpoint: Path | None = None  # the folder or GGUF file the weights came from (from_pretrained)
        self.hf_model_type: str | None = (
            None  # the checkpoint's family (from_pretrained; save_pretrained writes it back)
        )
        self.tie_weights()

    def tie_weights(self) -> None:
        """Re-point a tied head at the embedding table (after materialisation or loading)."""
        self.lm_head.tie(self.embed)
        if self.encoder is not None:
            self.encoder.tie(self.embed)

    # ---- structure ------------------------------------------------------------------------
    def stateful_modules(self) -> list[tuple[str, HoldsState]]:
        """(path, part) of every part the cache keeps state for, in cache order: each
        decoder layer's self-attention, its cross-attention, then a stateful FFN."""
        return list(self._stateful)

    @property
    def attention_modules(self) -> list[TokenMixer]:
        """The blocks' self-attention mixers, layer by layer."""
        return list(self._mixers)

    @property
    def cross_attention_modules(self) -> list[CrossMixer]:
        """The blocks' cross-attention mixers (encoder-decoders), layer by layer."""
        return list(self._cross)

    @property
    def causal(self) -> bool:
        """Whether every self-mixer is causal (a decoder): then an uncached call's positions
        count real tokens, as a cached prefill's do (time less the row's left pads)."""
        return all(module.causal for module in self.attention_modules)

    @property
    def can_generate(self) -> bool:
        """Token by token generation needs causal self-mixers and a head giving logits."""
        return self.causal and self.head_gives_logits

    def state_layout(self, batch_size: int, max_len: int, memory_len: int = 0) -> list[dict[str, StateTensor]]:
        """What each stateful part keeps between calls, as it declares it (cache order)."""
        return [module.state_layout(batch_size, max_len, memory_len) for _, module in self._stateful]

    def positions_for(self, ids: torch.Tensor, key_valid: torch.Tensor | None = None) -> list[Positions]:
        """One Positions per distinct positional module; rotations computed once, shared."""
        return shared_positions(self.positionals, ids, key_valid)

    # ---- forward --------------------------------------------------------------------------
    def encode(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> Memory:
        """The encoder's output for input_ids (B, S): hidden (B, S, d) and its validity."""
        if self.encoder is None:
            raise SpecError("encode: this model has no encoder (set spec.encoder for an encoder-decoder)")
        valid = _valid(attention_mask, input_ids)
        return Memory(self.encoder(input_ids, valid, token_type_ids), valid)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor | None = None,
        cache: Any = None,
        cache_time: torch.Tensor | None = None,
        last_only: bool = False,
        *,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        memory: Memory | None = None,
        hidden: bool = False,
    ) -> torch.Tensor:
        """The head's output for input_ids (B, T): logits (B, T, vocab), or hidden states
        (B, T, d) for a model without an LM head (or with ``hidden=True``: the final
        hidden states whatever the head).

        Without a cache the whole sequence is one call; ``attention_mask`` (B, T) marks
        padding (1 token, 0 pad) that no query attends to, and in a causal model (a decoder)
        positions count real tokens only, so each row's real tokens get the outputs they
        get alone (an encoder numbers slots, as transformers does). With a cache, ``cache_time`` (T,)
        gives the cache slots of these tokens (default: the next free slots, claimed from
        the cache's device-side write position, so a decode step has no Python-int state)
        and ``positions`` (B, T) their positions (default: the times less each row's left
        padding). ``memory``: the encoder output (``encode``), needed without a cache and
        on the first call with one (its cross K/V are then kept). ``last_only`` returns
        only the last position's output (B, 1, ...).
        """
        T = input_ids.shape[1]
        if self.encoder is not None and memory is None and (cache is None or cache.memory_valid is None):
            raise GenerationError("memory: an encoder-decoder needs the encoder output; pass memory=model.encode(ids)")
        claimed = cache is not None and cache_time is None
        if claimed:
            cache_time = cache.advance(T)  # (T,)
        valid = None if cache is not None else _valid(attention_mask, input_ids)
        if positions is None:
            positions = self._default_positions(input_ids, cache, cache_time, valid)  # (B, T)
        shared = self.positions_for(positions, valid)
        x = self.embed(input_ids, shared[self.input_positional], token_type_ids)  # (B, T, d)
        if memory is not None and cache is not None:
            cache.set_memory(memory)
        for i, block in enumerate(self.layers):
            state = None
            if cache is not None:
                state = BlockState(**{part: cache.layer(j, cache_time, claimed) for part, j in self._states[i].items()})
            x = block(x, shared[self.layer_positional[i]], state, memory)  # (B, T, d)
        if last_only:
            x = x[:, -1:]
        final_norm = self.final_norm
        if final_norm is not None:
            x = final_norm(x)
        return x if hidden else self.lm_head(x)  # (B, T, vocab) or (B, T, d)

    def _default_positions(
        self,
        input_ids: torch.Tensor,
        cache: Any,
        cache_time: torch.Tensor | None,
        valid: torch.Tensor | None,
    ) -> torch.Tensor:
        """Positions (B, T) when the caller gives none: the cache's (times less each row's
        left padding), else slot numbers, counted over real tokens only in a causal model."""
        if cache is not None:
            return cache.positions(cache_time)  # (B, T)
        B, T = input_ids.shape
        base = cache_time if cache_time is not None else torch.arange(T, device=input_ids.device)
        default = base[None, :].expand(B, T)  # (B, T)
        if valid is not None and self.causal:
            default = real_token_positions(valid) + base[:1]  # (B, T)
        first = self.positionals[self.input_positional]
        assert isinstance(first, Positional)
        return first.position_ids(default, valid)


def real_token_positions(valid: torch.Tensor) -> torch.Tensor:
    """Positions (B, T) that count a row's real tokens from 0 (``valid`` (B, T) bool): a
    left-padded row's first token gets 0, as it would alone (transformers' generate:
    ``attention_mask.cumsum(-1) - 1``); padding slots get 0 (their outputs are unused)."""
    counted = valid.long().cumsum(dim=1) - 1  # (B, T)
    return counted.masked_fill(~valid, 0)


def _valid(attention_mask: torch.Tensor | None, input_ids: torch.Tensor) -> torch.Tensor | None:
    """The attention mask as bool (B, T), after checking its shape; None when absent."""
    if attention_mask is None:
        return None
    if tuple(attention_mask.shape) != tuple(input_ids.shape):
        raise GenerationError(
            f"attention_mask: shape {tuple(attention_mask.shape)} must equal input_ids' {tuple(input_ids.shape)}"
        )
    return attention_mask.to(device=input_ids.device, dtype=torch.bool)


def as_spec(spec: ModelSpec | str | Mapping[str, Any]) -> ModelSpec:
    """A ModelSpec from a spec, a preset name or a dict."""
    if isinstance(spec, ModelSpec):
        return spec
    if isinstance(spec, str):
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
                module.reset_parameters()  # torch's convention: attention sinks start at 0
        for buffer in persistent_buffers(model).values():  # logits / router biases start at 0
            buffer.zero_()


def persistent_buffers(model: nn.Module) -> dict[str, torch.Tensor]:
    """Buffers saved with the weights (BART's final_logits_bias), by state-dict name."""
    names = set(model.state_dict(keep_vars=True)) - {n for n, _ in model.named_parameters(remove_duplicate=False)}
    return {name: buffer for name, buffer in model.named_buffers() if name in names}


def init_buffers(model: nn.Module) -> None:
    """Recompute derived buffers (RoPE frequencies) after materialisation or a dtype cast."""
    for module in model.modules():
        if isinstance(module, Positional):
            module.init_buffers()


_INIT_FUNCTIONS = (
    "uniform_",
    "normal_",
    "trunc_normal_",
    "constant_",
    "zeros_",
    "ones_",
    "kaiming_uniform_",
    "kaiming_normal_",
    "xavier_uniform_",
    "xavier_normal_",
)


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
    check_seed(seed, SpecError)
    torch_dtype = resolve_dtype(dtype)
    with torch.device("meta"), _skip_torch_init():
        try:
            model = ZooModel(spec)
        except RuntimeError as exc:
            if "overflow" not in str(exc):
                raise
            raise SpecError(
                f"{spec.name or 'spec'}: too large to describe: {str(exc).splitlines()[0]} "
                "(a tensor of more than 2**63 bytes)"
            ) from None
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
        if target.type == "cpu":
            rehome(model)
    return model
