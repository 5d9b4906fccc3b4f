"""`zoo show` says what each state tensor is stored as; the reference is transformers' own
cache for the same config (its conv and recurrent state tensors' dtypes after a forward)."""

from __future__ import annotations

import json

import pytest
import torch
import transformers

from zoo.cli import main

MAMBA = {
    "model_type": "mamba",
    "vocab_size": 64,
    "hidden_size": 32,
    "state_size": 8,
    "num_hidden_layers": 2,
    "conv_kernel": 4,
    "expand": 2,
    "architectures": ["MambaForCausalLM"],
}


def show(capsys, *args: str) -> dict:
    assert main(["show", *args, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)["analysis"]


def transformers_state_dtypes(dtype: torch.dtype) -> dict[str, str]:
    fields = {k: v for k, v in MAMBA.items() if k not in ("model_type", "architectures")}
    model = transformers.MambaForCausalLM(transformers.MambaConfig(**fields)).to(dtype).eval()
    with torch.no_grad():
        cache = model(torch.tensor([[1, 2, 3]]), use_cache=True).cache_params
    layer = cache.layers[0]
    return {
        "attention.conv": str(layer.conv_states[0].dtype).removeprefix("torch."),
        "attention.ssm": str(layer.recurrent_states[0].dtype).removeprefix("torch."),
    }


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_state_dtypes_are_those_transformers_allocates(tmp_path, capsys, dtype):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(MAMBA))
    shown = show(capsys, "--hf-config", str(config))["state_dtypes"]
    assert shown[str(dtype).removeprefix("torch.")] == transformers_state_dtypes(dtype)


def test_mamba_130m_keeps_its_ssm_state_in_float32_and_the_conv_window_in_the_model_dtype(capsys):
    shown = show(capsys, "mamba-130m")
    assert shown["state_dtypes"]["bfloat16"] == {"attention.conv": "bfloat16", "attention.ssm": "float32"}
    assert shown["state_dtypes"]["float32"] == {"attention.conv": "float32", "attention.ssm": "float32"}


def test_state_dtype_cache_stores_the_ssm_state_in_the_model_dtype(capsys):
    shown = show(capsys, "mamba-130m", "--set", "state_dtype=cache")
    assert shown["state_dtypes"]["bfloat16"] == {"attention.conv": "bfloat16", "attention.ssm": "bfloat16"}
    # hand count: 24 layers x (conv 1536 x 4 + ssm 1536 x 16), 2 bytes each
    assert shown["state_bytes_per_sequence"]["bfloat16"] == 24 * (1536 * 4 + 1536 * 16) * 2


def test_a_hybrid_lists_its_kv_and_recurrent_state(capsys):
    shown = show(capsys, "qwen3-next-80b-a3b")["state_dtypes"]["bfloat16"]
    assert shown == {
        "attention.conv": "bfloat16",
        "attention.recurrent": "float32",
        "attention.k": "bfloat16",
        "attention.v": "bfloat16",
    }


def test_the_yaml_comments_carry_the_state_dtypes(capsys):
    assert main(["show", "mamba-130m"]) == 0
    out = capsys.readouterr().out
    assert "#     attention.ssm: float32" in out
