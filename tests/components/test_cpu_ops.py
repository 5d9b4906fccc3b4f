"""Each C++ CPU kernel registered as a custom op (``zoo.components.cpu_ops``) passes
``torch.library.opcheck`` on small tensors: its schema declares exactly the tensors it writes
in place, its fake shape function agrees with the kernel's output, and it traces under
AOTAutograd with dynamic shapes. Every zoo op has a case here, so a new kernel needs one."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pytest
import torch

from zoo.components import cpu_conv, cpu_mamba_step, cpu_ops, cpu_prefill, cpu_scan, cpu_steps, onednn
from zoo.components.cpu_ops import registered_ops
from zoo.quant import int4_cpu

B, T, H, P, N, G, K = 2, 5, 4, 8, 8, 2, 4  # batch, tokens, heads, head width, state size, groups, conv taps


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def _mamba2_step() -> tuple[object, ...]:
    inner, conv = H * P, H * P + 2 * G * N
    proj, taps, bias, window = _r(B, inner + conv + H), _r(conv, K), _r(conv), _r(B, conv, K)
    return proj, taps, bias, window, _r(H), _r(H), _r(H), _r(inner), _r(B, H, P, N), G, 1e-5, 0.0, 1e30


def _ssd_rows() -> tuple[object, ...]:
    inner = H * P
    proj = _r(B, T, inner + inner + 2 * G * N + H)  # in_proj's output: z | x B C | dt, split as views
    z, xbc, dt = torch.split(proj, [inner, inner + 2 * G * N, H], dim=-1)
    return xbc.contiguous(), dt, z, _r(H), _r(H), _r(H), _r(inner), None, _r(B, H, P, N), G, 1e-5, 0.0, 1e30


def _delta_rows() -> tuple[object, ...]:
    hk, dk, dv = 2, 8, 6  # key heads, key and value widths; H value heads
    qkv, b, a, z = _r(B, T, 2 * hk * dk + H * dv), _r(B, T, H), _r(B, T, H), _r(B, T, H, dv)
    return qkv, b, a, z, _r(H), _r(H), _r(dv), None, _r(B, H, dk, dv), hk, 1e-6


def _gdn_step() -> tuple[object, ...]:
    hk, dk, dv = 2, 8, 6  # key heads, key and value widths; H value heads
    width, conv = 2 * dk + 2 * (H // hk) * dv, 2 * hk * dk + H * dv
    qkvz, ba, taps, window = _r(B, hk * width), _r(B, 2 * H), _r(conv, K), _r(B, conv, K)
    return qkvz, ba, taps, window, _r(H), _r(H), _r(dv), _r(B, H, dk, dv), hk, 1e-6


def _infini_step() -> tuple[object, ...]:
    q, k, v, ring_k, ring_v = _r(B, H, P), _r(B, H, P), _r(B, H, P), _r(B, H, 4, P), _r(B, H, 4, P)
    no_padding, time = torch.empty(0, dtype=torch.bool), torch.tensor([7])
    return q, k, v, ring_k, ring_v, _r(B, H, P, P).abs(), _r(B, H, P).abs(), _r(H), no_padding, time, 4, True, 1e-6


def _infini_token() -> tuple[object, ...]:
    x, qkv = _r(1, 1, 32), _r(3 * H * P, 32)  # x and the fused q|k|v layer
    valid, time = torch.ones(1, 12, dtype=torch.bool), torch.tensor([7])  # cache slots, the token's
    state = _r(1, H, 4, P), _r(1, H, 4, P), _r(1, H, P, P).abs(), _r(1, H, P).abs(), _r(H), valid, time
    pre = _r(32), _r(32), 1e-5, 1  # a pre-norm block's layer norm before, the residual after
    return x, qkv, None, None, *state, 4, False, 1e-6, _r(32, H * P), None, None, *pre, True


def _mamba_step() -> tuple[object, ...]:
    inner, rank = 16, 3  # d_inner, dt_rank
    xz, taps, bias, window = _r(B, 2 * inner), _r(inner, K), _r(inner), _r(B, inner, K)
    x_proj, dt_w, dt_b = torch.randint(-127, 128, (rank + 2 * N, inner), dtype=torch.int8), _r(inner, rank), _r(inner)
    x_scales = torch.rand(rank + 2 * N) / 64  # int8 rows with their scales (an int8 model's x_proj)
    return xz, taps, bias, window, x_proj, x_scales, dt_w, dt_b, _r(inner, N), _r(inner), _r(B, inner, N), 1e-6


def _mamba_token() -> tuple[object, ...]:
    inner, rank = 16, 3  # d_inner, dt_rank; one token of width 32, in_proj int8 rows with their scales
    x, in_rows, taps, window = (
        _r(1, 1, 32),
        torch.randint(-127, 128, (2 * inner, 32), dtype=torch.int8),
        _r(inner, 1, K),
        _r(1, inner, K),
    )
    mixer = (
        taps,
        _r(inner),
        window,
        _r(rank + 2 * N, inner),
        None,
        _r(inner, rank),
        _r(inner),
        _r(inner, N),
        _r(inner),
    )
    scales = torch.rand(2 * inner) / 64  # int8 rows' products of the order of a float layer's
    out = _r(32, inner), None, _r(32)  # x's width: a pre-norm block's RMS norm before, the residual after
    return x, in_rows, scales, None, *mixer, _r(1, inner, N), 1e-6, *out, _r(32), None, 1e-6, 2, True


def _mamba2_token() -> tuple[object, ...]:
    inner, conv = H * P, H * P + 2 * G * N
    x, in_weight, taps, window = _r(1, 1, 32), _r(inner + conv + H, 32), _r(conv, 1, K), _r(1, conv, K)
    mixer = (taps, _r(conv), window, _r(H), _r(H), _r(H), _r(inner), _r(1, H, P, N), G, 1e-5, 0.0, 1e30)
    pre = _r(32), _r(32), 1e-5, 1  # a pre-norm block's layer norm before, the residual after
    return x, in_weight, None, _r(inner + conv + H), *mixer, _r(32, inner), None, None, *pre, True


def _gdn_token() -> tuple[object, ...]:
    hk, dk, dv = 2, 8, 6  # as _gdn_step, for one token
    width, conv = 2 * dk + 2 * (H // hk) * dv, 2 * hk * dk + H * dv
    x, taps, window = _r(1, 1, 32), _r(conv, 1, K), _r(1, conv, K)
    mixer = (taps, window, _r(H), _r(H), _r(dv), _r(1, H, dk, dv), hk, 1e-6)
    pre = _r(32), None, 1e-6, 3  # an RMS norm by 1 + w before, the residual after
    return x, _r(hk * width, 32), None, None, _r(2 * H, 32), None, None, *mixer, _r(32, H * dv), None, None, *pre, True


def _int4_weight() -> tuple[torch.Tensor, torch.Tensor]:
    """zoo's int4 panel layout of 40 rows (two panels and a tail) of 64 inputs in groups of 32."""
    values = torch.randint(0, 16, (40, 64))
    return int4_cpu.pack(values, torch.rand(40, 2, 2))  # packed (40, 32) uint8, scale_offsets (40, 2, 2)


