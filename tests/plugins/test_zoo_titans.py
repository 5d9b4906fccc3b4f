"""The out-of-tree zoo-titans plugin through its entry point: kinds, presets, public-API-only
imports, and `zoo compare` counting the memory's weights as per-sequence state."""

import ast
import json

import pytest

from zoo.cli import main
from zoo.specs.registry import get_registry

from .conftest import ZOO_TITANS
from .test_zoo_rwkv import PUBLIC


@pytest.fixture(autouse=True)
def _installed(zoo_titans):
    return zoo_titans


def test_the_plugin_arrives_through_its_entry_point():
    info = get_registry().plugins["titans"]
    assert (info.source, info.distribution, info.version) == ("entry point", "zoo-titans", "0.1.0")
    assert set(info.components) == {
        ("attention", "titans-mal"),
        ("attention", "titans-mag"),
        ("attention", "titans-mac"),
    }
    assert set(info.architectures) == {"titans", "titans-mal", "titans-mac"}


def test_the_plugin_imports_public_zoo_api_only():
    for path in sorted((ZOO_TITANS / "zoo_titans").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                if name == "zoo" or name.startswith("zoo."):
                    assert name in PUBLIC, f"{path.name} imports {name}"


def test_compare_shows_the_memory_as_state(capsys):
    """Issue 29's command. titans-mac's state per sequence and layer, by hand: the memory, 16 heads x
    (128x256 + 256x128) floats x 3 sets (weights, momentum, the segment's first weights) x 4 bytes, its conv
    window 6144 x 3, and the segment's K/V, 2 x 8 heads x 1024 slots (512 retrieved + 512 own) x 128, in the
    cache dtype (compare counts float32): the same at every context, where GQA's K/V grows with it."""
    args = [
        "compare",
        "--arch",
        "qwen3-0.6b",
        "--vary",
        "attention.kind=gqa,titans-mac,mamba2",
        "--contexts",
        "4k,32k,128k",
        "--analysis-only",
        "--format",
        "json",
    ]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    layer = 16 * 2 * 128 * 256 * 3 * 4 + 6144 * 3 * 4 + 2 * 8 * 1024 * 128 * 4
    rows = {row["attention.kind"]: row for row in out["rows"]}
    assert rows["titans-mac"]["state_bytes"] == 28 * layer == 589_266_944
    assert rows["titans-mac"]["kv_bytes_per_token"] == 0
    memory = {(c["attention.kind"], c["context"]): c for c in out["contexts"]}
    assert {memory[("titans-mac", n)]["cache_bytes"] for n in (4096, 32768, 131072)} == {28 * layer}
    gqa = [memory[("gqa", n)]["cache_bytes"] for n in (4096, 32768, 131072)]
    assert gqa == [28 * 2 * 8 * 128 * 4 * n for n in (4096, 32768, 131072)]
