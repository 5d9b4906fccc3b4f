"""The Mamba mixer against transformers' MambaMixer (its pure-PyTorch path) and a plain loop."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from zoo.components.mamba import MambaMixer, MambaOptions
from zoo.components.mamba_scan import chunk_length, selective_scan
from zoo.specs.state import LayerState

D_MODEL, D_STATE, D_CONV = 32, 8, 4


def _fresh_state(mixer: MambaMixer, batch: int, token_valid: torch.Tensor | None = None) -> LayerState:
    tensors = {name: torch.zeros(t.shape, dtype=t.dtype) for name, t in mixer.state_layout(batch, 64).items()}
    return LayerState(tensors, torch.arange(1), None, 64, token_valid=token_valid)


def _hf_pair(falcon: bool = False):  # type: ignore[no-untyped-def]
    transformers = pytest.importorskip("transformers")
    if falcon:
        from transformers.models.falcon_mamba.modeling_falcon_mamba import FalconMambaMixer as Reference

        config = transformers.FalconMambaConfig(
            hidden_size=D_MODEL,
            state_size=D_STATE,
            conv_kernel=D_CONV,
            num_hidden_layers=1,
            vocab_size=50,
            use_associative_scan=False,
            mixer_rms_eps=1e-6,
        )
    else:
        from transformers.models.mamba.modeling_mamba import MambaMixer as Reference

        config = transformers.MambaConfig(
            hidden_size=D_MODEL,
            state_size=D_STATE,
            conv_kernel=D_CONV,
            num_hidden_layers=1,
            vocab_size=50,
            use_associative_scan=False,
        )
    torch.manual_seed(0)
    options = MambaOptions(d_state=D_STATE, d_conv=D_CONV, bcdt_norm_eps=1e-6 if falcon else None)
    ours = MambaMixer(options, SimpleNamespace(d_model=D_MODEL, role="decoder", state_dtype=torch.float32))  # type: ignore[arg-type]
    with torch.no_grad():
        for name, param in ours.named_parameters():
            if name in ("in_proj.weight", "x_proj.weight", "out_proj.weight"):
                param.normal_(std=0.2)
            else:
                param.add_(0.1 * torch.randn_like(param))  # no parameter left at a special value
    # transformers' own init of FalconMambaMixer fails (it touches norms made after it runs)
    reference = Reference(config, 0, initialize_mixer_weights=False).eval()
    reference.load_state_dict(ours.state_dict(), strict=True)
    return reference, ours


@pytest.mark.parametrize("falcon", [False, True], ids=["mamba", "falcon_mamba"])
@pytest.mark.parametrize("length", [1, 7, 37])
def test_full_sequence_matches_transformers(falcon, length):
    reference, ours = _hf_pair(falcon)
    x = torch.randn(2, length, D_MODEL)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), reference(x), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("falcon", [False, True], ids=["mamba", "falcon_mamba"])
def test_prefill_then_steps_match_transformers_full_sequence(falcon):
    reference, ours = _hf_pair(falcon)
    x = torch.randn(2, 30, D_MODEL)
    state = _fresh_state(ours, 2)
    with torch.no_grad():
        expected = reference(x)
        outputs = [ours(x[:, :21], None, state), ours(x[:, 21:23], None, state)]  # two chunks
        outputs += [ours(x[:, t : t + 1], None, state) for t in range(23, 30)]  # then single steps
    torch.testing.assert_close(torch.cat(outputs, dim=1), expected, atol=1e-4, rtol=1e-4)


def test_left_padding_leaves_the_state_untouched():
    _, ours = _hf_pair()
    x = torch.randn(1, 6, D_MODEL)
    padded = torch.cat((torch.randn(1, 3, D_MODEL), x), dim=1)  # three padding tokens first
    valid = torch.tensor([[False] * 3 + [True] * 6])
    alone, with_pads = _fresh_state(ours, 1), _fresh_state(ours, 1, valid)
    with torch.no_grad():
        expected = ours(x, None, alone)
        got = ours(padded, None, with_pads)[:, 3:]
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    for name in ("conv", "ssm"):
        torch.testing.assert_close(with_pads.tensors[name], alone.tensors[name], atol=1e-6, rtol=1e-6)


def _loop_scan(x, dt, A, B, C, h):  # type: ignore[no-untyped-def]
    ys = []
    for t in range(x.shape[1]):
        h = torch.exp(dt[:, t, :, None] * A) * h + (dt[:, t] * x[:, t])[..., None] * B[:, t, None, :]
        ys.append((h * C[:, t, None, :]).sum(-1))
    return torch.stack(ys, dim=1), h


@pytest.mark.parametrize("chunk", [1, 3, 8, 64, 256])
def test_chunked_scan_equals_the_recurrence_even_with_huge_steps(chunk):
    """Steps of dt·|A| up to ~200 per token: a sum-of-logs form would overflow float32."""
    torch.manual_seed(1)
    batch, T, d, N = 2, 21, 6, 5
    x, B, C = torch.randn(batch, T, d), torch.randn(batch, T, N), torch.randn(batch, T, N)
    dt = torch.rand(batch, T, d) * torch.tensor([0.01, 20.0])[torch.randint(0, 2, (batch, T, 1))]
    A = -torch.rand(d, N) * 10
    h0 = torch.randn(batch, d, N)
    y, h = selective_scan(x, dt, A, B, C, h0, chunk)
    y_ref, h_ref = _loop_scan(x, dt, A, B, C, h0)
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y, y_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(h, h_ref, atol=1e-5, rtol=1e-5)


def test_chunks_stay_in_cache():
    assert chunk_length(1, 1536, 16) == 4  # mamba-130m
    assert chunk_length(1, 64, 8) == 64  # tiny: capped
    assert chunk_length(64, 1536, 16) == 4  # large batches: floor


def test_gpu_chunks_are_long_while_a_chunk_tensor_stays_within_64_mib():
    """A GPU is launch-bound, not cache-bound: mamba-130m's 2,048-token prefill is 8 chunks
    per layer instead of 512; a large model at batch 8 still keeps its chunk tensors small."""
    cuda = torch.device("cuda")
    assert chunk_length(1, 1536, 16, cuda) == 256  # mamba-130m
    assert chunk_length(8, 5120, 16, cuda) == 16  # mamba-2.8b at batch 8: 16·8·5120·16 floats = 40 MiB
    assert chunk_length(1, 1536, 16, torch.device("cpu")) == 4


def test_the_scan_trains_gradients_equal_the_recurrence():
    torch.manual_seed(2)
    batch, T, d, N = 2, 11, 5, 3
    inputs = [
        torch.randn(batch, T, d),
        torch.rand(batch, T, d),
        -torch.rand(d, N),
        torch.randn(batch, T, N),
        torch.randn(batch, T, N),
    ]
    ours = [t.clone().requires_grad_() for t in inputs]
    loop = [t.clone().requires_grad_() for t in inputs]
    y, _ = selective_scan(*ours, None, 4)
    y_ref, _ = _loop_scan(*loop, torch.zeros(batch, d, N))
    y.square().sum().backward()
    y_ref.square().sum().backward()
    for a, b in zip(ours, loop):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-5, rtol=1e-5)


def test_the_decay_is_kept_between_tokens_and_follows_every_change_of_a_log():
    """``decay`` (-exp(A_log), which each decode step reads) is made once, and made anew after an
    in-place write, a ``load_state_dict``, a new parameter or a dtype move; under autograd it is
    made each call, so gradients reach A_log."""
    _, mixer = _hf_pair()
    expected = lambda: -torch.exp(mixer.A_log.detach().float())
    with torch.no_grad():
        first = mixer.decay()
        assert mixer.decay() is first and torch.equal(first, expected())
        mixer.A_log.add_(0.5)
        assert torch.equal(mixer.decay(), expected())
        state = {k: v.clone() for k, v in mixer.state_dict().items()}
        state["A_log"] = state["A_log"] - 1.0
        mixer.load_state_dict(state)
        assert torch.equal(mixer.decay(), expected())
        mixer.A_log = torch.nn.Parameter(torch.zeros_like(mixer.A_log))
        assert torch.equal(mixer.decay(), -torch.ones_like(mixer.A_log))
        mixer.to(torch.float64)
        assert mixer.decay().dtype == torch.float32 and torch.equal(mixer.decay(), expected())
    mixer.to(torch.float32)
    mixer.decay().sum().backward()
    assert mixer.A_log.grad is not None and torch.equal(mixer.A_log.grad, expected())
