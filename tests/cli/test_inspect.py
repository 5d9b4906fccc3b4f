import json
import subprocess
import sys

from zoo.cli import main


def test_show_prints_spec_and_analysis(capsys):
    assert main(["show", "qwen3-0.6b", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["spec"]["attention"]["head_dim"] == 128
    assert out["analysis"]["params"]["total"] == 596_049_920
    assert out["analysis"]["kv_bytes_per_token"]["bfloat16"] == 114_688


def test_show_a_recurrent_model_reports_its_state_per_sequence(capsys):
    assert main(["show", "mamba-130m", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)["analysis"]
    assert out["params"]["total"] == 129_135_360
    assert out["kv_bytes_per_token"]["bfloat16"] == 0
    assert out["state_bytes_per_sequence"] == {
        "bfloat16": 2_654_208,
        "float32": 2_949_120,
    }  # conv window in the cache dtype


def test_show_yaml_with_overrides(capsys):
    assert main(["show", "llama-3.2-1b", "--set", "attention.kind=mqa"]) == 0
    out = capsys.readouterr().out
    assert "kind: mqa" in out and "bfloat16: 4096" in out


def test_show_a_spec_file(tmp_path, capsys):
    import zoo

    path = tmp_path / "my_arch.yaml"
    path.write_text(zoo.spec("gpt2").override({"n_layers": 2, "name": "mine"}).to_yaml())
    assert main(["show", "--spec", str(path)]) == 0
    assert "name: mine" in capsys.readouterr().out


def test_list_json(capsys):
    assert main(["list", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "qwen3-0.6b" in {row["name"] for row in out["architectures"]}
    assert "moe" in out["components"]["ffn"]


def test_schema_lists_kinds(capsys):
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    kinds = {v["properties"]["kind"]["const"] for v in schema["properties"]["attention"]["anyOf"]}
    assert {"mha", "gqa", "mqa", "mamba", "linear"} <= kinds


def _run(*args):
    return subprocess.run([sys.executable, "-m", "zoo", *args], capture_output=True, text=True)


def test_bad_input_prints_one_line_and_exits_2():
    cases = {  # argv -> what the line must say: the field and what is allowed
        ("show", "nope"): "qwen3",
        ("show", "qwen3-0.6b", "--set", "attention.n_kv_heads=3"): "attention.n_kv_heads",
        ("show", "qwen3-0.6b", "--set", "attention.kind=gqq"): "did you mean 'gqa'",
        ("show", "qwen3-0.6b", "--set", "foo=1"): "foo",
        ("show", "qwen3-0.6b", "--set", "d_model=-5"): "d_model",
        ("bogus",): "bogus",
    }
    for args, message in cases.items():
        result = _run(*args)
        assert result.returncode == 2, args
        assert result.stderr.count("\n") == 1 and result.stderr.startswith("zoo: error:"), result.stderr
        assert message in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_debug_shows_the_traceback():
    result = _run("--debug", "show", "nope")
    assert result.returncode == 2 and "Traceback" in result.stderr
