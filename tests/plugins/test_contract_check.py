"""`zoo plugins --check`: the three plugins in plugins/ pass; a plugin staged with a
mislabelled state declaration and one whose decode ignores its state fail, one line each."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from zoo.cli import main
from zoo.specs.registry import reset_registry
from zoo.specs.staging import stage_plugin

PYPROJECT = """[project]
name = "zoo-misdeclared"
version = "0.0.1"
[project.entry-points.zoo]
misdeclared = "zoo_misdeclared"
"""  # not "broken": tests/specs/test_plugins.py stages a plugin of that name in the same process


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> None:
    root = tmp_path_factory.mktemp("zoo-misdeclared")
    (root / "pyproject.toml").write_text(PYPROJECT)
    shutil.copy(Path(__file__).with_name("broken_plugin.py"), root / "zoo_misdeclared.py")
    stage_plugin(root)
    reset_registry()


def test_a_broken_plugin_fails_one_line_per_defect(broken, capsys):
    assert main(["plugins", "--check", "misdeclared"]) == 2
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2, lines
    mislabelled, forgetful = sorted(lines, key=lambda line: "forgetful" in line)
    assert mislabelled.startswith(
        "misdeclared: attention kind 'mislabelled': layers.0.attention: state 'sum' declared per token"
    )
    assert forgetful.startswith(
        "misdeclared: attention kind 'forgetful': prefill + cached decode differs from the full forward"
    )


@pytest.mark.parametrize("plugin", ["mla", "rwkv", "titans"])
def test_the_plugins_pass(plugin, zoo_mla, zoo_rwkv, zoo_titans, capsys):
    """Every kind at its declared tiny sizes (Options.tiny): about a second per plugin."""
    assert main(["plugins", "--check", plugin]) == 0, capsys.readouterr().out
    assert capsys.readouterr().out.strip() == f"contract check passed: {plugin}"


def test_tiny_sizes_come_from_the_kinds(zoo_mla):
    """The check's model of DeepSeek-V2-Lite: each component (and layer 0's dense SwiGLU)
    shrunk by its kind's own tiny values; options the preset leaves null stay null."""
    from zoo.harness.contract_check import subjects
    from zoo.specs.registry import get_registry

    spec = next(s.spec for s in subjects(get_registry().plugins["mla"]) if s.kind == "mla").to_dict()
    assert (spec["d_model"], spec["n_layers"], spec["vocab_size"]) == (64, 2, 64)
    assert {k: spec["attention"][k] for k in ("n_heads", "q_lora_rank", "kv_lora_rank", "v_head_dim")} == {
        "n_heads": 4,
        "q_lora_rank": None,
        "kv_lora_rank": 16,
        "v_head_dim": 8,
    }
    assert (spec["ffn"]["n_experts"], spec["ffn"]["top_k"], spec["ffn"]["hidden"]) == (4, 2, 32)
    assert spec["layers"]["0"]["ffn"]["hidden"] == 128


def test_an_unknown_plugin_is_one_line(capsys):
    assert main(["plugins", "--check", "nope"]) == 2
    assert "no plugin 'nope'" in capsys.readouterr().err
