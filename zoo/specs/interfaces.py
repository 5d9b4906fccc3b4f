"""What each component slot must provide, and the small types they share.

Every slot has a base class that its modules subclass; a plugin declares the class it
builds when it registers (``register(slot, kind, factory, options=..., module=Class)``)
and the registry checks, at that moment, that the class subclasses the slot's base,
implements its abstract members and declares consistent capabilities (ClassVars: a mixer's
``bidirectional``, a block's ``takes_cross_attention`` / ``feeds_ffn_state``, a part's
``stateful``). Nothing is discovered with ``getattr`` at run time.

Factories are called per slot as follows (dependency injection: modules receive built
modules and plain numbers, never the whole config):

- norm:       ``factory(options, dim) -> Norm`` with ``forward(x) -> x``.
- positional: ``factory(options, ctx) -> Positional``.
- attention:  ``factory(options, ctx) -> TokenMixer`` (softmax attention and recurrent
  mixers): ``forward(x (B, T, d), positions, state=None) -> (B, T, d)``;
  ``state_layout(batch_size, max_len, memory_len=0) -> dict[str, StateTensor]``;
  ``score_flops(n_new, context_len) -> int``; ``reset_state(state)``.
- cross_attention: ``factory(options, ctx) -> CrossMixer`` (an encoder-decoder's decoder
  reads the encoder output): ``forward(x, memory=None, state=None) -> x``.
- ffn:        ``factory(options, ctx) -> FeedForward | None`` (None: the block has no FFN
  branch); ``forward(x) -> x`` (a ``stateful`` one: ``forward(x, state, valid)``);
  ``active_param_count() -> int``.
- block:      ``factory(options, ctx, attention=..., ffn=..., cross_attention=None) -> Block``
  with ``forward(x, positions, state=None, memory=None) -> x`` (``state``: a
  ``BlockState``, each part's cache view); it makes its norms with ``ctx.make_norm(dim)``.
- embedding:  ``factory(options, ctx) -> Embedding``; ``forward(input_ids, positions,
  token_type_ids=None) -> (B, T, d)``; its table is ``weight`` (V, d).
- head:       ``factory(options, ctx) -> Head``; ``forward(x (B, T, d)) -> (B, T, out)``;
  ``tie(embedding)`` shares the embedding table where the head is tied.

Attention options must expose ``n_heads`` and ``head_dim`` (and ``rope_head_dim`` when only
part of each head is rotated, as latent attention does): positional encodings read them.
"""

from __future__ import annotations

from abc import ABC, ABCMeta, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch
from torch import nn

from zoo.specs.components import LayerSpec
from zoo.specs.options import Options
from zoo.specs.state import BlockState, HoldsState, LayerState, Memory, StateTensor

Role = Literal["decoder", "encoder"]


@dataclass(frozen=True)
class BuildContext:
    """What a factory may know about where its module goes."""

    d_model: int
    n_layers: int
    layer_index: int
    vocab_size: int
    max_seq_len: int
    layer: LayerSpec
    make_norm: Callable[[int], nn.Module]
    role: Role = "decoder"  # which stack; an encoder's mixers are bidirectional whatever their options
    embedding_scale: float | None = None  # embedding: multiply token embeddings by this
    tie_embeddings: bool = True  # head: share the embedding table
    state_dtype: torch.dtype | None = torch.float32  # recurrent/SSM state tensors; None: the cache's dtype

    @property
    def causal(self) -> bool:
        """Whether the stack may mask the future: False in an encoder stack, whose mixers
        must then see every token (``TokenMixer.bidirectional``, checked by the spec)."""
        return self.role == "decoder"


