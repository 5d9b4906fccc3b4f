"""The Mamba2 mixer: multi-head selective state space with grouped B/C (arXiv 2405.21060).

One projection gives the gate z, the convolved channels (x, B, C) and the per-head step dt;
x, B, C go through a short causal convolution (SiLU); the SSD scan (``ssd.py``) mixes the
tokens with a scalar decay per head; the output times SiLU(z) is RMS-normalised per group
and projected back. Parameter names are transformers' (``in_proj``, ``conv1d``,
``dt_bias``, ``A_log``, ``D``, ``norm``, ``out_proj``), so checkpoints map unchanged.

State per sequence: the convolution window (B, d_inner + 2 G N, kernel), in the cache's
dtype, and the SSM state (B, H, P, N), float32 unless the spec's ``state_dtype`` is
``cache`` (as transformers keeps them); neither grows with the context.
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
from zoo.components.cuda_kernels import causal_conv1d, mamba_ssm
from zoo.components.kernels import Kernel, KernelChoice
from zoo.components.linear import Linear, step_tensors
from zoo.components.sequence_state import SequenceStateMixer
from zoo.components.ssd import chunk_scan, ssd_step
from zoo.specs.hookspecs import hookimpl
from zoo.specs.interfaces import BuildContext, TokenNorm
from zoo.specs.options import Options

MAMBA_SSM = Kernel("mamba-ssm", "cuda", lambda: mamba_ssm.load_mamba2() and causal_conv1d.load(), autograd=True)


class Mamba2Options(Options):
    tiny: ClassVar[Mapping[str, Any]] = {"n_heads": 4, "head_dim": 16, "n_groups": 1, "state_size": 16, "chunk_size": 4}

    n_heads: PositiveInt = Field(description="SSM heads; the inner width is n_heads * head_dim")
    head_dim: PositiveInt = Field(64, description="channels per head (P)")
    n_groups: PositiveInt = Field(1, description="groups sharing one B and C (like key/value heads)")
    state_size: PositiveInt = Field(128, description="state per channel (N)")
    conv_kernel: PositiveInt = Field(4, description="width of the causal convolution over x, B, C")
    chunk_size: PositiveInt = Field(256, description="tokens per chunk of the prefill scan (numerics only)")
    bias: bool = Field(False, description="biases on the input and output projections")
    conv_bias: bool = Field(True, description="bias on the convolution")
    eps: float = Field(1e-5, gt=0, description="epsilon of the gated RMS norm")
    dt_min: float = Field(0.0, ge=0, description="lower clamp of the step dt")
    dt_max: float | None = Field(None, gt=0, description="upper clamp of the step dt; none: unbounded")

    @model_validator(mode="after")
    def _check_groups(self) -> Mamba2Options:
        if self.n_heads % self.n_groups:
            raise ValueError(f"n_groups: n_heads={self.n_heads} is not divisible by n_groups={self.n_groups}")
        return self


class GroupedGatedRMSNorm(nn.Module):
    """x * SiLU(gate), then RMS-normalised over each of ``groups`` equal slices (gate before norm)."""

    def __init__(self, dim: int, groups: int, eps: float) -> None:
        super().__init__()
        self.groups, self.eps = groups, eps
        self.weight = nn.Parameter(torch.empty(dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if not self.weight.is_meta:
            nn.init.ones_(self.weight)

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        h = x.float() * F.silu(gate.float())  # (..., dim)
        grouped = h.view(*h.shape[:-1], self.groups, -1)  # (..., G, dim / G)
        h = F.rms_norm(grouped, (grouped.shape[-1],), eps=self.eps).view(h.shape)
        return self.weight * h.to(x.dtype)


class Mamba2Mixer(KernelChoice):
    """The Mamba2 mixer; ``mix`` is its maths over explicit state tensors.

    Implementations (``zoo.components.kernels``): ``reference`` (the chunked SSD scan and the
    one-token step of ``ssd.py`` in PyTorch); on the CPU ``cpu-scan`` (``cpu_conv``'s convolution and
    ``cpu_prefill.ssd_rows``: a multi-token call from there to out_proj's input, dt's softplus, the
    SSD recurrence, the D skip and the gated norm, as one C++ op) and ``cpu-step`` (``cpu_steps``: a
    decode step from in_proj's output to out_proj's input as one C++ call), inference only; on
    CUDA ``mamba-ssm`` (``cuda_kernels.mamba_ssm``: mamba-ssm's ``mamba_chunk_scan_combined``
    and ``selective_state_update``, causal-conv1d's convolution; the chunked scan has a
    backward)."""

    kernel_family = "mamba2"
    kernels = (
        cpu_prefill.KERNEL,
        cpu_steps.KERNEL,
        MAMBA_SSM,
    )

    def __init__(
        self,
        d_model: int,
        d_inner: int,
        n_heads: int,
        n_groups: int,
        state_size: int,
        conv_kernel: int = 4,
        chunk_size: int = 256,
        bias: bool = False,
        conv_bias: bool = True,
        eps: float = 1e-5,
        dt_limit: tuple[float, float] = (0.0, math.inf),
    ) -> None:
        super().__init__()
        if d_inner % n_heads or n_heads % n_groups:
            raise ValueError(f"d_inner={d_inner} must split into n_heads={n_heads}, in n_groups={n_groups}")
        self.d_inner, self.n_heads, self.n_groups, self.state_size = d_inner, n_heads, n_groups, state_size
        self.head_dim = d_inner // n_heads
        self.conv_dim = d_inner + 2 * n_groups * state_size
        self.conv_kernel, self.chunk_size, self.dt_limit = conv_kernel, chunk_size, dt_limit
        self.in_proj = Linear(d_model, d_inner + self.conv_dim + n_heads, bias=bias)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, conv_kernel, groups=self.conv_dim, bias=conv_bias)
        self.dt_bias = nn.Parameter(torch.empty(n_heads))
        self.A_log = nn.Parameter(torch.empty(n_heads))
        self.D = nn.Parameter(torch.empty(n_heads))
        self.norm = GroupedGatedRMSNorm(d_inner, n_groups, eps)
        self.out_proj = Linear(d_inner, d_model, bias=bias)
        self.choose_kernel()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """A = 1..H (log stored), D = 1, dt bias = softplus^-1 of dt in [0.001, 0.1] log-uniform."""
        if self.A_log.is_meta:
            return
        with torch.no_grad():
            self.A_log.copy_(torch.arange(1, self.n_heads + 1, dtype=torch.float32).log())
            self.D.fill_(1.0)
            dt = torch.exp(torch.rand(self.n_heads) * (math.log(0.1) - math.log(0.001)) + math.log(0.001)).clamp(
                min=1e-4
            )
            self.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))

    def state_shapes(self, batch_size: int) -> dict[str, tuple[int, ...]]:
        """Shapes of the per-sequence state: the convolution window and the SSM state."""
        return {
            "conv": (batch_size, self.conv_dim, self.conv_kernel),
            "ssm": (batch_size, self.n_heads, self.head_dim, self.state_size),
        }

    def mix(
        self,
        x: torch.Tensor,
        state: dict[str, torch.Tensor] | None = None,
        token_valid: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x (B, T, d) -> (B, T, d). ``state`` tensors are read and updated in place; tokens
        with ``token_valid`` (B, T) False (left padding) leave the state untouched."""
        batch, T, _ = x.shape
        if T == 1 and state is not None and cpu_steps.conv_step_ready(self, x, state, "ssm", token_valid):
            return self._fused_step(x, state)  # (B, 1, d)
        if token_valid is not None:
            x = x * token_valid[..., None].to(x.dtype)
        z, xbc, dt = torch.split(self.in_proj(x), [self.d_inner, self.conv_dim, self.n_heads], dim=-1)
        library = self.uses(MAMBA_SSM, x.device, stateful=state is not None)
        window = None if state is None else state["conv"]
        if library and causal_conv1d.fits(self.conv_kernel):
            weight = self.conv1d.weight[:, 0]  # (C, K)
            xbc = causal_conv1d.causal_conv(xbc.transpose(1, 2), weight, self.conv1d.bias, window, silu=True)
            xbc = xbc.transpose(1, 2)  # (B, T, C)
        elif cpu_prefill.scan_ready(self, x):  # the convolution, then the scan and its glue, in C++
            xbc = cpu_conv.causal_conv_rows(xbc, self.conv1d.weight, self.conv1d.bias, window)  # (B, T, C) SiLU'd
            params = (self.dt_bias, self.A_log, self.D, self.norm.weight)
            ssm = None if state is None else state["ssm"]
            y = cpu_prefill.ssd_rows(xbc, dt, z, params, token_valid, ssm, self.n_groups, self.norm.eps, self.dt_limit)
            return self.out_proj(y)  # (B, T, d)
        else:
            xbc = causal_conv(xbc.transpose(1, 2), self.conv1d.weight, self.conv1d.bias, window).transpose(1, 2)
        xs, Bm, Cm = torch.split(xbc.float(), [self.d_inner, *(2 * [self.n_groups * self.state_size])], dim=-1)
        per_group = self.n_heads // self.n_groups
        xs = xs.reshape(batch, T, self.n_heads, self.head_dim)  # (B, T, H, P)
        Bm, Cm = (t.reshape(batch, T, self.n_groups, -1) for t in (Bm, Cm))  # (B, T, G, N)
        dt = F.softplus(dt.float() + self.dt_bias.float()).clamp(*self.dt_limit)  # (B, T, H)
        if token_valid is not None:
            dt = dt * token_valid[..., None]
        A = -self.A_log.float().exp()  # (H,)
        ssm = None if state is None else state["ssm"]
        if library:  # the kernels run in the model's dtype (exact: x, B, C came from it)
            xs, Bm, Cm = (t.to(x.dtype) for t in (xs, Bm, Cm))
            y = mamba_ssm.mamba2_scan(xs, dt, A, Bm, Cm, self.D, ssm, self.chunk_size)  # (B, T, H, P), D in
            return self.out_proj(self.norm(y.reshape(batch, T, self.d_inner).to(x.dtype), z))
        if ssm is not None and T == 1:
            Bh, Ch = (t[:, 0].repeat_interleave(per_group, dim=1) for t in (Bm, Cm))  # (B, H, N)
            y, new = ssd_step(xs[:, 0], dt[:, 0], A, Bh, Ch, ssm.float())
            y = y[:, None]  # (B, 1, H, P)
        else:
            initial = (
                ssm.float() if ssm is not None else xs.new_zeros(batch, self.n_heads, self.head_dim, self.state_size)
            )
            y, new = chunk_scan(xs, dt, A, Bm, Cm, initial, self.chunk_size)  # (B, T, H, P)
        if ssm is not None:
            ssm.copy_(new)
        y = y + xs * self.D.float()[:, None]  # (B, T, H, P)
        y = self.norm(y.reshape(batch, T, self.d_inner).to(x.dtype), z)  # (B, T, d_inner)
        return self.out_proj(y)

    def _fused_step(self, x: torch.Tensor, state: dict[str, torch.Tensor]) -> torch.Tensor:
        """One token (B, 1, d) on the fused step (``cpu_steps``): at batch 1 in_proj, the step and
        out_proj in one C++ call where it takes them, else the projections around the step."""
        params = (self.dt_bias, self.A_log, self.D, self.norm.weight)
        if x.shape[0] == 1 and (out := self._token_step(x, params, state)) is not None:
            return out  # (1, 1, d)
        y = cpu_steps.mamba2_step(
            self.in_proj(x).squeeze(1), self.conv1d, params, state, self.n_groups, self.norm.eps, self.dt_limit
        )  # (B, d_inner)
        return self.out_proj(y.unsqueeze(1))  # (B, 1, d)

    def token_mix(
        self, x: torch.Tensor, norm: TokenNorm, state: dict[str, torch.Tensor], token_valid: torch.Tensor | None
    ) -> torch.Tensor | None:
        """x + the mix of norm(x) for one cached token (1, 1, d) in one C++ call (``_token_step``;
        ``SequenceStateMixer.residual_token``), or None."""
        if x.shape[0] != 1 or x.shape[1] != 1 or not cpu_steps.conv_step_ready(self, x, state, "ssm", token_valid):
            return None
        return self._token_step(x, (self.dt_bias, self.A_log, self.D, self.norm.weight), state, norm)

    def _token_step(
        self,
        x: torch.Tensor,
        params: tuple[torch.Tensor, ...],
        state: dict[str, torch.Tensor],
        norm: TokenNorm | None = None,
    ) -> torch.Tensor | None:
        """One token (1, 1, d) through ``cpu_steps.mamba2_token`` (with ``norm``: x + the mix of
        norm(x)) where both projections' layers give their tensors (``RowStackable.step_tensors``),
        else None. The layers are read from nn.Module's dicts (``Attention._token_step``)."""
        modules = self._modules
        projections = step_tensors(modules["in_proj"], modules["out_proj"])  # None: their own products
        if projections is None:
            return None
        in_proj, out_proj = projections
        conv = modules["conv1d"]
        return cpu_steps.mamba2_token(
            x, in_proj, conv, params, state, self.n_groups, self.norm.eps, self.dt_limit, out_proj, norm
        )  # (1, 1, d) or None


