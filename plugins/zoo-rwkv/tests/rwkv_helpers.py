"""Tiny RWKV checkpoints and fixtures for the plugin's tests; importing this module makes
zoo-rwkv importable without installing it.

Not a conftest.py: zoo-mla's tests import theirs as the top-level module ``conftest``, and a
second one would take its place in ``sys.modules`` when both run in one session. Test
modules import what they use from here (fixtures included).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from zoo.specs.staging import stage_plugin

stage_plugin(
    Path(__file__).resolve().parents[1]
)  # zoo finds plugins through entry points: a temporary one, the environment untouched

from zoo.specs.registry import reset_registry

reset_registry()  # in case the registry was built before the staging

TINY = {
    "vocab_size": 97,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "context_length": 80,
    "attention_hidden_size": 32,
    "intermediate_size": 80,
}


@pytest.fixture(autouse=True)
def deterministic() -> None:
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """(transformers model, its folder, zoo's model loaded from it) for the default tiny config
    with ``rescale_every=1`` (so layer 1 is rescaled), built once per session."""
    import zoo

    hf, folder = hf_rwkv(tmp_path_factory.mktemp("rwkv"), rescale_every=1)
    return hf, folder, zoo.from_pretrained(folder, progress=False)


def hf_rwkv(tmp_path: Path, **updates: object):  # type: ignore[no-untyped-def]
    """A tiny transformers RwkvForCausalLM with random weights, saved in tmp_path; (model, folder)."""
    transformers = pytest.importorskip("transformers")
    config = transformers.RwkvConfig(**{**TINY, **updates})
    torch.manual_seed(0)
    model = transformers.RwkvForCausalLM(config).eval()
    with torch.no_grad():  # transformers' init leaves some tensors at 1 or 0: make every one count
        for name, p in model.named_parameters():
            if "time_decay" in name or "time_first" in name:
                p.copy_(torch.randn_like(p))
            elif "time_mix" in name:
                p.uniform_(0, 1)
            elif "ln" in name:
                p.copy_(p + 0.1 * torch.randn_like(p))
            else:
                p.normal_(0, 0.3)
    folder = tmp_path / "rwkv"
    model.save_pretrained(folder)
    return model, folder
