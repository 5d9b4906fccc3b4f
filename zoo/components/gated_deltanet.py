"""Gated DeltaNet as in Qwen3-Next: a token mixer whose state is fixed per sequence.

Per layer: one projection gives q, k, v and the output gate z (grouped per key head, the
checkpoint's layout), another the write strength b and the decay input a; q, k, v go
through a short causal convolution (SiLU), q and k are L2-normalised, and the gated delta
rule (``delta_rule.py``) mixes the tokens; each value head's output is RMS-normalised and
gated by SiLU(z) before the output projection. Parameter names are transformers'
(``in_proj_qkvz``, ``in_proj_ba``, ``conv1d``, ``dt_bias``, ``A_log``, ``norm``,
``out_proj``), so checkpoints map unchanged.

State per sequence: the convolution window (B, 2 d_k H_k + d_v H_v, kernel) and the
recurrent state (B, H_v, d_k, d_v); neither grows with the context.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from pydantic import Field, PositiveInt, model_validator
from torch import nn

from zoo.components import cpu_conv, cpu_prefill, cpu_steps
from zoo.components.causal_conv import causal_conv
from zoo.components.cuda_kernels import causal_conv1d, fla
from zoo.components.delta_rule import chunk_gated_delta_rule, gated_delta_step, l2_normalize
from zoo.components.kernels import Kernel, KernelChoice
from zoo.components.linear import Linear, step_tensors
from zoo.components.sequence_state import SequenceStateMixer
from zoo.specs.hookspecs import hookimpl
from zoo.specs.interfaces import BuildContext, TokenNorm
from zoo.specs.options import Options

FLA = Kernel("fla", "cuda", lambda: fla.load() and causal_conv1d.load(), autograd=True)


class GatedDeltaNetOptions(Options):
    tiny: ClassVar[Mapping[str, Any]] = {
        "n_k_heads": 2,
        "n_v_heads": 4,
        "head_k_dim": 16,
        "head_v_dim": 16,
        "chunk_size": 4,
    }

    n_k_heads: PositiveInt = Field(description="query/key heads (linear_num_key_heads)")
    n_v_heads: PositiveInt = Field(description="value heads, each with its own state (linear_num_value_heads)")
    head_k_dim: PositiveInt = Field(128, description="query/key head width")
    head_v_dim: PositiveInt = Field(128, description="value head width")
    conv_kernel: PositiveInt = Field(4, description="width of the causal convolution over q, k, v")
    eps: float = Field(1e-6, gt=0, description="epsilon of the gated RMS norm on each head's output")
    chunk_size: PositiveInt = Field(64, description="tokens per chunk of the prefill scan (numerics only)")

    @property
    def n_heads(self) -> int:
        """Value heads: what positional encodings read (the mixer itself takes no positions)."""
        return self.n_v_heads

    @property
    def head_dim(self) -> int:
        return self.head_k_dim

    @model_validator(mode="after")
    def _check_heads(self) -> GatedDeltaNetOptions:
        if self.n_v_heads % self.n_k_heads:
            raise ValueError(
                f"n_v_heads: {self.n_v_heads} is not a multiple of n_k_heads={self.n_k_heads}; "
                "allowed: a multiple of n_k_heads"
            )
        return self


class GatedRMSNorm(nn.Module):
    """RMS norm of each head's output, then times SiLU(gate) (norm before gate, Qwen3-Next)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if not self.weight.is_meta:
            nn.init.ones_(self.weight)

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        normed = F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps)  # (..., dim) float32
        return (self.weight * normed.to(x.dtype) * F.silu(gate.float())).to(x.dtype)