class Mamba2TokenMixer(Mamba2Mixer, SequenceStateMixer):
    """The registered ``mamba2`` attention kind: ``mix`` over the layer's state."""

    def matmul_param_count(self) -> int:
        """in_proj and out_proj: the convolution taps, dt bias, A_log, D and the gated norm's
        scale are elementwise, in ``score_flops``."""
        return sum(p.numel() for m in (self.in_proj, self.out_proj) for p in m.parameters())

    def score_flops(self, n_new: int, context_len: int) -> int:
        """Per token: the state update per head (decay, write dt x B^T, read S C, D skip) and
        the depthwise convolution (2 per tap per channel): no context term."""
        per_head = 5 * self.head_dim * self.state_size + 3 * self.head_dim
        return n_new * (self.n_heads * per_head + 2 * self.conv_dim * self.conv_kernel)

    def executed_score_flops(self, n_new: int, context_len: int) -> int:
        """A prefill runs the chunked SSD scan over chunks of ``chunk_size`` (the last one
        padded; a prompt shorter than a chunk is one chunk of its length): per chunk of L tokens, C·Bᵀ once per
        group (2 L² N: the group's heads share it), and per head scores·x (2 L² P), the chunk's state (2 L P N)
        and the carried state's read (2 L P N), plus the elementwise part. This is the reference's count; the
        CPU's cpu-scan runs the recurrence itself (``score_flops``).
        One token (decode) is the recurrence: ``score_flops``."""
        if n_new == 1:
            return self.score_flops(1, context_len)
        L, N, P = min(self.chunk_size, n_new), self.state_size, self.head_dim
        chunks = -(-n_new // L)
        per_chunk = self.n_heads * 2 * L * (L * P + 2 * P * N) + self.n_groups * 2 * L * L * N
        return chunks * per_chunk + self.score_flops(n_new, context_len)


def build_mamba2(options: Mamba2Options, ctx: BuildContext) -> nn.Module:
    """The Mamba2 mixer (multi-head SSD with grouped B/C)."""
    o = options
    limit = (o.dt_min, math.inf if o.dt_max is None else o.dt_max)
    mixer = Mamba2TokenMixer(
        ctx.d_model,
        o.n_heads * o.head_dim,
        o.n_heads,
        o.n_groups,
        o.state_size,
        o.conv_kernel,
        o.chunk_size,
        o.bias,
        o.conv_bias,
        o.eps,
        limit,
    )
    mixer.state_dtype = ctx.state_dtype
    return mixer


@hookimpl
def zoo_register_components(register: Callable[..., None]) -> None:
    register("attention", "mamba2", build_mamba2, module=Mamba2TokenMixer, options=Mamba2Options)
