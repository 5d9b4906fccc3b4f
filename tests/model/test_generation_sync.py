"""Prefill and decode of unpadded prompts never wait for the device.

A host sync (``.item()``, ``.tolist()``, ``bool``/``int``/``float`` of a tensor) in the
prefill path costs a full device round trip on a GPU and stops the host queueing work
ahead. On the CPU there is no device to wait for, so these conversions are made to fail
instead; on CUDA ``torch.cuda.set_sync_debug_mode("error")`` checks the real thing.
"""

from __future__ import annotations

from contextlib import contextmanager
from unittest import mock

import pytest
import torch

import zoo
from tests.conftest import tiny_spec
from tests.model.test_generation import MIXERS, mixer_model
from tests.model.test_generation_compile_kernels import mixers_with_kernels
from zoo.components.kernels import preferring
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, prefill

FAMILIES = ["llama-3.2-1b", "qwen3-0.6b", "gpt-oss-20b", "qwen3-30b-a3b", "gemma-3-270m", "gpt2", "mpt-7b"]
CONVERSIONS = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__")


@contextmanager
def no_tensor_to_host():
    """Every tensor-to-Python conversion raises inside the block."""

    def refuse(*args, **kwargs):
        raise AssertionError("a host sync: a tensor converted to a Python value")

    with mock.patch.multiple(torch.Tensor, **{name: refuse for name in CONVERSIONS}):
        yield


@pytest.mark.parametrize("name", FAMILIES)
def test_prefill_and_decode_convert_no_tensor_to_python(name):
    model = zoo.build(tiny_spec(name), dtype="float32", seed=0).eval()
    cache = KVCache(model, 2, 16)
    ids = torch.randint(0, 97, (2, 7))
    with no_tensor_to_host():
        logits = prefill(model, ids, cache)
        token = logits.argmax(-1, keepdim=True)  # (B, 1)
        decode_step(model, token, cache)
    assert cache.length == 8


@pytest.mark.parametrize("convert", [lambda t: t.item(), bool, int, float, lambda t: t.tolist(), lambda t: [0, 1][t]])
def test_the_guard_catches_a_conversion(convert):
    with no_tensor_to_host(), pytest.raises(AssertionError, match="host sync"):
        convert(torch.ones((), dtype=torch.long))


def test_the_guard_catches_the_padding_checks():
    """A left-padding mask is checked on the host (documented): the guard sees it."""
    model = zoo.build(tiny_spec("llama-3.2-1b"), dtype="float32", seed=0).eval()
    with no_tensor_to_host(), pytest.raises(AssertionError, match="host sync"):
        prefill(model, torch.ones(1, 3, dtype=torch.long), KVCache(model, 1, 8), attention_mask=torch.ones(1, 3))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", ["llama-3.2-1b", "qwen3-30b-a3b", "mpt-7b"])
def test_cuda_prefill_and_decode_do_not_synchronize(name):
    model = zoo.build(tiny_spec(name), dtype="bfloat16", device="cuda", seed=0).eval()
    cache = KVCache(model, 1, 16)
    ids = torch.randint(0, 97, (1, 7), device="cuda")
    prefill(model, ids, cache)  # warm-up: first calls may load kernels
    cache.reset()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        token = prefill(model, ids, cache).argmax(-1, keepdim=True)  # (1, 1)
        decode_step(model, token, cache)
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.parametrize("name", [*MIXERS, "every mixer with a kernel"])
def test_recurrent_reference_paths_convert_no_tensor_to_python(name):
    """The reference paths are what a GPU without mamba-ssm or fla runs (the CPU's C++ steps
    are not taken there): they too must queue work without waiting for the device. The last
    case stacks Mamba, Mamba2, Gated DeltaNet, linear and Infini layers."""
    if name in MIXERS:
        with preferring("reference"):
            model = mixer_model(name)
    else:
        model = mixers_with_kernels("reference")
    cache = KVCache(model, 2, 16)
    ids = torch.randint(0, 50, (2, 7))
    with torch.no_grad(), no_tensor_to_host():
        logits = prefill(model, ids, cache)
        decode_step(model, logits.argmax(-1, keepdim=True), cache)
    assert cache.length == 8
