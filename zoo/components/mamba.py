"""Mamba (v1) selective state-space mixer: the `attention`-family kind ``mamba``.

in_proj splits each token into x and a gate z; x goes through a causal depthwise
convolution (kernel ``d_conv``) and SiLU; x_proj makes the input-dependent dt (rank
``dt_rank``), B and C; dt_proj and softplus give the step; A = -exp(A_log) decays the state;
D skips x past the scan; the output is gated by silu(z) and projected back by out_proj.
Parameter names and shapes are those of Hugging Face's MambaMixer, so checkpoints map
one to one. The maths is in ``mamba_scan.py``.

State per sequence (``per="sequence"``, fixed size whatever the context): ``conv`` (B,
d_inner, d_conv), the last d_conv inputs of the convolution, in the cache's dtype, and
``ssm`` (B, d_inner, d_state), the recurrent state, float32 (decoding accumulates into it)
unless the spec's ``state_dtype`` is ``cache``: transformers' cache, tensor for tensor.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from pydantic import Field, PositiveInt, ValidationInfo, model_validator
from torch import nn

from zoo.components import cpu_conv, cpu_mamba_step, cpu_scan
from zoo.components.causal_conv import causal_conv
from zoo.components.cpu_steps import conv_step_ready
from zoo.components.cuda_kernels import causal_conv1d, mamba_ssm
from zoo.components.kernels import Kernel, KernelChoice
from zoo.components.linear import Linear, RowStackable, step_tensors
from zoo.components.mamba_scan import selective_scan, selective_step
from zoo.specs.hookspecs import hookimpl
from zoo.specs.interfaces import BuildContext, Positions, TokenMixer, TokenNorm
from zoo.specs.options import Options
from zoo.specs.state import LayerState, StateTensor

MAMBA_SSM = Kernel("mamba-ssm", "cuda", lambda: mamba_ssm.load_mamba1() and causal_conv1d.load(), autograd=True)
CPU_SCAN = Kernel(  # prompts and decode steps alike: the convolution and the scan
    "cpu-scan", "cpu", lambda: cpu_scan.EXTENSION.available() and cpu_conv.EXTENSION.available(), compiles=True
)


XRows = tuple[torch.Tensor, torch.Tensor | None]  # x_proj's rows and, int8, their scales (RowStackable.kernel_rows)


class MambaOptions(Options):
    tiny: ClassVar[Mapping[str, Any]] = {"d_state": 8, "expand": 2, "dt_rank": 4}

    d_state: PositiveInt = Field(16, description="state size N per channel")
    d_conv: PositiveInt = Field(4, description="causal convolution kernel size")
    expand: PositiveInt = Field(2, description="d_inner = expand * d_model")
    dt_rank: PositiveInt | None = Field(None, description="rank of the dt projection; default ceil(d_model / 16)")
    conv_bias: bool = Field(True, description="bias on the convolution")
    bias: bool = Field(False, description="bias on in_proj and out_proj")
    bcdt_norm_eps: float | None = Field(
        None, gt=0, description="weightless RMS norms on dt, B and C with this eps (Falcon-Mamba); none: off"
    )

    @model_validator(mode="before")
    @classmethod
    def _fill_dt_rank(cls, data: Any, info: ValidationInfo) -> Any:
        """Store the default rank the model will use (ceil(d_model / 16)), as a spec shows
        every number it builds with."""
        d_model = (info.context or {}).get("d_model")
        if isinstance(data, dict) and data.get("dt_rank") is None and isinstance(d_model, int):
            data = {**data, "dt_rank": math.ceil(d_model / 16)}
        return data


class DtProjection(nn.Module):
    """dt_proj (weight (d_inner, dt_rank), bias (d_inner,)): not an nn.Linear, so that the
    model's generic init leaves its Mamba initialisation (bias = softplus⁻¹ of a step
    drawn log-uniformly in [1e-3, 0.1]) alone."""

    def __init__(self, dt_rank: int, d_inner: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(d_inner, dt_rank))
        self.bias = nn.Parameter(torch.empty(d_inner))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight.is_meta:
            return
        with torch.no_grad():
            std = self.weight.shape[1] ** -0.5
            self.weight.uniform_(-std, std)
            step = torch.exp(
                torch.rand_like(self.bias, dtype=torch.float32) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3)
            )
            step = step.clamp(min=1e-4)
            self.bias.copy_(step + torch.log(-torch.expm1(-step)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


class MambaMixer(TokenMixer, KernelChoice):
    """The selective-scan mixer. Positions are not used: order comes from the recurrence.

    Implementations (``zoo.components.kernels``): ``reference`` (``mamba_scan``: a chunked
    parallel scan and a one-token step in PyTorch), ``cpu-scan`` (``cpu_conv``'s convolution, then ``cpu_scan``:
    the recurrence with dt's softplus, the D skip and the gate as one fused C++ loop, prefill and
    decode step alike; inference only),
    ``cpu-step`` (``cpu_mamba_step``: a decode step's conv window, x_proj, dt_proj, state update
    and gate as one C++ call; inference only, ahead of ``cpu-scan`` for one token) and, on
    CUDA, ``mamba-ssm`` (``cuda_kernels.mamba_ssm``: the selective scan and state update of
    mamba-ssm, the convolution of causal-conv1d; its scan has a backward)."""

    causal = True
    kernel_family = "mamba"
    kernels = (MAMBA_SSM, CPU_SCAN, cpu_mamba_step.KERNEL)

    def __init__(self, options: MambaOptions, ctx: BuildContext) -> None:
        super().__init__()
        d = ctx.d_model
        self.d_inner = options.expand * d
        self.d_state = options.d_state
        self.d_conv = options.d_conv
        self.dt_rank = int(options.dt_rank or math.ceil(d / 16))
        self.norm_eps = options.bcdt_norm_eps
        self.state_dtype = ctx.state_dtype
        self.in_proj = Linear(d, 2 * self.d_inner, bias=options.bias)
        self.conv1d = nn.Conv1d(
            self.d_inner,
            self.d_inner,
            self.d_conv,
            groups=self.d_inner,
            padding=self.d_conv - 1,
            bias=options.conv_bias,
        )
        self.x_proj = Linear(self.d_inner, self.dt_rank + 2 * self.d_state, bias=False)
        self.dt_proj = DtProjection(self.dt_rank, self.d_inner)
        self.A_log = nn.Parameter(torch.empty(self.d_inner, self.d_state))
        self.D = nn.Parameter(torch.empty(self.d_inner))
        self.out_proj = Linear(self.d_inner, d, bias=options.bias)
        self._decay: tuple[nn.Parameter, tuple[object, ...], torch.Tensor] | None = None  # see ``decay``
        self.choose_kernel()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """S4D-real A (A_log = log 1..N per channel) and D = 1, as Mamba initialises them."""
        if self.A_log.is_meta:
            return
        with torch.no_grad():
            n = torch.arange(1, self.d_state + 1, dtype=torch.float32, device=self.A_log.device)
            self.A_log.copy_(torch.log(n).expand(self.d_inner, -1))
            self.D.fill_(1.0)

    # ---- state ----------------------------------------------------------------------------
    def state_layout(self, batch_size: int, max_len: int, memory_len: int = 0) -> dict[str, StateTensor]:
        """The convolution window (the cache's dtype) and the recurrent state (``state_dtype``),
        fixed per sequence."""
        return {
            "conv": StateTensor((batch_size, self.d_inner, self.d_conv), per="sequence"),
            "ssm": StateTensor((batch_size, self.d_inner, self.d_state), self.state_dtype, per="sequence"),
        }

    def matmul_param_count(self) -> int:
        """in_proj, x_proj, dt_proj's weight and out_proj (with their biases, if any): the
        convolution taps, A_log, D and the dt bias are elementwise, in ``score_flops``."""
        projections = (self.in_proj, self.x_proj, self.out_proj)
        return sum(p.numel() for m in projections for p in m.parameters()) + self.dt_proj.weight.numel()

    def score_flops(self, n_new: int, context_len: int) -> int:
        """The state update beyond the projections, whatever the context: per channel and
        state entry exp(dt·A), dt·B·x, the decay-and-add (about 6) and C·h (2); per channel
        the convolution (2·d_conv), the dt bias, the D skip and the gate (5)."""
        return n_new * self.d_inner * (8 * self.d_state + 2 * self.d_conv + 5)

    # ---- forward --------------------------------------------------------------------------
    def forward(
        self, x: torch.Tensor, positions: Positions | None = None, state: LayerState | None = None
    ) -> torch.Tensor:
        """x (B, T, d) -> (B, T, d). With a state, its conv window and recurrent state are
        read and updated in place; tokens marked False in ``token_valid`` (left padding)
        enter as zeros with a zero step, so they leave the state as it was."""
        T = x.shape[1]
        tensors = None if state is None else state.tensors
        x_rows = None if state is None else self._step_rows(x, state)
        if x_rows is not None and tensors is not None:
            out = self._token_step(x, x_rows, tensors) if x.shape[0] == 1 else None
            return self._step(x, x_rows, tensors) if out is None else out  # (B, 1, d)
        if state is not None:
            valid = state.token_valid  # (B, T) bool or None
        else:
            valid = None if positions is None else positions.key_valid
        xs, z = self.in_proj(x).chunk(2, dim=-1)  # (B, T, d_inner) each
        if valid is not None:
            xs = xs * valid[..., None].to(xs.dtype)  # padding enters the convolution as zeros
        window = None if tensors is None else tensors["conv"]
        stateful = state is not None
        library = self.uses(MAMBA_SSM, x.device, stateful)
        fused = self.uses(CPU_SCAN, x.device, stateful)  # the convolution, then the scan and its glue, in C++
        if fused:  # laid out (B, T, d_inner), as x_proj and the scan read it by tokens
            xs = cpu_conv.causal_conv_rows(xs, self.conv1d.weight, self.conv1d.bias, window)  # SiLU'd
        else:
            if library and causal_conv1d.fits(self.d_conv):
                weight = self.conv1d.weight[:, 0, :]  # (d_inner, d_conv)
                xs = causal_conv1d.causal_conv(xs.transpose(1, 2), weight, self.conv1d.bias, window, silu=True)
            else:
                xs = causal_conv(xs.transpose(1, 2), self.conv1d.weight, self.conv1d.bias, window)  # SiLU'd
            xs = xs.transpose(1, 2)  # (B, T, d_inner)
            if not library:  # mamba_ssm takes back the (B, d_inner, T) the convolution gave: a copy would cost two
                xs = xs.contiguous()  # x_proj and the reference's ops read it by rows
        dt, Bm, Cm = torch.split(self.x_proj(xs), [self.dt_rank, self.d_state, self.d_state], dim=-1)
        if self.norm_eps is not None:
            dt, Bm, Cm = (_weightless_rms(t, self.norm_eps) for t in (dt, Bm, Cm))
        dt = self.dt_proj(dt)  # (B, T, d_inner), before its softplus
        A = self.decay()  # (d_inner, N)
        ssm = None if tensors is None else tensors["ssm"]
        if fused:  # softplus, scan, D skip and gate: one pass; ssm updated in place
            return self.out_proj(cpu_scan.scan_into(xs, dt, A, Bm, Cm, self.D, z, valid, ssm))  # (B, T, d)
        dt = F.softplus(dt.float())  # (B, T, d_inner)
        if valid is not None:
            dt = dt * valid[..., None]  # a zero step leaves the state as it was
        if library:
            fresh = state is None or state.filled == T  # this call's tokens are the first: the state is zeros
            y = mamba_ssm.mamba1_scan(xs, dt, A, Bm, Cm, self.D, z, ssm, fresh)  # (B, T, d_inner), D and gate in
            return self.out_proj(y.to(x.dtype))
        if ssm is not None and T == 1:
            y = selective_step(xs[:, 0], dt[:, 0], A, Bm[:, 0], Cm[:, 0], ssm)[:, None]  # (B, 1, d_inner)
        else:
            y, last = selective_scan(xs, dt, A, Bm, Cm, ssm)  # (B, T, d_inner)
            if ssm is not None:
                ssm.copy_(last.to(ssm.dtype))
        y = (y + xs.float() * self.D.float()) * F.silu(z.float())
        return self.out_proj(y.to(x.dtype))  # (B, T, d)

    def _step(self, x: torch.Tensor, x_rows: XRows, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
        """One token (B, 1, d) on the fused kernel: the conv window and the state updated in place."""
        xz = self.in_proj(x.squeeze(1))  # (B, 2 d_inner)
        dt_proj = (self.dt_proj.weight, self.dt_proj.bias)
        y = cpu_mamba_step.mamba_step(
            xz, self.conv1d, x_rows, dt_proj, (self.A_log, self.D), tensors, self.norm_eps
        )  # (B, d_inner)
        return self.out_proj(y).unsqueeze(1)  # (B, 1, d)

    def residual_token(
        self, x: torch.Tensor, norm: TokenNorm, positions: Positions, state: LayerState
    ) -> torch.Tensor | None:
        """x + this mixer of norm(x) for one cached token (1, 1, d) in one C++ call (``_token_step``)."""
        x_rows = self._step_rows(x, state) if x.shape[0] == 1 else None
        return None if x_rows is None else self._token_step(x, x_rows, state.tensors, norm)

    def _step_rows(self, x: torch.Tensor, state: LayerState) -> XRows | None:
        """x_proj's rows as the fused one-token step reads them (float, int8 or int4) where that
        step runs this call: one token, a layer the step reads, the conv window and state it
        takes (``conv_step_ready``); else None."""
        x_proj = self._modules["x_proj"]
        if x.shape[1] != 1 or not isinstance(x_proj, RowStackable):
            return None
        x_rows = x_proj.kernel_rows()
        ready = x_rows is not None and conv_step_ready(
            self, x, state.tensors, "ssm", state.token_valid, cpu_mamba_step.KERNEL
        )
        return x_rows if ready else None

    def _token_step(
        self, x: torch.Tensor, x_rows: XRows, tensors: dict[str, torch.Tensor], norm: TokenNorm | None = None
    ) -> torch.Tensor | None:
        """One token (1, 1, d) through ``cpu_mamba_step.mamba_token`` (in_proj, the fused step
        and out_proj in one C++ call; with ``norm``: x + the mixer of norm(x)) where both
        projections' layers give their tensors (``RowStackable.step_tensors``: float rows on the
        row kernel, int8 rows), else None. The layers are read from nn.Module's dicts
        (``Attention._token_step``)."""
        modules = self._modules
        projections = step_tensors(modules["in_proj"], modules["out_proj"])  # None: their own products
        if projections is None:
            return None
        conv, dt_proj = modules["conv1d"], modules["dt_proj"]
        params = self._parameters
        return cpu_mamba_step.mamba_token(
            x,
            projections[0],
            conv,
            x_rows,
            (dt_proj.weight, dt_proj.bias),
            (params["A_log"], params["D"]),
            tensors,
            self.norm_eps,
            projections[1],
            norm,
        )  # (1, 1, d) or None

    def decay(self) -> torch.Tensor:
        """A = -exp(A_log) (d_inner, N) in float32. Every prefill and reference step needs it (the
        fused CPU step keeps its own, ``cpu_mamba_step.decay_of``) and it changes only
        with the weights, so outside autograd and tracing it is kept, tagged with the parameter it
        came from: the same tensor at the same storage and version (an in-place write, a
        ``load_state_dict`` or an optimiser step bumps the version; ``.to`` moves the storage)
        reuses it, anything else makes it anew (an inference tensor, which keeps no version,
        every time). Made each token, it was half a Mamba-1 step's exponentials."""
        param = self.A_log
        if torch.compiler.is_compiling() or torch.is_grad_enabled() or param.is_inference():
            return -torch.exp(param.float())
        tag = (param.data_ptr(), param._version, param.device, param.dtype)
        if self._decay is None or self._decay[0] is not param or self._decay[1] != tag:
            self._decay = (param, tag, -torch.exp(param.float()))
        return self._decay[2]

    def extra_repr(self) -> str:
        return f"d_inner={self.d_inner}, d_state={self.d_state}, d_conv={self.d_conv}, dt_rank={self.dt_rank}"


def _weightless_rms(t: torch.Tensor, eps: float) -> torch.Tensor:
    """Falcon-Mamba's RMS norm without a weight, in float32, cast back."""
    return F.rms_norm(t.float(), (t.shape[-1],), eps=eps).to(t.dtype)


def build_mamba(options: MambaOptions, ctx: BuildContext) -> MambaMixer:
    """Mamba (v1) selective-scan mixer."""
    return MambaMixer(options, ctx)


@hookimpl
def zoo_register_components(register: Callable[..., None]) -> None:
    register("attention", "mamba", build_mamba, options=MambaOptions, module=MambaMixer)
