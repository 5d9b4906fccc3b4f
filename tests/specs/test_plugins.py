"""Entry-point plugins through the real machinery: fake installed distributions.

In-process tests put the fake distributions on sys.path (importlib.metadata finds their
dist-info there, exactly as for an installed package) and call the CLI's ``main``; one
end-to-end test runs ``python -m zoo`` in a subprocess. Nothing is installed in the venv.
"""

import json
import os
import subprocess
import sys

import pytest

from tests.fake_plugins import BROKEN, REPO, add_fake_plugin, kind_plugin, run_zoo
from zoo.cli import main
from zoo.errors import PluginConflictError, PluginWarning
from zoo.specs import plugins as plugin_loading
from zoo.specs.registry import get_registry, reset_registry

BROKEN_LINE = (
    "zoo: warning: plugin 'broken' (broken-plugin) skipped: "
    "import failed: RuntimeError: this plugin is broken on purpose"
)


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A directory of fake distributions on sys.path; the registry is rebuilt around the test."""
    path = tmp_path / "site"
    path.mkdir()
    monkeypatch.syspath_prepend(str(path))
    monkeypatch.delenv("ZOO_PLUGINS", raising=False)
    monkeypatch.setattr(plugin_loading, "_reported", set())
    before = set(sys.modules)
    reset_registry()
    yield path
    for name in set(sys.modules) - before:
        if sys.modules[name] is not None and str(getattr(sys.modules[name], "__file__", "")).startswith(str(path)):
            del sys.modules[name]
    reset_registry()


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_broken_plugin_is_skipped_and_reported_once_in_one_line(site, capsys):
    add_fake_plugin(site, "broken-plugin", "broken", "broken_plugin", BROKEN)
    add_fake_plugin(site, "good-plugin", "good", "good_plugin", kind_plugin("goodnorm"))
    code, out, err = run(capsys, "show", "gpt2", "--set", "norm.kind=goodnorm")
    assert code == 0 and "kind: goodnorm" in out
    assert err.splitlines() == [BROKEN_LINE]
    reset_registry()  # a rebuilt registry records the failure again but does not repeat the report
    code, out, err = run(capsys, "list", "--format", "json")
    assert code == 0 and err == ""
    assert "goodnorm" in json.loads(out)["components"]["norm"]
    assert [f.name for f in get_registry().failures] == ["broken"]


def test_zoo_plugins_lists_versions_what_each_registers_and_failures(site, capsys):
    add_fake_plugin(site, "broken-plugin", "broken", "broken_plugin", BROKEN)
    add_fake_plugin(site, "good-plugin", "good", "good_plugin", kind_plugin("goodnorm"), version="2.3.4")
    code, out, err = run(capsys, "plugins", "--json")
    assert code == 0 and err == ""  # the failure is reported once: in the document, not also as a warning
    report = json.loads(out)
    good = next(p for p in report["plugins"] if p["name"] == "good")
    assert good == {
        "name": "good",
        "version": "2.3.4",
        "source": "entry point",
        "distribution": "good-plugin",
        "components": {"norm": ["goodnorm"]},
        "architectures": [],
        "checkpoint_formats": [],
        "overridden": [],
    }
    assert {p["name"] for p in report["plugins"]} >= {"zoo.archs", "zoo.components.attention", "good"}
    assert report["failures"] == [
        {
            "name": "broken",
            "distribution": "broken-plugin",
            "error": "import failed: RuntimeError: this plugin is broken on purpose",
        }
    ]
    code, out, _ = run(capsys, "plugins")
    assert code == 0 and "goodnorm" in out and "2.3.4" in out and "skipped plugin" in out


def test_two_plugins_claiming_one_kind_fail_naming_both(site, capsys, monkeypatch):
    add_fake_plugin(site, "conflict-a", "first", "conflict_a", kind_plugin("samenorm"))
    add_fake_plugin(site, "conflict-b", "second", "conflict_b", kind_plugin("samenorm"))
    code, out, err = run(capsys, "show", "gpt2")
    assert code == 2 and out == ""
    assert err.count("\n") == 1, err  # one line, no traceback
    assert "'first' (conflict-a 0.1)" in err and "'second' (conflict-b 0.1)" in err
    assert "override=True" in err and "ZOO_PLUGINS" in err
    with pytest.raises(PluginConflictError):  # still failing, not half-loaded, on the next use
        get_registry()
    monkeypatch.setenv("ZOO_PLUGINS", "second")  # choosing one resolves it
    reset_registry()
    assert get_registry().component("norm", "samenorm").plugin == "second"


def test_the_plugin_asking_to_override_wins_whichever_loads_first(site, capsys):
    add_fake_plugin(site, "aaa-override", "aaa", "aaa_override", kind_plugin("rmsnorm", override=True))
    code, out, _ = run(capsys, "plugins", "--json")
    assert code == 0
    plugins = {p["name"]: p for p in json.loads(out)["plugins"]}
    assert {"family": "norm", "kind": "rmsnorm", "by": "aaa"} in plugins["zoo.components.norms"]["overridden"]
    assert get_registry().component("norm", "rmsnorm").replaces == "zoo.components.norms"


def test_zoo_plugins_env_chooses_and_empty_loads_none(site, monkeypatch):
    add_fake_plugin(site, "good-plugin", "good", "good_plugin", kind_plugin("goodnorm"))
    add_fake_plugin(site, "other-plugin", "other", "other_plugin", kind_plugin("othernorm"))

    def norms(chosen: str | None) -> set[str]:
        if chosen is None:
            monkeypatch.delenv("ZOO_PLUGINS", raising=False)
        else:
            monkeypatch.setenv("ZOO_PLUGINS", chosen)
        reset_registry()
        return set(get_registry().kinds("norm")) & {"goodnorm", "othernorm"}

    assert norms(None) == {"goodnorm", "othernorm"}
    assert norms("good") == {"goodnorm"}
    assert norms(" other , ") == {"othernorm"}
    assert norms("") == set()
    with pytest.warns(PluginWarning, match="'nosuch' skipped: ZOO_PLUGINS names it but no such plugin is installed"):
        assert norms("good,nosuch") == {"goodnorm"}


def test_end_to_end_broken_plugin_in_a_fresh_process(site):
    add_fake_plugin(site, "broken-plugin", "broken", "broken_plugin", BROKEN)
    result = run_zoo(["show", "gpt2", "--format", "json"], site)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["spec"]["name"] == "gpt2"
    assert [line for line in result.stderr.splitlines() if "broken" in line] == [BROKEN_LINE]


def test_help_imports_neither_torch_nor_any_plugin(site):
    add_fake_plugin(site, "good-plugin", "good", "good_plugin", kind_plugin("goodnorm"))
    probe = (
        "import sys, contextlib, io\n"
        "from zoo.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try: main(['--help'])\n"
        "    except SystemExit: pass\n"
        "print(sorted(m for m in ('torch', 'good_plugin', 'zoo_mla', 'zoo.specs.registry') if m in sys.modules))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


# ---- hostile plugins (issue 17): each is reported in one line and skipped ----------------------
HOSTILE = {
    "exits": ("import sys\nsys.exit(0)\n", "import failed: SystemExit: 0"),
    "baseexc": ("class Boom(BaseException):\n    pass\nraise Boom('at import')\n", "import failed: Boom: at import"),
    "hookexit": (
        "import sys, zoo\n@zoo.hookimpl\ndef zoo_register_components(register):\n    sys.exit(3)\n",
        "zoo_register_components raised SystemExit: 3",
    ),
    "plainopts": (
        "import pydantic, zoo\nfrom zoo.components.norms import build_rmsnorm\n"
        "class Opts(pydantic.BaseModel):\n    eps: float = 1e-6\n"
        "@zoo.hookimpl\ndef zoo_register_components(register):\n"
        "    register('norm', 'plainnorm', build_rmsnorm, options=Opts)\n",
        "options of norm kind 'plainnorm' must be a subclass of zoo.parts.Options",
    ),
    "badsig": (
        "import zoo\n@zoo.hookimpl\ndef zoo_register_components(register, extra):\n    pass\n",
        "its hooks do not match zoo's hookspecs",
    ),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_plugins_are_skipped_with_one_line(site, capsys, name):
    source, message = HOSTILE[name]
    add_fake_plugin(site, f"{name}-plugin", name, f"{name}_plugin", source)
    code, out, err = run(capsys, "list", "--format", "json")
    assert code == 0 and "gpt2" in {row["name"] for row in json.loads(out)["architectures"]}
    assert len(err.splitlines()) == 1 and message in err and f"plugin {name!r}" in err, err


ARCH_PLUGINS = {
    "raises": (
        "import zoo\ndef bad():\n    raise RuntimeError('factory boom')\n"
        "@zoo.hookimpl\ndef zoo_register_architectures(register):\n    register('boom-arch', bad)\n",
        "boom-arch",
        "its factory raised RuntimeError: factory boom",
    ),
    "invalid": (
        "import zoo\n@zoo.hookimpl\ndef zoo_register_architectures(register):\n"
        "    register('bad-arch', {'vocab_size': 0})\n",
        "bad-arch",
        "is not a valid spec: vocab_size",
    ),
    "exits": (
        "import sys, zoo\n@zoo.hookimpl\ndef zoo_register_architectures(register):\n"
        "    register('exit-arch', lambda: sys.exit(0))\n",
        "exit-arch",
        "its factory raised SystemExit",
    ),
}


@pytest.mark.parametrize("name", sorted(ARCH_PLUGINS))
def test_broken_plugin_architectures_leave_zoo_list_working(site, capsys, name):
    source, arch, message = ARCH_PLUGINS[name]
    add_fake_plugin(site, f"{name}-plugin", name, f"{name}_plugin", source)
    code, out, err = run(capsys, "list", "--format", "json")
    assert code == 0 and "gpt2" in {row["name"] for row in json.loads(out)["architectures"]}
    assert len(err.splitlines()) == 1 and f"architecture {arch!r} of plugin {name!r}" in err and message in err
    code, out, err = run(capsys, "show", arch)
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and f"architecture {arch!r} of plugin {name!r}" in err


def test_a_plugin_exiting_at_import_does_not_end_the_command(site):
    add_fake_plugin(site, "exits-plugin", "exits", "exits_plugin", HOSTILE["exits"][0])
    result = run_zoo(["show", "gpt2", "--format", "json"], site)
    assert result.returncode == 0 and json.loads(result.stdout)["spec"]["name"] == "gpt2"
    assert [line for line in result.stderr.splitlines() if "exits" in line] == [
        "zoo: warning: plugin 'exits' (exits-plugin) skipped: import failed: SystemExit: 0"
    ]
