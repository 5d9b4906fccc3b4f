"""The CUDA kernel libraries' own PyTorch references, in each library's API and layout, to stand
in for the kernels on a machine without a GPU (``tests/components/test_cuda_kernels.py``).

Each function has the signature of the library function it replaces and computes what the
library's reference implementation computes (copied from it, einops rearranges written as
torch ops, cited per function); each also asserts the checks the real kernel makes on
dtypes, shapes and strides, so a wrong layout or argument in zoo's adapters
(``zoo/components/cuda_kernels/``) fails here as it would on the device.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


# ---- causal-conv1d 1.6.1, causal_conv1d/causal_conv1d_interface.py ---------------------------
def causal_conv1d_fn(
    x, weight, bias=None, seq_idx=None, initial_states=None, return_final_states=False, final_states_out=None,
    activation=None,
):  # fmt: skip
    """``causal_conv1d_fn``'s signature computed by ``causal_conv1d_ref`` (no initial states:
    zoo never passes them). Checks of csrc/causal_conv1d.cpp: width 2..4, bias in the weight's
    dtype, x (batch, dim, seqlen) with a unit stride in time or channels."""
    assert seq_idx is None and initial_states is None and not return_final_states and final_states_out is None
    assert activation in (None, "silu", "swish")
    dim, width = weight.shape
    assert 2 <= width <= 4 and x.shape[1] == dim and (x.stride(2) == 1 or x.stride(1) == 1)
    assert bias is None or bias.dtype == weight.dtype
    dtype_in = x.dtype
    x = x.to(weight.dtype)
    seqlen = x.shape[-1]
    out = F.conv1d(x, weight.unsqueeze(1), bias, padding=width - 1, groups=dim)[..., :seqlen]
    return (out if activation is None else F.silu(out)).to(dtype=dtype_in)


def causal_conv1d_update(
    x, conv_state, weight, bias=None, activation=None, cache_seqlens=None, conv_state_indices=None
):
    """``causal_conv1d_update_ref`` (no circular buffer). csrc checks: conv_state in x's dtype,
    state_len >= width - 1, width 2..4."""
    assert cache_seqlens is None and conv_state_indices is None
    assert conv_state.dtype == x.dtype and conv_state.shape[-1] >= weight.shape[1] - 1 and 2 <= weight.shape[1] <= 4
    dtype_in = x.dtype
    unsqueeze = x.dim() == 2
    if unsqueeze:
        x = x.unsqueeze(-1)
    batch, dim, seqlen = x.shape
    state_len = conv_state.shape[-1]
    assert conv_state.shape == (batch, dim, state_len) and weight.shape == (dim, weight.shape[1])
    x_new = torch.cat([conv_state, x], dim=-1).to(weight.dtype)  # (batch, dim, state_len + seqlen)
    conv_state.copy_(x_new[:, :, -state_len:])
    out = F.conv1d(x_new, weight.unsqueeze(1), bias, padding=0, groups=dim)[:, :, -seqlen:]
    if unsqueeze:
        out = out.squeeze(-1)
    return (out if activation is None else F.silu(out)).to(dtype=dtype_in)


# ---- mamba-ssm 2.3.2, mamba_ssm/ops/selective_scan_interface.py ------------------------------
def selective_scan_fn(
    u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False, return_last_state=False, h0=None
):
    """``selective_scan_ref`` for real A and variable B, C (B N L) or (B G N L); ``h0`` (not in
    the library: its scan starts from zeros) lets the SSD stand-in below start from a state.
    Checks of csrc/selective_scan/selective_scan.cpp: delta, B, C, z in u's dtype, A, D,
    delta_bias float32, dstate <= 256, shapes."""
    batch, dim, seqlen = u.shape
    assert delta.dtype == u.dtype and B.dtype == u.dtype and C.dtype == u.dtype
    assert A.dtype == torch.float32 and A.shape[0] == dim and A.shape[1] <= 256
    assert D is None or (D.dtype == torch.float32 and D.shape == (dim,))
    assert delta_bias is None or delta_bias.dtype == torch.float32
    assert z is None or (z.dtype == u.dtype and z.shape == u.shape)
    assert delta.shape == u.shape
    assert B.shape[-1] == seqlen and C.shape[-1] == seqlen and B.shape[0] == batch
    dtype_in = u.dtype
    u, delta = u.float(), delta.float()
    if delta_bias is not None:
        delta = delta + delta_bias[..., None].float()
    if delta_softplus:
        delta = F.softplus(delta)
    B, C = B.float(), C.float()
    x = A.new_zeros((batch, dim, A.shape[1])) if h0 is None else h0.float()
    deltaA = torch.exp(torch.einsum("bdl,dn->bdln", delta, A))
    if B.dim() == 3:
        deltaB_u = torch.einsum("bdl,bnl,bdl->bdln", delta, B, u)
    else:
        B = B.repeat_interleave(dim // B.shape[1], dim=1)  # repeat(B, "B G N L -> B (G H) N L")
        deltaB_u = torch.einsum("bdl,bdnl,bdl->bdln", delta, B, u)
    if C.dim() == 4:
        C = C.repeat_interleave(dim // C.shape[1], dim=1)
    ys = []
    for i in range(seqlen):
        x = deltaA[:, :, i] * x + deltaB_u[:, :, i]
        y = torch.einsum("bdn,bn->bd", x, C[:, :, i]) if C.dim() == 3 else torch.einsum("bdn,bdn->bd", x, C[..., i])
        ys.append(y)
    y = torch.stack(ys, dim=2)  # (batch dim L)
    out = y if D is None else y + u * D[:, None]
    if z is not None:
        out = out * F.silu(z)
    out = out.to(dtype=dtype_in)
    return out if not return_last_state else (out, x)


# ---- mamba-ssm 2.3.2, mamba_ssm/ops/triton/selective_state_update.py -------------------------
def selective_state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False):
    """``selective_state_update_ref``, with the Triton wrapper's read of ``dt_bias``'s stride
    when A and dt are broadcast along the head dim ("tie_hdim": dt_bias must then be given)."""
    has_heads = state.dim() > 3
    if state.dim() == 3:
        state, x, dt, A, B, C = state[:, None], x[:, None], dt[:, None], A[None], B[:, None], C[:, None]
        D = None if D is None else D[None]
        z = None if z is None else z[:, None]
        dt_bias = None if dt_bias is None else dt_bias[None]
    _ = A.stride(-1) == 0 and A.stride(-2) == 0 and dt.stride(-1) == 0 and dt_bias.stride(-1) == 0
    batch, nheads, dim, dstate = state.shape
    assert x.shape == (batch, nheads, dim) and dt.shape == x.shape and A.shape == (nheads, dim, dstate)
    ngroups = B.shape[1]
    assert nheads % ngroups == 0 and B.shape == (batch, ngroups, dstate) and C.shape == B.shape
    assert D is None or D.shape == (nheads, dim)
    assert z is None or z.shape == x.shape
    if dt_bias is not None:
        assert dt_bias.shape == (nheads, dim)
        dt = dt + dt_bias
    dt = F.softplus(dt) if dt_softplus else dt
    dA = torch.exp(dt[..., None] * A)  # (batch, nheads, dim, dstate)
    B = B.repeat_interleave(nheads // ngroups, dim=1)  # (batch, nheads, dstate)
    C = C.repeat_interleave(nheads // ngroups, dim=1)
    dB = dt[..., None] * B[:, :, None, :]  # (batch, nheads, dim, dstate)
    state.copy_(state * dA + dB * x[..., None])
    out = torch.einsum("bhdn,bhn->bhd", state.to(C.dtype), C)
    if D is not None:
        out += (x * D).to(out.dtype)
    out = (out if z is None else out * F.silu(z)).to(x.dtype)
    return out if has_heads else out.squeeze(1)


# ---- mamba-ssm 2.3.2, mamba_ssm/ops/triton/ssd_combined.py -----------------------------------
def mamba_chunk_scan_combined(
    x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None, initial_states=None, seq_idx=None, cu_seqlens=None,
    dt_softplus=False, dt_limit=(0.0, float("inf")), return_final_states=False, return_varlen_states=False,
):  # fmt: skip
    """``ssd_selective_scan`` (the library's test reference for this function: the SSD scan as
    Mamba-1's selective scan over (h p) channels), started from ``initial_states``; the
    asserts of ``_mamba_chunk_scan_combined_fwd``."""
    batch, seqlen, nheads, headdim = x.shape
    _, _, ngroups, dstate = B.shape
    assert seq_idx is None and cu_seqlens is None and not return_varlen_states and chunk_size > 0
    assert nheads % ngroups == 0 and B.shape == (batch, seqlen, ngroups, dstate) and C.shape == B.shape
    assert dt.shape == (batch, seqlen, nheads) and A.shape == (nheads,)
    assert D is None or D.shape in ((nheads, headdim), (nheads,))
    assert initial_states is None or initial_states.shape == (batch, nheads, headdim, dstate)
    # the kernels compute in float32 whatever x's dtype: so does this stand-in
    u = x.float().permute(0, 2, 3, 1).reshape(batch, nheads * headdim, seqlen)  # "b l h p -> b (h p) l"
    delta = dt.float()[..., None].expand(-1, -1, -1, headdim).permute(0, 2, 3, 1).reshape(batch, -1, seqlen)
    A_hp = A.float()[:, None, None].expand(nheads, headdim, dstate).reshape(-1, dstate)  # "h -> (h p) n"
    B_, C_ = (t.float().permute(0, 2, 3, 1) for t in (B, C))  # "b l g n -> b g n l"
    D_ = None if D is None else (D.reshape(-1) if D.dim() == 2 else D.repeat_interleave(headdim)).float()
    z_ = None if z is None else z.float().permute(0, 2, 3, 1).reshape(batch, -1, seqlen)
    bias = None if dt_bias is None else dt_bias.float().repeat_interleave(headdim)
    h0 = None if initial_states is None else initial_states.reshape(batch, nheads * headdim, dstate)
    out, last = selective_scan_fn(u, delta, A_hp, B_, C_, D_, z_, bias, dt_softplus, True, h0=h0)
    out = out.reshape(batch, nheads, headdim, seqlen).permute(0, 3, 1, 2).to(x.dtype)  # "b (h p) l -> b l h p"
    return (out, last.reshape(batch, nheads, headdim, dstate)) if return_final_states else out


# ---- flash-linear-attention 0.5.2, fla/ops/gated_delta_rule/naive.py --------------------------
def naive_recurrent_gated_delta_rule(q, k, v, beta, g, scale=None, initial_state=None, output_final_state=False):
    """The library's reference, as written there (q, k, v (B, T, H, D))."""
    q, k, v, beta, g = (t.transpose(1, 2).contiguous().to(torch.float32) for t in (q, k, v, beta, g))
    B, H, T, K, V = *k.shape, v.shape[-1]
    o = torch.zeros(B, H, T, V).to(v)
    h = torch.zeros(B, H, K, V).to(v)
    if initial_state is not None:
        h = initial_state.to(torch.float32)
    if scale is None:
        scale = 1 / (q.shape[-1] ** 0.5)
    q = q * scale
    for i in range(T):
        b_q, b_k, b_v = q[:, :, i], k[:, :, i], v[:, :, i].clone()
        h = h.clone() * g[:, :, i].exp()[..., None, None]
        b_v = (b_v - (h.clone() * b_k[..., None]).sum(-2)) * beta[:, :, i][..., None]
        h = h.clone() + b_k.unsqueeze(-1) * b_v.unsqueeze(-2)
        o[:, :, i] = torch.einsum("bhd,bhdm->bhm", b_q, h)
    return o.transpose(1, 2).contiguous(), h if output_final_state else None


def gated_delta_rule(
    q, k, v, g=None, beta=None, scale=None, initial_state=None, output_final_state=False,
    use_qk_l2norm_in_kernel=False, cu_seqlens=None, **kwargs,
):  # fmt: skip
    """``chunk_gated_delta_rule`` and ``fused_recurrent_gated_delta_rule`` (keywords as both
    take them): the naive recurrence; o in q's dtype, the final state float32."""
    assert not use_qk_l2norm_in_kernel and cu_seqlens is None and not kwargs
    assert q.shape == k.shape and v.shape[:3] == q.shape[:3] and g.shape == beta.shape == q.shape[:3]
    assert initial_state is None or initial_state.shape == (q.shape[0], q.shape[2], q.shape[3], v.shape[3])
    o, h = naive_recurrent_gated_delta_rule(q, k, v, beta, g, scale, initial_state, output_final_state)
    return o.to(q.dtype), h


# ---- flash-linear-attention 0.5.2, fla/ops/linear_attn/naive.py -------------------------------
def chunk_linear_attn(
    q, k, v, scale=None, initial_state=None, output_final_state=False, normalize=True, cu_seqlens=None
):
    """``naive_recurrent_linear_attn`` without its ``normalize`` branch (zoo passes False)."""
    assert not normalize and cu_seqlens is None
    dtype = q.dtype
    if scale is None:
        scale = q.shape[-1] ** -0.5
    B, T, H, K, V = *q.shape, v.shape[-1]
    q, k, v = (t.to(torch.float32) for t in (q, k, v))
    o = torch.empty_like(v)
    S = torch.zeros((B, H, K, V), device=q.device, dtype=torch.float32)
    if initial_state is not None:
        S = S + initial_state
    for t in range(T):
        S = S + torch.einsum("b h k, b h v -> b h k v", k[:, t], v[:, t])
        o[:, t] = torch.einsum("b h k v, b h k -> b h v", S, q[:, t] * scale)
    return o.to(dtype), S if output_final_state else None
