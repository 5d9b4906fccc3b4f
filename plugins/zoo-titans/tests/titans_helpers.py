"""zoo-titans made loadable through its entry point without installing it; tiny specs.

Not a conftest.py: zoo-mla's tests import theirs as the top-level module ``conftest``, and a
second one would take its place in ``sys.modules`` when both run in one session. Test
modules import what they use from here (the autouse fixture included).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from zoo.specs.staging import stage_plugin

stage_plugin(Path(__file__).resolve().parents[1])  # a temporary entry point, the environment untouched

import zoo
from zoo.specs.model import ModelSpec
from zoo.specs.registry import reset_registry

reset_registry()  # in case the registry was built before the staging

TINY_VOCAB = 50


def tiny(kind: str = "titans-mag", **attention: object) -> ModelSpec:
    """A 2-layer model at test size whose attention is the Titans ``kind``."""
    options = {"kind": kind, "n_heads": 2, "head_dim": 8, "chunk_size": 4, **attention}
    if kind == "titans-mag":
        options = {"window": 6, "n_kv_heads": 1, **options}
    if kind == "titans-mac":  # the memory's chunk is the segment
        options = {"segment_len": options["chunk_size"], "n_kv_heads": 1, "n_persistent": 2, **options}
    return zoo.spec("titans").override(
        {
            "d_model": 32,
            "n_layers": 2,
            "vocab_size": TINY_VOCAB,
            "max_seq_len": 64,
            "ffn.hidden": 48,
            "attention": options,
        }
    )


@pytest.fixture(autouse=True)
def _deterministic() -> None:
    torch.manual_seed(0)
