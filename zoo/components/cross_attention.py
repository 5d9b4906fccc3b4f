"""Cross-attention: an encoder-decoder's decoder reads the encoder's output.

A part of its own (as torchtune's ``TransformerCrossAttentionLayer`` is a layer of its own),
not a mode of self-attention: queries come from the decoder, keys and values from the
encoder's memory, projected once per prompt and kept per memory token (``per="memory"``);
no causal mask, no positions, no window. Its kinds take the same options as the
self-attention kinds of the same name (``gqa``, ``mha``, ``mqa``), so a spec's
``cross_attention: {kind: mha, n_heads: 8, ...}`` reads as its ``attention`` does, and it
attends through the same ``sdpa`` (a decode step's one query over the memory on the CPU:
zoo's kernel, ``cpu_attention``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from zoo.components import cpu_attention
from zoo.components.attention_options import AttentionOptions, MHAOptions, MQAOptions
from zoo.components.linear import Linear, step_tensors
from zoo.components.sdpa_kernels import in_dtype, sdpa
from zoo.errors import GenerationError
from zoo.specs.hookspecs import hookimpl
from zoo.specs.interfaces import BuildContext, CrossMixer, TokenNorm
from zoo.specs.state import LayerState, Memory, StateTensor


class CrossAttention(CrossMixer):
    """Grouped-query attention of the decoder's tokens over the encoder's memory."""

    def __init__(self, options: AttentionOptions, ctx: BuildContext) -> None:
        super().__init__()
        self.n_heads = options.n_heads
        self.n_kv_heads = options.kv_heads
        self.head_dim = int(options.head_dim or ctx.d_model // options.n_heads)
        self.scale = options.scale if options.scale is not None else self.head_dim**-0.5
        d, hd = ctx.d_model, self.head_dim
        out_bias = options.bias if options.out_bias is None else options.out_bias
        self.output_gate = options.output_gate
        self.q_proj = Linear(d, self.n_heads * hd * (2 if options.output_gate else 1), bias=options.bias)
        self.k_proj = Linear(d, self.n_kv_heads * hd, bias=options.bias)
        self.v_proj = Linear(d, self.n_kv_heads * hd, bias=options.bias)
        self.o_proj = Linear(self.n_heads * hd, d, bias=out_bias)
        self.q_norm = ctx.make_norm(hd) if options.qk_norm else None
        self.k_norm = ctx.make_norm(hd) if options.qk_norm else None

    def state_layout(self, batch_size: int, max_len: int, memory_len: int = 0) -> dict[str, StateTensor]:
        """K and V per memory token, written once per prompt."""
        shape = (batch_size, self.n_kv_heads, memory_len, self.head_dim)
        return {"k": StateTensor(shape, per="memory"), "v": StateTensor(shape, per="memory")}

    def memory_param_count(self) -> int:
        """k and v project the memory once per prompt (weights and biases)."""
        return sum(p.numel() for proj in (self.k_proj, self.v_proj) for p in proj.parameters())

    def score_flops(self, n_new: int, context_len: int) -> int:
        """q·kᵀ and probs·v (2 FLOPs each per multiply-add): every query sees every memory token."""
        return 4 * self.n_heads * self.head_dim * n_new * context_len

    def forward(self, x: torch.Tensor, memory: Memory | None, state: LayerState | None = None) -> torch.Tensor:
        """K/V from ``memory`` (written to the state when there is one), or, in decode
        steps, from the state written at prefill."""
        B, T, _ = x.shape
        if memory is None and state is not None and T == 1 and (out := self._token_step(x, state)) is not None:
            return out  # (1, 1, d): an eager step's cross-attention in one C++ call
        q, gate = self._query(x)  # (B, T, H, D), (B, T, H*D) | None
        if self.q_norm is not None:
            q = self.q_norm(q)
        q = q.transpose(1, 2)  # (B, H, T, D)
        if memory is not None:
            k, v = self._memory_kv(memory.hidden)  # (B, Hkv, S, D)
            valid = memory.valid  # (B, S) | None
            if state is not None:
                S = k.shape[2]
                state.tensors["k"][:, :, :S].copy_(k)
                state.tensors["v"][:, :, :S].copy_(v)
        elif state is not None:
            k, v, valid = state.tensors["k"], state.tensors["v"], state.memory_valid  # (B, Hkv, M, D)
        else:
            raise GenerationError(
                "memory: cross-attention needs the encoder output (model.encode(...)) or a cache holding it"
            )
        mask = None if valid is None else valid[:, None, None, :]  # (B, 1, 1, S)
        out = sdpa(
            q,
            in_dtype(k, q.dtype),
            in_dtype(v, q.dtype),
            attn_mask=mask,
            scale=self.scale,
            enable_gqa=self.n_kv_heads != self.n_heads,
        )  # (B, H, T, D)
        out = out.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim)  # (B, T, H*D)
        return self.o_proj(out if gate is None else out * torch.sigmoid(gate))

    def residual_token(self, x: torch.Tensor, norm: TokenNorm, state: LayerState) -> torch.Tensor | None:
        """x + this cross-attention of norm(x) for one decode token in one C++ call (``_token_step``)."""
        return self._token_step(x, state, norm) if x.shape[1] == 1 and x.is_cpu else None

    def _token_step(self, x: torch.Tensor, state: LayerState, norm: TokenNorm | None = None) -> torch.Tensor | None:
        """A decode step's one token (1, 1, d) -> (1, 1, d) through ``cpu_attention.cross_attention_token``
        (query product, attention over the memory written at prefill, output product in one C++
        call) where that computes this layer: projections whose layers give their tensors
        (``RowStackable.step_tensors``), no q norm or output gate; else None. With ``norm`` (a
        pre-norm block's): x + the cross-attention of norm(x). The layers are read from
        nn.Module's dicts (``Attention._token_step``)."""
        if self.output_gate or self.q_norm is not None:
            return None
        modules = self._modules
        projections = step_tensors(modules["q_proj"], modules["o_proj"])  # None: a product of the layer's own
        if projections is None:
            return None
        q_tensors, o_tensors = projections
        valid = state.memory_valid  # (1, M) | None
        memory = state.tensors["k"], state.tensors["v"], None if valid is None else valid[:, None, None, :]
        return cpu_attention.cross_attention_token(x, q_tensors, memory, self.scale, o_tensors, norm)

    def _query(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Queries (B, T, H, D) and, with ``output_gate``, the gate (B, T, H*D): q_proj gives
        each head [query | gate], the checkpoint's layout."""
        B, T, _ = x.shape
        q = self.q_proj(x)  # (B, T, H*D or 2*H*D)
        if not self.output_gate:
            return q.view(B, T, self.n_heads, self.head_dim), None
        q, gate = q.view(B, T, self.n_heads, 2 * self.head_dim).chunk(2, dim=-1)  # (B, T, H, D) each
        return q.reshape(B, T, self.n_heads, self.head_dim), gate.reshape(B, T, self.n_heads * self.head_dim)

    def _memory_kv(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values (B, Hkv, S, D) of the encoder's hidden states (B, S, d)."""
        B, S, _ = hidden.shape
        k = self.k_proj(hidden).view(B, S, self.n_kv_heads, self.head_dim)  # (B, S, Hkv, D)
        if self.k_norm is not None:
            k = self.k_norm(k)
        v = self.v_proj(hidden).view(B, S, self.n_kv_heads, self.head_dim)  # (B, S, Hkv, D)
        return k.transpose(1, 2), v.transpose(1, 2)

    def extra_repr(self) -> str:
        return f"heads={self.n_heads}, kv_heads={self.n_kv_heads}, head_dim={self.head_dim}"


def build_cross_attention(options: AttentionOptions, ctx: BuildContext) -> CrossAttention:
    """Attention of the decoder's tokens over the encoder's output."""
    return CrossAttention(options, ctx)


@hookimpl
def zoo_register_components(register: Callable[..., None]) -> None:
    register("cross_attention", "gqa", build_cross_attention, options=AttentionOptions, module=CrossAttention)
    register("cross_attention", "mha", build_cross_attention, options=MHAOptions, module=CrossAttention)
    register("cross_attention", "mqa", build_cross_attention, options=MQAOptions, module=CrossAttention)