CASES: dict[str, Callable[[], tuple[object, ...]]] = {
    "zoo::cpu_steps_mamba2_step": _mamba2_step,
    "zoo::cpu_steps_gdn_step": _gdn_step,
    "zoo::cpu_steps_linear_step": lambda: (_r(B, H, P), _r(B, H, P), _r(B, H, P), _r(B, H, P, P), _r(B, H, P), 1e-6),
    "zoo::cpu_steps_infini_step": _infini_step,
    "zoo::cpu_prefill_ssd_rows": _ssd_rows,
    "zoo::cpu_prefill_delta_rows": _delta_rows,
    "zoo::cpu_mamba_step_mamba_step": _mamba_step,
    "zoo::cpu_mamba_step_mamba_token": _mamba_token,
    "zoo::cpu_steps_mamba2_token": _mamba2_token,
    "zoo::cpu_steps_gdn_token": _gdn_token,
    "zoo::cpu_steps_infini_token": _infini_token,
    "zoo::cpu_steps_linear_token": lambda: (
        *(_r(1, 1, 32), _r(3 * H * P, 32), None, _r(3 * H * P)),  # x, the fused q|k|v layer
        *(_r(1, H, P, P), _r(1, H, P), 1e-6, _r(32, H * P), None, None),  # state, o_proj
        *(_r(32), None, 1e-6, 2, True),  # an RMS norm before, the residual after
    ),
    "zoo::row_product_row_product": lambda: (_r(24, 40), _r(1, 1, 40), _r(24), True),  # a step's (B, T, in)
    "zoo::row_product_layer_row": lambda: (_r(24, 40), None, _r(1, 1, 40), _r(24), True),
    "zoo::row_product_row_product_fitting": lambda: (_r(24, 40), _r(1, 1, 40), _r(24), True, 0),
    "zoo::row_product_int8_rows": lambda: (torch.randint(-127, 128, (24, 64), dtype=torch.int8), _r(24), _r(64), True),
    "zoo::row_product_int8_tiles": lambda: (
        _r(26, 64),
        torch.randint(-127, 128, (40, 64), dtype=torch.int8),
        _r(40),
        16,
    ),
    "zoo::row_product_one_query_attention": lambda: (
        _r(2, 4, 1, 8),
        _r(2, 2, 12, 8),
        _r(2, 2, 12, 8),
        torch.rand(2, 1, 1, 12) > 0.3,
        0.35,
    ),
    "zoo::row_product_append_attention": lambda: (
        _r(2, 4, 1, 16),
        _r(2, 2, 1, 16),
        _r(2, 2, 1, 16),
        _r(2, 2, 12, 16),
        _r(2, 2, 12, 16),
        9,
        _r(2, 1, 1, 12),  # rotary tables: the first 12 of 16 channels rotated
        _r(2, 1, 1, 12),
        _r(1, 4, 1, 9),
        0.35,
    ),
    "zoo::row_product_attention_token": lambda: (  # 4 query and 2 K/V heads of 8, q/k norms, rotary, a bias
        _r(1, 1, 32),
        _r(64, 32),
        None,
        _r(64),
        _r(8),
        _r(8),
        1e-6,
        False,
        _r(1, 2, 12, 8),
        _r(1, 2, 12, 8),
        9,
        _r(1, 1, 1, 6),
        _r(1, 1, 1, 6),
        _r(1, 4, 1, 9),
        0.35,
        torch.randint(-127, 128, (32, 32), dtype=torch.int8),  # int8 output rows with their scales
        _r(32),
        _r(32),
        _r(32),  # a pre-norm block's layer norm before it, the residual after
        _r(32),
        1e-5,
        1,
        True,
    ),
    "zoo::row_product_cross_attention_token": lambda: (  # 4 query heads of 8 over 2 K/V heads of 10 memory tokens
        _r(1, 1, 32),
        _r(32, 32),
        None,
        _r(32),
        _r(1, 2, 10, 8),
        _r(1, 2, 10, 8),
        torch.rand(1, 1, 1, 10) > 0.3,
        0.35,
        _r(32, 32),
        None,
        None,
        _r(32),  # a pre-norm block's RMS norm before it, the residual after
        None,
        1e-6,
        2,
        True,
    ),
    "zoo::row_product_mlp_token": lambda: (  # SwiGLU, an RMS norm by 1 + w before it, the residual after
        *(_r(1, 1, 32), _r(48, 32), None, _r(48), _r(32, 24), None, None, 2),
        *(_r(32), None, 1e-6, 3, True),
    ),
    "zoo::row_product_rms_norm": lambda: (_r(2, 3, 24), _r(24), 1e-6, False),
    "zoo::row_product_silu_and_mul": lambda: (_r(2, 3, 40),),
    "zoo::row_product_layer_norm": lambda: (_r(2, 3, 24), _r(24), _r(24), 1e-5),
    "zoo::row_product_gelu": lambda: (_r(2, 3, 40), True),
    "zoo::row_product_rope": lambda: (_r(2, 5, 3, 8).transpose(1, 2), _r(1, 1, 5, 6), _r(1, 1, 5, 6)),
    "zoo::row_product_greedy": lambda: (_r(2, 3, 300),),
    "zoo::int4_cpu_int4_q8": lambda: (_r(3, 64), *_int4_weight(), 1, True),
    "zoo::onednn_linear": lambda: (_r(2, 3, 16), _r(8, 16), _r(8)),
    "zoo::int4_cpu_int4_tiles": lambda: (_r(30, 64), *_int4_weight(), 16),
    "zoo::int4_cpu_int4_mm": lambda: (_r(2, 3, 64), *_int4_weight(), 4, 16, 1, False),  # the tiles: 6 rows from 4
    "zoo::cpu_conv_conv_rows": lambda: (_r(B, T, 20), _r(20, 4), _r(20), _r(B, 20, 4)),
    "zoo::cpu_scan_scan": lambda: (
        _r(B, T, 16),
        _r(B, T, 16),
        -_r(16, N).abs(),
        _r(B, T, N),
        _r(B, T, N),
        _r(16),
        _r(B, T, 16),
        None,
        _r(B, 16, N),
    ),
}


