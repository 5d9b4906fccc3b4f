"""Issue 18: tables, formats and plain text of the installed `zoo` read through pipes."""

from __future__ import annotations

import csv
import io
import json
import subprocess

import pytest

from tests.cli.pipes import environment, one_error_line, zoo, zoo_command
from tests.fake_plugins import BROKEN, add_fake_plugin

LONG_NAME = "barprobe-tiny-with-a-name-far-longer-than-any-column-would-allow"
ARCH_PLUGIN = f"""
    import zoo

    @zoo.hookimpl
    def zoo_register_architectures(register):
        register({LONG_NAME!r}, lambda: zoo.spec("gpt2").override({{"name": {LONG_NAME!r}, "n_layers": 1}}))
        register("barprobe-tiny", lambda: zoo.spec("gpt2").override({{"name": "barprobe-tiny", "n_layers": 1}}))
"""


@pytest.fixture(scope="module")
def arch_site(tmp_path_factory):
    return add_fake_plugin(tmp_path_factory.mktemp("site"), "barprobe", "barprobe", "barprobe_plugin", ARCH_PLUGIN)


@pytest.mark.parametrize("columns", ["20", "80", "400"])
def test_zoo_list_piped_keeps_every_name_and_number_whole(arch_site, columns):
    listed = json.loads(zoo("list", "--json", site=arch_site).stdout)
    result = zoo("list", site=arch_site, COLUMNS=columns)
    assert result.returncode == 0 and result.stderr == ""
    assert "…" not in result.stdout and "┃" not in result.stdout  # plain columns on a pipe
    lines = result.stdout.splitlines()
    for row in listed["architectures"]:  # `zoo list | grep NAME` finds the row, numbers whole
        line = next(s for s in lines if s.split()[:1] == [row["name"]])
        kv = row["kv_bytes_per_token_bf16"]  # None: an encoder-only model keeps no cache
        assert f"{row['params']:,}" in line and (f"{kv:,}" if kv is not None else "none") in line
    assert any(s.startswith("barprobe-tiny ") for s in lines) and any(LONG_NAME in s for s in lines)


def test_zoo_list_formats_are_one_document_each(arch_site):
    document = json.loads(zoo("list", "--json", site=arch_site).stdout)  # json.loads refuses anything extra
    assert document == json.loads(zoo("list", "--format", "json", site=arch_site).stdout)
    rows = list(csv.DictReader(io.StringIO(zoo("list", "--format", "csv", site=arch_site).stdout)))
    assert [r["name"] for r in rows] == [a["name"] for a in document["architectures"]]
    assert int(rows[0]["params"]) == document["architectures"][0]["params"]  # raw numbers in CSV
    md = zoo("list", "--format", "md", site=arch_site).stdout.splitlines()
    assert md[0].startswith("| name | params |") and f"| {LONG_NAME} |" in "\n".join(md)


def test_zoo_list_is_cached_and_the_cache_follows_the_plugins(arch_site, tmp_path):
    cache = {"ZOO_CACHE_DIR": str(tmp_path)}
    first = zoo("list", "--json", site=arch_site, **cache)
    assert (tmp_path / "list.json").exists()
    second = zoo("list", "--json", site=arch_site, **cache)
    assert second.stdout == first.stdout
    without = json.loads(zoo("list", "--json", **cache).stdout)  # the plugin gone: recomputed
    assert "barprobe-tiny" not in {a["name"] for a in without["architectures"]}


def test_the_terminal_table_never_cuts_a_cell(monkeypatch):
    from zoo.cli.output import TableData, print_table

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    table = TableData("t", ["name", "params"], [[LONG_NAME, 116_829_156_672], ["gpt2", 124_439_808]])
    for width in (20, 60, 300):
        monkeypatch.setenv("COLUMNS", str(width))
        out = Terminal()
        print_table(table, "table", out)
        text = out.getvalue()
        assert LONG_NAME in text and "116,829,156,672" in text and "…" not in text, (width, text)


def test_zoo_show_output_loads_back(tmp_path):
    shown = zoo("show", "qwen3-0.6b")
    assert shown.returncode == 0 and "# kv_bytes_per_token:" in shown.stdout
    (tmp_path / "f.yaml").write_text(shown.stdout)
    again = zoo("show", "--spec", str(tmp_path / "f.yaml"))
    assert again.returncode == 0 and again.stdout == shown.stdout, again.stderr
    as_json = zoo("show", "qwen3-0.6b", "--json").stdout
    (tmp_path / "f.json").write_text(as_json)
    from zoo.specs.model import ModelSpec

    assert ModelSpec.from_file(tmp_path / "f.json").to_dict() == json.loads(as_json)["spec"]


@pytest.mark.parametrize("argv", [["schema"], ["show", "gpt2", "--json"], ["list"]])
def test_a_closed_pipe_ends_quietly(argv):
    """`zoo schema | head -1`: the reader goes away; no BrokenPipeError traceback."""
    process = subprocess.Popen(
        [*zoo_command(), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment()
    )
    process.stdout.close()  # before it writes anything: every write meets a closed pipe
    err = process.stderr.read().decode()
    process.wait(timeout=120)
    assert err == "" and process.returncode in (0, 141), (process.returncode, err)


def test_head_minus_one_in_a_shell():
    result = subprocess.run(
        f"{' '.join(zoo_command())} schema | head -1", shell=True, capture_output=True, text=True, env=environment()
    )
    assert result.stdout == "{\n" and result.stderr == ""


@pytest.mark.parametrize("fmt", ["table", "json", "csv"])
def test_zoo_plugins_reports_a_skipped_plugin_once(tmp_path, fmt):
    site = add_fake_plugin(tmp_path, "broken-dist", "broken", "broken_plugin", BROKEN)
    result = zoo("plugins", "--format", fmt, site=site)
    assert result.returncode == 0
    both = result.stdout + result.stderr
    assert both.count("this plugin is broken on purpose") == 1, both
    if fmt == "json":
        assert json.loads(result.stdout)["failures"][0]["name"] == "broken" and result.stderr == ""


def test_every_table_command_has_json_and_formats():
    for command in (["list"], ["show", "gpt2"], ["plugins"], ["bench"], ["compare"], ["sweep", "f"]):
        help_text = zoo(*command, "--help").stdout
        assert "--json" in help_text and "--format" in help_text, command


def test_bad_generate_options_are_one_line(tmp_path):
    import torch

    devices = {"gpu": ("'gpu'", "allowed"), "tpu": ("'tpu'", "cuda:N")}
    if not torch.cuda.is_available():
        devices["cuda"] = ("cuda", "not available")
    for device, words in devices.items():
        one_error_line(zoo("generate", "--weights", str(tmp_path), "hello", "--device", device), *words)
    one_error_line(zoo("generate", "--weights", str(tmp_path), ""), "prompt", "empty")
    one_error_line(zoo("generate", "--weights", str(tmp_path), "hi", "--threads", "0"), "--threads")


@pytest.mark.parametrize("columns", [30, 200])
def test_zoo_list_on_a_terminal_cuts_nothing(arch_site, columns):
    from tests.cli.pipes import zoo_on_a_terminal

    status, out = zoo_on_a_terminal("list", columns=columns, PYTHONPATH=str(arch_site))
    assert status == 0 and "…" not in out
    assert LONG_NAME in out.replace("\r\n", "\n") and "116,829,156,672" in out
