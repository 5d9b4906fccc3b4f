"""Shared test helpers: tiny versions of every preset, CPU only, deterministic."""

from __future__ import annotations

import pytest
import torch

import zoo
from zoo.specs.model import ModelSpec

TINY_VOCAB = 97

SMALL_MAMBA2 = {  # tiny_spec keeps attention's heads; Mamba2's are its own
    "d_model": 64,
    "n_layers": 2,
    "vocab_size": TINY_VOCAB,
    "attention.n_heads": 4,
    "attention.head_dim": 32,
    "attention.n_groups": 2,
    "attention.state_size": 8,
    "attention.chunk_size": 4,
}


def tiny_spec(name: str, *, window: int = 4, n_layers: int | None = None) -> ModelSpec:
    """The preset shrunk to test size, keeping its structure (kinds, per-layer pattern)."""
    spec = zoo.spec(name)
    attention = spec.attention
    layers = n_layers or (6 if spec.layers and "5::6" in spec.layers else 2)
    updates: dict[str, object] = {
        "d_model": 64,
        "n_layers": layers,
        "vocab_size": TINY_VOCAB,
        "max_seq_len": 64,
    }
    if "n_heads" in attention.options_dict():  # attention (a recurrent mixer has no heads)
        kv = 1 if attention.n_kv_heads == 1 else (4 if attention.kind == "mha" else 2)
        updates.update({"attention.n_heads": 4, "attention.n_kv_heads": kv, "attention.head_dim": 16})
    if "hidden" in spec.ffn.options_dict():
        updates["ffn.hidden"] = 48
    if attention.options_dict().get("window"):
        updates["attention.window"] = window
    if spec.ffn.kind == "moe":
        updates["ffn.n_experts"] = 4
        updates["ffn.top_k"] = 2
    if spec.layers:
        updates["layers"] = {
            key: {**value, "attention": {**value.get("attention", {}), "window": window}}
            if value.get("attention", {}).get("window")
            else value
            for key, value in spec.layers.items()
        }
    return spec.override(updates)


FAMILY_PRESETS = [
    "gpt2",
    "llama-3.2-1b",
    "qwen3-0.6b",
    "qwen3-30b-a3b",
    "gpt-oss-20b",
    "mistral-7b",
    "mixtral-8x7b",
    "gemma-3-270m",
    "mamba-130m",
]


@pytest.fixture(autouse=True)
def _deterministic() -> None:
    torch.manual_seed(0)


@pytest.fixture(autouse=True, scope="session")
def _private_zoo_cache(tmp_path_factory: pytest.TempPathFactory):
    """`zoo list` caches its table; tests (and the commands they start) use a cache of their own."""
    import os

    previous = os.environ.get("ZOO_CACHE_DIR")
    os.environ["ZOO_CACHE_DIR"] = str(tmp_path_factory.mktemp("zoo-cache"))
    _seed_host_peaks()
    yield
    if previous is None:
        os.environ.pop("ZOO_CACHE_DIR", None)
    else:
        os.environ["ZOO_CACHE_DIR"] = previous


FIXED_HOST_BANDWIDTH = 20e9  # bytes/s: what every CPU row's roofline fraction divides by in tests
FIXED_HOST_FLOPS = {"float32": 100e9, "bfloat16": 200e9, "float16": 50e9}


def _seed_host_peaks() -> None:
    """Fixed host peaks in the private cache for every thread count a test may set, so that no
    run in a test (nor a command it starts) spends seconds probing the machine, and every CPU
    row's roofline fraction is a deterministic function of its measured rate."""
    import json
    import os

    from zoo.analysis import host_machine, host_probe
    from zoo.files.cache import cache_dir

    entries = {}
    for threads in range(1, max(8, os.cpu_count() or 1) + 1):
        described = {**host_machine.machine(), "threads": threads}
        key = host_machine.fingerprint(described)
        peaks = host_probe.HostPeaks(
            key, described, FIXED_HOST_BANDWIDTH, {"float32": FIXED_HOST_BANDWIDTH}, dict(FIXED_HOST_FLOPS), 0, 0.0
        )
        entries[key] = peaks.to_json()
    (cache_dir() / host_probe.CACHE_FILE).write_text(json.dumps(entries))