def test_every_zoo_op_has_a_case():
    assert {
        cpu_steps.EXTENSION.name,
        cpu_prefill.EXTENSION.name,
        cpu_scan.EXTENSION.name,
        cpu_conv.EXTENSION.name,
        cpu_mamba_step.EXTENSION.name,
        int4_cpu.EXTENSION.name,
        onednn.EXTENSION.name,
    }  # imported: registered
    assert {name for name in registered_ops() if not name.startswith("zoo::rwkv_")} == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_op_passes_opcheck(name):
    namespace, op = name.split("::")
    torch.library.opcheck(getattr(getattr(torch.ops, namespace), op).default, CASES[name]())


def test_the_build_check_carries_the_mark_dynamo_keeps_as_a_constant():
    """``_built`` is marked by hand, as ``torch.compiler.assume_constant_result`` marks a function
    (the decorator imports the compiler stack): the mark must be the decorator's own."""

    def marked() -> bool:
        return True

    torch.compiler.assume_constant_result(marked)
    assert vars(marked) == {cpu_ops.CONSTANT_MARK: True}
    assert getattr(cpu_ops._built, cpu_ops.CONSTANT_MARK) is True


def test_a_command_that_never_compiles_does_not_import_the_compiler_stack():
    """``zoo show`` and ``import zoo`` users load the kernels' declarations, not torch._dynamo
    (about 1.5 s of every command)."""
    code = (
        "import sys\nfrom zoo.cli import main\ntry:\n    main(['show', 'gpt2'])\nexcept SystemExit:\n    pass\n"
        "print('torch._dynamo' in sys.modules, file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "gpt2" in done.stdout and done.stderr.strip().splitlines()[-1] == "False"


def test_an_op_called_before_its_extension_loads_loads_it_and_runs_in_cpp():
    """A graph exported or cached and run in a fresh process calls the op before any layer
    loaded the kernel: the call loads it, and the CPU kernel from then on is the C++ function
    the extension registered with the dispatcher, not a Python function."""
    code = (
        "import torch\nimport torch.nn.functional as F\nfrom zoo.components import row_product\n"
        "name = 'zoo::row_product_row_product'\n"
        "before = torch._C._dispatch_has_kernel_for_dispatch_key(name, 'CPU')\n"
        "w, x, b = torch.randn(24, 40), torch.randn(1, 40), torch.randn(24)\n"
        "out = torch.ops.zoo.row_product_row_product.default(w, x, b, False)\n"
        "torch.testing.assert_close(out, F.linear(x, w, b))\n"
        "after = torch._C._dispatch_has_kernel_for_dispatch_key(name, 'CPU')\n"
        "cpu = torch._C._dispatch_dump(name).split('CPU:')[1].splitlines()[0]\n"
        "print(before, after, 'unboxed' in cpu)"  # a C++ kernel: callable unboxed; a Python one is boxed only
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "True", "True"]
