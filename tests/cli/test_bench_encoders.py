"""`zoo bench` on encoders and encoder-decoders: --weights of a checkpoint goes to its
topology's phases (as --arch does), and every topology's row is appended to the results log."""

import csv
import json

import pytest
import torch

from tests.conftest import tiny_spec
from tests.hub.encoder_checkpoints import save_hf_model, save_tiny_bert
from zoo.cli import main

RUN = ["--json", "--device", "cpu", "--prompt-len", "8", "--repeats", "1", "--threads", "1"]


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):  # type: ignore[no-untyped-def]
    folder = tmp_path_factory.mktemp("bert")
    return folder, save_tiny_bert(folder)


@pytest.fixture(scope="module")
def t5_dir(tmp_path_factory):  # type: ignore[no-untyped-def]
    folder = tmp_path_factory.mktemp("t5")
    model = save_hf_model("t5", "AutoModelForSeq2SeqLM", folder)
    return folder, sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


@pytest.fixture
def loads(monkeypatch):  # type: ignore[no-untyped-def]
    """The folders the run loaded weights from (zoo.hub.loading.from_pretrained, as the run's
    model source calls it)."""
    import zoo.harness.source as source

    seen, real = [], source.from_pretrained
    monkeypatch.setattr(source, "from_pretrained", lambda folder, **kw: seen.append(str(folder)) or real(folder, **kw))
    return seen


def test_weights_of_an_encoder_run_the_encoder_bench(bert_dir, loads, tmp_path, capsys):  # type: ignore[no-untyped-def]
    folder, n_params = bert_dir
    assert main(["bench", "--weights", str(folder), *RUN, "--results-dir", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["topology"] == "encoder" and out["arch"] == str(folder) and out["params_total"] == n_params
    assert (
        out["weight_bytes"] == 4 * n_params and out["encoder_tokens_per_s"] > 0 and out["decode_tokens_per_s"] is None
    )
    assert loads == [str(folder)]  # the checkpoint's weights were measured, not random ones
    row = next(csv.DictReader((tmp_path / "bench.csv").open()))
    assert row["topology"] == "encoder" and row["gen_len"] == ""  # an encoder decodes nothing


def test_weights_of_an_encoder_decoder_and_both_rows_logged(t5_dir, loads, tmp_path, capsys):  # type: ignore[no-untyped-def]
    from zoo.analysis.counts import cache_bytes
    from zoo.hub.loading import checkpoint_spec

    folder, n_params = t5_dir
    assert main(["bench", "--weights", str(folder), *RUN, "--gen-len", "3", "--results-dir", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    spec = checkpoint_spec(folder)
    assert out["topology"] == "encoder-decoder" and out["params_total"] == n_params and loads == [str(folder)]
    assert out["self_kv_bytes"] == cache_bytes(spec, 1, 3, dtype=torch.float32).token > 0
    assert out["cross_kv_bytes"] == cache_bytes(spec, 1, 1, 8, dtype=torch.float32).memory > 0
    decoder = tmp_path / "gpt2.yaml"
    decoder.write_text(tiny_spec("gpt2").to_yaml())
    assert main(["bench", "--spec", str(decoder), *RUN, "--gen-len", "3", "--results-dir", str(tmp_path)]) == 0
    capsys.readouterr()
    rows = [json.loads(line) for line in (tmp_path / "bench.jsonl").read_text().splitlines()]
    assert [r["topology"] for r in rows] == ["encoder-decoder", "decoder"]
    table = list(csv.DictReader((tmp_path / "bench.csv").open()))
    assert [r["topology"] for r in table] == ["encoder-decoder", "decoder"]
    assert float(table[0]["encoder_tokens_per_s"]) > 0 and table[1]["encoder_tokens_per_s"] == ""
    header = (tmp_path / "bench.md").read_text().splitlines()[0]
    assert "| topology |" in header and "| encoder_tokens_per_s |" in header and "| cross_kv_bytes |" in header


def test_an_encoder_row_with_no_save_is_not_logged_and_a_bad_topology_is_one_line(tmp_path, capsys):  # type: ignore[no-untyped-def]
    encoder = tmp_path / "bert.yaml"
    encoder.write_text(tiny_spec("bert-base-uncased").to_yaml())
    assert main(["bench", "--spec", str(encoder), *RUN, "--no-save", "--results-dir", str(tmp_path)]) == 0
    assert not (tmp_path / "bench.jsonl").exists()
    (tmp_path / "bench.jsonl").write_text(json.dumps({"family": "diffusion", "arch": "x"}) + "\n")
    capsys.readouterr()
    assert main(["bench", "--spec", str(encoder), *RUN, "--results-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "row 1 has topology 'diffusion'" in err and "encoder-decoder" in err and "\n" not in err