class GatedDeltaNet(KernelChoice):
    """The Gated DeltaNet mixer; ``mix`` is its maths over explicit state tensors.

    Implementations (``zoo.components.kernels``): ``reference`` (``delta_rule``: the chunked
    rule and one-token step in PyTorch); on the CPU ``cpu-scan`` (``cpu_conv``'s convolution and
    ``cpu_prefill.delta_rows``: a multi-token call from there to out_proj's input, q and k's
    norms, the gates, the delta rule and the gated norm, as one C++ op) and ``cpu-step`` (``cpu_steps``: a
    decode step from the projections' outputs to out_proj's input as one C++ call), inference
    only; on CUDA ``fla`` (``cuda_kernels.fla``: fla's ``chunk_gated_delta_rule`` and
    ``fused_recurrent_gated_delta_rule``, causal-conv1d's convolution, as transformers' fast
    path; the chunked rule has a backward)."""

    kernel_family = "gated_deltanet"
    kernels = (
        cpu_prefill.KERNEL,
        cpu_steps.KERNEL,
        FLA,
    )

    def __init__(
        self,
        d_model: int,
        n_k_heads: int,
        n_v_heads: int,
        head_k_dim: int,
        head_v_dim: int,
        conv_kernel: int = 4,
        eps: float = 1e-6,
        chunk_size: int = 64,
    ) -> None:
        super().__init__()
        if n_v_heads % n_k_heads:
            raise ValueError(f"n_v_heads={n_v_heads} must be a multiple of n_k_heads={n_k_heads}")
        self.n_k_heads, self.n_v_heads = n_k_heads, n_v_heads
        self.head_k_dim, self.head_v_dim = head_k_dim, head_v_dim
        self.key_dim, self.value_dim = n_k_heads * head_k_dim, n_v_heads * head_v_dim
        self.conv_dim = 2 * self.key_dim + self.value_dim
        self.conv_kernel = conv_kernel
        self.chunk_size = chunk_size
        self.in_proj_qkvz = Linear(d_model, 2 * self.key_dim + 2 * self.value_dim, bias=False)
        self.in_proj_ba = Linear(d_model, 2 * n_v_heads, bias=False)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, conv_kernel, groups=self.conv_dim, bias=False)
        self.dt_bias = nn.Parameter(torch.empty(n_v_heads))
        self.A_log = nn.Parameter(torch.empty(n_v_heads))
        self.norm = GatedRMSNorm(head_v_dim, eps)
        self.out_proj = Linear(self.value_dim, d_model, bias=False)
        self.choose_kernel()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """For training from scratch, as the GDN authors' code (fla's ``GatedDeltaNet`` layer)
        does: decay rates A uniform in (0, 16] (log stored) and dt bias = softplus^-1 of a step
        dt log-uniform in [0.001, 0.1] (floored at 1e-4), so a token's decay exp(-A dt) starts
        near 1 and the state keeps what it wrote. (transformers' dt bias of 1, a checkpoint
        loader's placeholder, starts every head at exp(-1.3 A) <= 0.27 per token: the state
        forgets a key within a few tokens and recall cannot be learned.)"""
        if self.A_log.is_meta:
            return
        with torch.no_grad():
            self.A_log.copy_((16 * (1 - torch.rand(self.A_log.shape))).log())  # (0, 16]: log(0) never drawn
            dt = torch.exp(torch.rand(self.dt_bias.shape) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))
            dt = dt.clamp(min=1e-4)
            self.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))

    def state_shapes(self, batch_size: int) -> dict[str, tuple[int, ...]]:
        """Shapes of the per-sequence state: the convolution window and the recurrent state."""
        return {
            "conv": (batch_size, self.conv_dim, self.conv_kernel),
            "recurrent": (batch_size, self.n_v_heads, self.head_k_dim, self.head_v_dim),
        }

    def _split(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Projections in the checkpoint's grouped layout -> qkv (B, T, conv_dim), z, b, a."""
        B, T, _ = x.shape
        per_group = self.n_v_heads // self.n_k_heads
        qkvz = self.in_proj_qkvz(x).view(B, T, self.n_k_heads, -1)  # (B, T, H_k, 2 d_k + 2 r d_v)
        sizes = [self.head_k_dim, self.head_k_dim, per_group * self.head_v_dim, per_group * self.head_v_dim]
        q, k, v, z = torch.split(qkvz, sizes, dim=-1)
        b, a = torch.split(self.in_proj_ba(x).view(B, T, self.n_k_heads, 2 * per_group), per_group, dim=-1)
        qkv = torch.cat([q.reshape(B, T, -1), k.reshape(B, T, -1), v.reshape(B, T, -1)], dim=-1)  # (B, T, conv_dim)
        # Contiguous copies: the per-head slices are strided views, and torch's CPU kernels for
        # sigmoid / SiLU / softplus fall off their vectorised path on such views (tens of times
        # slower than a copy and a contiguous call).
        z = z.reshape(B, T, self.n_v_heads, self.head_v_dim).contiguous()  # (B, T, H_v, d_v)
        return qkv, z, b.reshape(B, T, self.n_v_heads).contiguous(), a.reshape(B, T, self.n_v_heads).contiguous()

    def mix(
        self,
        x: torch.Tensor,
        state: dict[str, torch.Tensor] | None = None,
        token_valid: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x (B, T, d) -> (B, T, d). ``state`` tensors are read and updated in place; tokens
        with ``token_valid`` (B, T) False (left padding) leave the state untouched."""
        B, T, _ = x.shape
        if T == 1 and state is not None and cpu_steps.conv_step_ready(self, x, state, "recurrent", token_valid):
            params = (self.dt_bias, self.A_log, self.norm.weight)
            if B == 1 and (out := self._token_step(x, params, state)) is not None:
                return out  # (1, 1, d): the projections and the step in one C++ call
            qkvz, ba = self.in_proj_qkvz(x), self.in_proj_ba(x)  # (B, 1, .): the grouped layout, split in C++
            out = cpu_steps.gdn_step(qkvz, ba, self.conv1d, params, state, self.n_k_heads, self.norm.eps)
            return self.out_proj(out.unsqueeze(1))  # (B, 1, d)
        if token_valid is not None:
            x = x * token_valid[..., None].to(x.dtype)
        qkv, z, b, a = self._split(x)
        library = self.uses(FLA, x.device, stateful=state is not None)
        window = None if state is None else state["conv"]
        if library and causal_conv1d.fits(self.conv_kernel):
            qkv = causal_conv1d.causal_conv(qkv.transpose(1, 2), self.conv1d.weight[:, 0], None, window, silu=True)
            qkv = qkv.transpose(1, 2)  # (B, T, C)
        elif cpu_prefill.scan_ready(self, x):  # the convolution, then the rule and its glue, in C++
            qkv = cpu_conv.causal_conv_rows(qkv, self.conv1d.weight, None, window)  # (B, T, C) SiLU'd
            params = (self.A_log, self.dt_bias, self.norm.weight)
            recurrent = None if state is None else state["recurrent"]
            out = cpu_prefill.delta_rows(qkv, b, a, z, params, token_valid, recurrent, self.n_k_heads, self.norm.eps)
            return self.out_proj(out.reshape(B, T, self.value_dim))  # (B, T, d)
        else:
            qkv = causal_conv(qkv.transpose(1, 2), self.conv1d.weight, None, window).transpose(1, 2)
        q, k, v = torch.split(qkv.float(), [self.key_dim, self.key_dim, self.value_dim], dim=-1)
        q = l2_normalize(q.reshape(B, T, self.n_k_heads, -1)) * self.head_k_dim**-0.5  # (B, T, H_k, d_k)
        k = l2_normalize(k.reshape(B, T, self.n_k_heads, -1))  # (B, T, H_k, d_k)
        v = v.reshape(B, T, self.n_v_heads, self.head_v_dim)  # (B, T, H_v, d_v)
        beta = b.float().sigmoid()  # (B, T, H_v)
        g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias.float())  # (B, T, H_v), log decay
        if token_valid is not None:
            beta, g = beta * token_valid[..., None], g * token_valid[..., None]
        recurrent = None if state is None else state["recurrent"]
        if library:  # q, k, v and beta in the model's dtype, g in float32, as fla's own tests
            q, k = (t.repeat_interleave(self.n_v_heads // self.n_k_heads, dim=2) for t in (q, k))  # (B, T, H_v, d_k)
            q, k, v, beta = (t.to(x.dtype) for t in (q, k, v, beta))
            out = fla.gated_delta_rule(q, k, v, g, beta, recurrent)  # (B, T, H_v, d_v)
        else:
            out = self._scan(q, k, v, g, beta, recurrent)  # (B, T, H_v, d_v)
        out = self.norm(out.to(x.dtype), z)  # (B, T, H_v, d_v)
        return self.out_proj(out.reshape(B, T, self.value_dim))

    def token_mix(
        self, x: torch.Tensor, norm: TokenNorm, state: dict[str, torch.Tensor], token_valid: torch.Tensor | None
    ) -> torch.Tensor | None:
        """x + the mix of norm(x) for one cached token (1, 1, d) in one C++ call (``_token_step``;
        ``SequenceStateMixer.residual_token``), or None."""
        if x.shape[0] != 1 or x.shape[1] != 1:
            return None
        if not cpu_steps.conv_step_ready(self, x, state, "recurrent", token_valid):
            return None
        return self._token_step(x, (self.dt_bias, self.A_log, self.norm.weight), state, norm)

    def _token_step(
        self,
        x: torch.Tensor,
        params: tuple[torch.Tensor, ...],
        state: dict[str, torch.Tensor],
        norm: TokenNorm | None = None,
    ) -> torch.Tensor | None:
        """One token (1, 1, d) through ``cpu_steps.gdn_token`` (both input projections, the step
        and out_proj in one C++ call; with ``norm``: x + the mix of norm(x)) where the
        projections' layers give their tensors (``RowStackable.step_tensors``), else None. The
        layers are read from nn.Module's dicts (``Attention._token_step``)."""
        modules = self._modules
        projections = step_tensors(modules["in_proj_qkvz"], modules["in_proj_ba"], modules["out_proj"])
        if projections is None:
            return None  # a product of the layer's own
        qkvz, ba, out_proj = projections
        return cpu_steps.gdn_token(
            x, (qkvz, ba), modules["conv1d"], params, state, self.n_k_heads, self.norm.eps, out_proj, norm
        )  # (1, 1, d) or None

    def _scan(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor,
        beta: torch.Tensor,
        recurrent: torch.Tensor | None,
    ) -> torch.Tensor:
        """The reference delta rule over q, k (B, T, H_k, d_k), v (B, T, H, d_v), g, beta (B, T, H):
        a one-token call with a state is one step, a longer one the chunked form."""
        B, T, H, _ = v.shape
        initial = recurrent.float() if recurrent is not None else q.new_zeros(B, H, self.head_k_dim, self.head_v_dim)
        q, k = (t.repeat_interleave(H // self.n_k_heads, dim=2) for t in (q, k))  # (B, T, H, d_k)
        if recurrent is not None and q.shape[1] == 1:
            out, new = gated_delta_step(q[:, 0], k[:, 0], v[:, 0], g[:, 0], beta[:, 0], recurrent.float())
            recurrent.copy_(new)
            return out[:, None]  # (B, 1, H, d_v)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, H, T, d)
        out, new = chunk_gated_delta_rule(q, k, v, g.transpose(1, 2), beta.transpose(1, 2), initial, self.chunk_size)
        if recurrent is not None:
            recurrent.copy_(new)
        return out.transpose(1, 2)  # (B, T, H, d_v)


class GatedDeltaNetMixer(GatedDeltaNet, SequenceStateMixer):
    """The registered ``gated_deltanet`` attention kind: ``mix`` over the layer's state."""

    def matmul_param_count(self) -> int:
        """The input and output projections: the convolution taps, dt bias, A_log and the
        gated norm's scale are elementwise, in ``score_flops``."""
        projections = (self.in_proj_qkvz, self.in_proj_ba, self.out_proj)
        return sum(p.numel() for m in projections for p in m.parameters())

    def score_flops(self, n_new: int, context_len: int) -> int:
        """Per token: the state update per head (decay, read k^T S, write, read q^T S) and the
        depthwise convolution (2 per tap per channel): no context term."""
        per_head = 7 * self.head_k_dim * self.head_v_dim + 2 * self.head_v_dim
        return n_new * (self.n_v_heads * per_head + 2 * self.conv_dim * self.conv_kernel)

    def executed_score_flops(self, n_new: int, context_len: int) -> int:
        """A prefill runs the chunked delta rule (``chunk_gated_delta_rule``) over chunks of
        C tokens (the last one padded; a shorter prompt is one chunk of its length): per chunk
        and head K_beta Kᵀ and Q Kᵀ (2 C² d_k each), intra·v_new (2 C² d_v), the three state
        products (2 C d_k d_v each) and the two unit lower-triangular solves (C (C - 1) d_v +
        C (C - 1) d_k: C (C - 1) / 2 multiply-adds per right-hand column), plus the elementwise
        part. Decode: ``score_flops``."""
        if n_new == 1:
            return self.score_flops(1, context_len)
        C, K, V = min(self.chunk_size, n_new), self.head_k_dim, self.head_v_dim
        padded = -(-n_new // C) * C
        per_token = C * (4 * K + 2 * V) + (C - 1) * (K + V) + 6 * K * V
        return padded * self.n_v_heads * per_token + self.score_flops(n_new, context_len)


def build_gated_deltanet(options: GatedDeltaNetOptions, ctx: BuildContext) -> nn.Module:
    """Gated DeltaNet (Qwen3-Next's linear-attention layers)."""
    o = options
    mixer = GatedDeltaNetMixer(
        ctx.d_model, o.n_k_heads, o.n_v_heads, o.head_k_dim, o.head_v_dim, o.conv_kernel, o.eps, o.chunk_size
    )
    mixer.state_dtype = ctx.state_dtype
    return mixer


@hookimpl
def zoo_register_components(register: Callable[..., None]) -> None:
    register(
        "attention", "gated_deltanet", build_gated_deltanet, module=GatedDeltaNetMixer, options=GatedDeltaNetOptions
    )
