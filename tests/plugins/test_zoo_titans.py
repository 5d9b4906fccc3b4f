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
    assert set(info.components) == {("attention", "titans-mal"), ("attention", "titans-mag")}
    assert set(info.architectures) == {"titans", "titans-mal"}


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
    """The memory's state per sequence and layer: 16 heads x (128x256 + 256x128) floats x 3 sets
    (weights, momentum, chunk anchor) x 4 bytes + the conv window 6144 x 3 in the cache dtype: the same at
    every context, beside GQA's K/V that grows with it."""
    args = ["compare", "--arch", "qwen3-0.6b", "--vary", "attention.kind=gqa,titans-mal", "--contexts", "4k,32k",
            "--analysis-only", "--format", "json"]
    assert main(args) == 0
    rows = json.loads(capsys.readouterr().out)
    rows = rows["rows"] if isinstance(rows, dict) else rows
    state = 28 * (16 * 2 * 128 * 256 * 3 * 4 + 6144 * 3 * 4)  # compare counts the cache in float32
    titans = [r for r in rows if "titans" in json.dumps(r)]
    assert titans and all(state in r.values() for r in titans), titans[0]