@dataclass(frozen=True, slots=True)
class TokenNorm:
    """A norm as a layer's one-token step applies it before the layer (``Norm.token_norm``): a
    layer norm (``rms`` False: mean and variance, a bias where it has one) or an RMS norm
    (``unit_offset``: scaled by 1 + w, Gemma's), over the last dimension, ``weight`` (d,)."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    eps: float
    rms: bool
    unit_offset: bool = False


class Part(nn.Module):
    """Base of every built part of a model (the registry checks each declared class is one)."""


class ChoosesKernel(nn.Module):
    """A part with implementations besides its reference maths (``KernelChoice`` in
    ``zoo.components.kernels``), decided once per module for a device. Code about to trace a
    graph over a model resolves them first (``zoo.model.generation``'s compiled steps): an
    extension cannot be built while dynamo traces, so a graph runs only kernels resolved before."""

    def resolve_kernel(self, device: torch.device) -> str:
        """The implementation this module runs on ``device`` (decided at the first call)."""
        raise NotImplementedError


class Rotation(ABC):
    """Rotates queries and keys by position (RoPE and its kin), once per forward for all layers."""

    @abstractmethod
    def __call__(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q (B, H, T, D) and k (B, Hkv, T, D), rotated; the same shapes."""

    def half_split(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor] | None:
        """cos, signed_sin (B|1, 1, T, R) in ``dtype`` where this is ``x[..., :R] * cos +
        roll(x[..., :R], R/2) * signed_sin`` (a kernel may apply it on the way: an eager decode
        step's attention call does); None where it is anything else."""
        return None


@dataclass
class Positions:
    """Positions of the tokens in one forward call, with what each layer's encoding derives:
    ``ids`` (B, T) absolute positions; ``rotation`` made once per forward per positional module."""

    ids: torch.Tensor  # (B, T) int64
    positional: Positional
    rotation: Rotation | None = None
    key_valid: torch.Tensor | None = None  # (B, T): uncached calls, False at padding (attention_mask)
    _memo: dict[Any, Any] = field(default_factory=dict)

    def memo(self, key: Any, make: Callable[[], Any]) -> Any:
        """``make()`` once per forward for each hashable ``key``: what every layer of the call
        would derive alike (T5's relative-bias mask: 6 layers of t5-small's decoder built
        the same one each step)."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def key_times(self, n: int, device: torch.device) -> torch.Tensor:
        """Times 0..n-1 (n,) of a cached call's keys, made once per forward for every layer."""
        return self.memo(("key_times", n, device), lambda: torch.arange(n, device=device))

    def rotate(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.rotation is None:
            return q, k
        return self.rotation(q, k)

    def score_bias(self, key_positions: torch.Tensor, n_heads: int) -> torch.Tensor | None:
        """Additive attention-score bias (B, H, T, S) for keys at ``key_positions`` (B, S)."""
        return self.positional.score_bias(self.ids, key_positions, n_heads)


class Positional(Part):
    """Base of positional encodings: override whichever of the three hooks applies.

    A stack builds one module per distinct (positional spec, ``layer_key``) and every layer
    with that pair shares it (one table, one rotation per forward). The stack's input (the
    ``embed`` and ``position_ids`` hooks) is handled by the one module that overrides them.
    """

    def params_read(self, positions: int) -> int:
        """Parameters one pass over ``positions`` tokens reads: a table's used rows (default: all)."""
        return sum(p.numel() for p in self.parameters())

    @classmethod
    def layer_key(cls, options: Options, ctx: BuildContext) -> Any:
        """What the factory reads of its layer beyond ``options`` (a hashable value; equal
        keys and options: one shared module). Kinds override it with exactly what they
        read (RoPE: the rotated channels; a learned table: nothing, it is per stack); the
        default, the layer's whole mixer spec, never shares a module built for other heads."""
        return repr(ctx.layer.attention.to_dict())

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Add to token embeddings (learned, sinusoidal). x: (B, T, d); positions: (B, T)."""
        return x

    def rotation(self, positions: torch.Tensor) -> Rotation | None:
        """A rotation of q and k for these (B, T) positions, or None."""
        return None

    def score_bias(
        self, query_positions: torch.Tensor, key_positions: torch.Tensor, n_heads: int
    ) -> torch.Tensor | None:
        """An additive bias on attention scores (ALiBi), or None."""
        return None

    def last_query_bias(self, key_times: torch.Tensor, n_heads: int, dtype: torch.dtype) -> torch.Tensor | None:
        """``score_bias`` of one query at the last of ``key_times`` (S,), which are 0..S-1, over
        all of them: (1, H, 1, S) contiguous in ``dtype``, or None without a bias; a cached
        decode step's, which all its layers share. Made through ``score_bias`` here; an
        encoding whose bias depends on the distance alone may keep a table across steps (T5's
        relative buckets)."""
        bias = self.score_bias(key_times[-1:][None], key_times[None], n_heads)  # (1, H, 1, S) | None
        return None if bias is None else bias.to(dtype).contiguous()

    def init_buffers(self) -> None:
        """Recompute non-persistent buffers after the module left the meta device."""

    def position_ids(self, default: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
        """Positions (B, T) of an uncached call: ``default`` counts every slot from 0;
        ``valid`` (B, T) is the attention mask. RoBERTa's learned table counts real tokens."""
        return default


class Mixer(HoldsState, Part, metaclass=ABCMeta):
    """What the analysis reads of every mixing module, self- or cross-attention: the FLOPs of
    its mixing and which of its parameters run per token."""

    @abstractmethod
    def score_flops(self, n_new: int, context_len: int) -> int:
        """FLOPs of mixing beyond the projections (2 per multiply-add) for ``n_new`` queries
        ending at ``context_len`` keys; a recurrent mixer counts its state update,
        independent of the context."""

    def fusable_projections(self) -> dict[str, tuple[str, ...]]:
        """Linears that read the same input and may run as one product
        (``zoo.fuse_projections``): ``{fused name: (part names...)}``; none by default."""
        return {}

    def matmul_param_count(self) -> int:
        """Parameters multiplied with each token as matrix weights (2 FLOPs each per token).
        A mixer whose other parameters are elementwise (decays, skips, convolution taps,
        gated-norm scales) names only its projections here and counts the rest in
        ``score_flops``, so no parameter is charged twice. All parameters by default."""
        return sum(p.numel() for p in self.parameters())

    def executed_score_flops(self, n_new: int, context_len: int) -> int:
        """``score_flops`` as the kernel executes it: a chunked prefill scan (padded chunks,
        intra-chunk products) does more than the recurrence's minimum. The roofline uses
        this; MFU uses ``score_flops``. The same by default."""
        return self.score_flops(n_new, context_len)

    def memory_param_count(self) -> int:
        """Parameters that project the encoder's memory (cross-attention K/V): they run once
        per memory token when the cache is given the memory, never on a cached decode step,
        so the analysis charges them to the prompt, not to each token. None by default."""
        return 0


class TokenMixer(Mixer):
    """Base of every ``attention``-slot module: softmax attention and recurrent mixers
    (linear attention, state-space layers).

    ``causal`` (per instance) says whether a token sees only earlier tokens (decoders) or
    all of them; models refuse to generate with non-causal self-mixers. ``bidirectional``
    (declared per class) says whether the kind can run without a causal mask at all: an
    encoder stack takes only such kinds (checked when the spec is validated). A mixer reads
    and writes its own state tensors, as it declared them in ``state_layout``; the cache
    knows no mixer kind.
    """

    stateful: ClassVar[bool] = True
    bidirectional: ClassVar[bool] = False
    causal: bool = True

    @abstractmethod
    def forward(self, x: torch.Tensor, positions: Positions, state: LayerState | None = None) -> torch.Tensor:
        """x (B, T, d) -> (B, T, d)."""

    @abstractmethod
    def state_layout(self, batch_size: int, max_len: int, memory_len: int = 0) -> dict[str, StateTensor]:
        """The tensors this mixer keeps between calls for ``batch_size`` sequences."""

    def residual_token(
        self, x: torch.Tensor, norm: TokenNorm, positions: Positions, state: LayerState
    ) -> torch.Tensor | None:
        """``x + self(norm(x), positions, state)`` for one cached decode token x (1, 1, d) as one
        call, where the mixer has such a step (a pre-norm block's branch: the Python of a norm's
        call and an add around the step was ~35 µs a gpt2 layer); None, the default: the block
        calls the norm, the mixer and the add itself."""
        return None


class CrossMixer(Mixer):
    """Base of ``cross_attention``-slot modules: an encoder-decoder's decoder reads the
    encoder output (``memory``), keeping its K/V per memory token (``per="memory"``)."""

    stateful: ClassVar[bool] = True

    @abstractmethod
    def forward(self, x: torch.Tensor, memory: Memory | None, state: LayerState | None = None) -> torch.Tensor:
        """x (B, T, d) -> (B, T, d): ``memory`` is the encoder output, or None in a decode
        step (the K/V written to ``state`` at prefill are read instead)."""

    @abstractmethod
    def state_layout(self, batch_size: int, max_len: int, memory_len: int = 0) -> dict[str, StateTensor]:
        """The K/V kept per encoder token for ``batch_size`` sequences."""

    def residual_token(self, x: torch.Tensor, norm: TokenNorm, state: LayerState) -> torch.Tensor | None:
        """``x + self(norm(x), None, state)`` for one cached decode token as one call
        (``TokenMixer.residual_token``); None by default."""
        return None

    def fusable_projections(self) -> dict[str, tuple[str, ...]]:
        """None: q reads the decoder, k and v the encoder's memory."""
        return {}


class FeedForward(HoldsState, Part):
    """Base of ``ffn`` modules: ``forward(x (B, T, d)) -> (B, T, d)``.

    A ``stateful`` one (RWKV's channel mix shifts tokens) declares its ``state_layout`` and
    takes ``forward(x, state, valid)``; only blocks that declare ``feeds_ffn_state`` call
    it so (checked when the model is built).
    """

    def active_param_count(self) -> int:
        """Parameters one token touches; a mixture of experts counts only its top-k."""
        return sum(p.numel() for p in self.parameters())

    def residual_token(self, x: torch.Tensor, norm: TokenNorm) -> torch.Tensor | None:
        """``x + self(norm(x))`` for one decode token x (1, 1, d) as one call
        (``TokenMixer.residual_token``); None by default."""
        return None

    def fusable_projections(self) -> dict[str, tuple[str, ...]]:
        """Linears that read the same input and may run as one product
        (``zoo.fuse_projections``): ``{fused name: (part names...)}``; none by default."""
        return {}


class Norm(Part):
    """Base of ``norm`` modules: ``forward(x) -> x`` over the last dimension (declaring it is
    optional: a norm promises no more than a plain module)."""

    def token_norm(self) -> TokenNorm | None:
        """This norm as a layer's one-token step may apply it before the layer
        (``TokenMixer.residual_token``), or None (the default): the block calls it."""
        return None


class Block(Part):
    """Base of ``block`` modules: wires the norms, the mixer(s) and the FFN with residuals.

    ``takes_cross_attention``: the block can hold a cross-attention (encoder-decoder
    decoders); ``feeds_ffn_state``: it passes its FFN the FFN's state (a stateful FFN
    needs such a block). Both are declared per class and checked when a model is built.
    """

    takes_cross_attention: ClassVar[bool] = False
    feeds_ffn_state: ClassVar[bool] = False

    def forward(
        self, x: torch.Tensor, positions: Positions, state: BlockState | None = None, memory: Memory | None = None
    ) -> torch.Tensor:
        """x (B, T, d) -> (B, T, d); ``memory`` feeds a cross-attention."""
        raise NotImplementedError


class Embedding(Part, metaclass=ABCMeta):
    """Base of ``embedding`` modules: token ids -> the first stack's input.

    ``weight`` (V, d) is the token table (a tied head shares it).
    """

    weight: torch.Tensor

    @abstractmethod
    def forward(
        self, input_ids: torch.Tensor, positions: Positions, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        """input_ids (B, T) -> (B, T, d), the positional encoding's ``embed`` applied."""


class Head(Part, metaclass=ABCMeta):
    """Base of ``head`` modules: final hidden states (B, T, d) -> the model's output.

    ``logits``: the output is (B, T, vocab) scores over tokens (a model can generate or
    fill masks with it); otherwise the hidden states come out (B, T, d). ``tied``: the
    head shares the embedding table (``tie`` re-points it after materialisation).
    """

    logits: bool = True
    tied: bool = False

    @abstractmethod
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, d) -> (B, T, vocab) logits, or the hidden states (B, T, d)."""

    def tie(self, embedding: Embedding) -> None:
        """Share ``embedding.weight`` where this head is tied; nothing otherwise."""

    def forward_param_count(self) -> int:
        """Parameters ``forward`` multiplies with each row it returns (the analysis charges
        2 FLOPs each per row); all of them by default. A head whose parameters serve another
        call (BERT's pooler: ``pool``, on the first token only) names 0."""
        return sum(p.numel() for p in self.parameters())


# The base class each registry slot's modules subclass (checked at registration).
SLOT_BASES: dict[str, type[Part]] = {
    "norm": Norm,
    "positional": Positional,
    "attention": TokenMixer,
    "cross_attention": CrossMixer,
    "ffn": FeedForward,
    "block": Block,
    "embedding": Embedding,
    "head": Head,
}
