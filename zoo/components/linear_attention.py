"""Linear attention (Katharopoulos et al. 2020, arXiv 2006.16236): the `attention` kind ``linear``.

Softmax(q·kᵀ) is replaced by a kernel φ(q)·φ(k)ᵀ with φ = elu + 1 (positive), so causal
attention becomes a running sum: S_t = Σ_{s≤t} φ(k_s) v_sᵀ (D_k × D_v per head) and
z_t = Σ_{s≤t} φ(k_s), and y_t = φ(q_t)·S_t / (φ(q_t)·z_t + eps). The state is fixed per
sequence whatever the context (``per="sequence"``, float32 unless the spec's ``state_dtype`` is
``cache``): ``kv`` (B, H, D_k, D_v) and
``k_sum`` (B, H, D_k).

A prefill is chunk-wise: inside a chunk of ``CHUNK`` tokens the causal part is a masked
(L × L) product, the part before it is φ(q)·S of the state entering the chunk; one Python
iteration per chunk, not per token. RoPE, when the layer's positional encoding is RoPE,
rotates q and k before φ.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from pydantic import Field

from zoo.components import cpu_steps
from zoo.components.cuda_kernels import fla
from zoo.components.feature_state import EPS, FeatureStateMixer, FeatureStateOptions, feature_map, state_write
from zoo.components.kernels import Kernel, KernelChoice
from zoo.specs.hookspecs import hookimpl
from zoo.specs.interfaces import BuildContext, Positions, TokenNorm
from zoo.specs.state import LayerState, StateTensor

CHUNK = 64
STATE = ("kv", "k_sum")


FLA = Kernel("fla", "cuda", fla.load, autograd=True)


class LinearAttentionOptions(FeatureStateOptions):
    bias: bool = Field(False, description="bias on the q, k, v and output projections")


class LinearAttention(FeatureStateMixer, KernelChoice):
    """Causal linear attention with a running key-value state per head.

    Implementations (``zoo.components.kernels``): ``reference`` (the chunked form below, a
    decode step included); on the CPU ``cpu-step`` (``cpu_steps``: a decode step's state
    update and read as one C++ call; inference only); on CUDA ``fla`` (``cuda_kernels.fla``:
    fla's ``chunk_linear_attn`` for φ(q)·S, this module's normaliser; it has a backward)."""

    kernel_family = "linear"
    kernels = (cpu_steps.KERNEL, FLA)

    def __init__(self, options: LinearAttentionOptions, ctx: BuildContext) -> None:
        super().__init__(options, ctx, bias=options.bias)
        self.choose_kernel()

    def state_layout(self, batch_size: int, max_len: int, memory_len: int = 0) -> dict[str, StateTensor]:
        H, D = self.n_heads, self.head_dim
        return {
            "kv": StateTensor((batch_size, H, D, D), self.state_dtype, per="sequence"),
            "k_sum": StateTensor((batch_size, H, D), self.state_dtype, per="sequence"),
        }

    def score_flops(self, n_new: int, context_len: int) -> int:
        """Per token and head: the state update φ(k)vᵀ and the read φ(q)·S (2·D² each),
        the normaliser's update and read (2·D each); no term grows with the context."""
        return n_new * self.n_heads * (4 * self.head_dim * self.head_dim + 4 * self.head_dim)

    def forward(
        self, x: torch.Tensor, positions: Positions | None = None, state: LayerState | None = None
    ) -> torch.Tensor:
        """x (B, T, d) -> (B, T, d); with a state, ``kv`` and ``k_sum`` are read and updated in
        place. Tokens marked False in ``token_valid`` (left padding) add nothing to them."""
        T = x.shape[1]
        kv_state = None if state is None else self._step_state(x, state)
        if kv_state is not None:
            out = self._token_step(x, positions, kv_state) if x.shape[0] == 1 else None
            if out is not None:
                return out  # (1, 1, d): the q|k|v product, the step and o_proj in one C++ call
            q, k, v = self.project(x, positions)  # (B, H, 1, D) each
            return self.output(cpu_steps.linear_step(q, k, v, *kv_state), x.dtype)  # state updated in place
        q, k, v = self.project(x, positions)  # (B, H, T, D) each
        q, k, v = feature_map(q.float()), feature_map(k.float()), v.float()
        valid = state.token_valid if state is not None else (None if positions is None else positions.key_valid)
        if valid is not None:
            k = k * valid[:, None, :, None].to(k.dtype)  # (B, H, T, D): padding keys add nothing
        kv, k_sum = self.load_state(state, STATE, x.shape[0], x.device)
        if self.uses(FLA, x.device, stateful=state is not None):
            y, kv, k_sum = fla.linear_attention(q, k, v, kv, k_sum, x.dtype)  # (B, H, T, D)
            self.store_state(state, STATE, kv, k_sum)
            return self.output(y, x.dtype)
        outputs = []
        for start in range(0, T, CHUNK):
            stop = min(start + CHUNK, T)
            y, kv, k_sum = _chunk(q[:, :, start:stop], k[:, :, start:stop], v[:, :, start:stop], kv, k_sum)
            outputs.append(y)
        self.store_state(state, STATE, kv, k_sum)
        y = outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=2)  # (B, H, T, D)
        return self.output(y, x.dtype)

    def residual_token(
        self, x: torch.Tensor, norm: TokenNorm, positions: Positions, state: LayerState
    ) -> torch.Tensor | None:
        """x + this attention of norm(x) for one cached token (1, 1, d) in one C++ call (``_token_step``)."""
        kv_state = self._step_state(x, state) if x.shape[0] == 1 else None
        return None if kv_state is None else self._token_step(x, positions, kv_state, norm)

    def _step_state(self, x: torch.Tensor, state: LayerState) -> list[torch.Tensor] | None:
        """The layer's kv and k_sum where the fused one-token step runs this call (one token, a
        state it takes: ``cpu_steps.step_ready``), else None."""
        if x.shape[1] != 1:
            return None
        kv_state = [state.tensors[name] for name in STATE]
        return kv_state if cpu_steps.step_ready(self, x, kv_state, state.token_valid) else None

    def _token_step(
        self,
        x: torch.Tensor,
        positions: Positions | None,
        kv_state: list[torch.Tensor],
        norm: TokenNorm | None = None,
    ) -> torch.Tensor | None:
        """One token (1, 1, d) through ``cpu_steps.linear_token`` (with ``norm``: x + the
        attention of norm(x)) where the layers take it (``token_projections``), else None: the
        module's own calls."""
        projections = self.token_projections(positions)
        if projections is None:
            return None
        kv, k_sum = kv_state
        return cpu_steps.linear_token(x, projections[0], kv, k_sum, projections[1], norm)  # (1, 1, d) or None

    def extra_repr(self) -> str:
        return f"heads={self.n_heads}, head_dim={self.head_dim}, feature_map=elu+1"


def _chunk(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv: torch.Tensor, k_sum: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One chunk: φ(q), φ(k), v (B, H, L, D) against the state entering it; returns the
    outputs (B, H, L, D) and the state after it."""
    L = q.shape[2]
    scores = torch.matmul(q, k.transpose(-1, -2))  # (B, H, L, L)
    if L > 1:
        causal = torch.ones(L, L, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~causal, 0.0)
    numerator = torch.matmul(scores, v) + torch.matmul(q, kv)  # (B, H, L, D)
    denominator = scores.sum(-1) + torch.matmul(q, k_sum[..., None]).squeeze(-1)  # (B, H, L)
    y = numerator / (denominator[..., None] + EPS)
    kv, k_sum = state_write(k, v, kv, k_sum)  # (B, H, D, D), (B, H, D)
    return y, kv, k_sum


def build_linear_attention(options: LinearAttentionOptions, ctx: BuildContext) -> LinearAttention:
    """Causal linear attention (elu + 1 feature map, running key-value state)."""
    return LinearAttention(options, ctx)


@hookimpl
def zoo_register_components(register: Callable[..., None]) -> None:
    register("attention", "linear", build_linear_attention, options=LinearAttentionOptions, module=LinearAttention)
