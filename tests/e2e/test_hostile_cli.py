"""The `zoo` command against a hostile user (issue 24): every case ends in exit status 2 and one
`zoo: error:` line, never a traceback, a hang, or memory beyond a cap; a file reached through
a link out of its folder is refused without a byte of it in the output.

Most cases run in this process through ``zoo.cli.main`` (the entry point the command calls),
grouped so the file stays quick; the cases of the issue itself also run as real processes of
the installed command under a 4 GiB address-space cap and a 10 s CPU-time cap (CPU time, not
wall time: the machine may be shared, and a refusal costs well under a second of CPU beyond
Python's start-up and torch's import).
"""

from __future__ import annotations

import json
import os
import resource
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

import zoo
from tests.conftest import tiny_spec
from tests.hub.gguf.hostile import (
    ARRAY,
    F32,
    I64,
    STRING,
    U8,
    U32,
    U64,
    gguf_bytes,
    llama_meta,
    llama_tensors,
    tiny_llama,
    write,
)
from zoo.cli import main

pytest.importorskip("gguf")
ROOT = Path(__file__).resolve().parents[2]
ZOO = str(Path(sys.executable).parent / "zoo")
SECRET = "TOPSECRET-7f3a"  # written into every outside file: must never appear in output
MEMORY_CAP = 4 << 30
CPU_SECONDS = 10


# ---- fixtures ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Hugging Face checkpoint (config.json, model.safetensors, tokenizer.json)."""
    folder = tmp_path_factory.mktemp("ckpt")
    zoo.save_pretrained(zoo.build(tiny_spec("qwen3-0.6b"), seed=0), folder)
    words = [f"w{i}" for i in range(97)]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder


def copy_of(ckpt: Path, where: Path) -> Path:
    where.mkdir(parents=True)
    for path in ckpt.iterdir():
        (where / path.name).write_bytes(path.read_bytes())
    return where


def outside(tmp_path: Path, name: str = "secret.json") -> Path:
    """A file beside the checkpoint folder holding the secret (valid JSON that names it)."""
    path = tmp_path / name
    path.write_text(json.dumps({"model_type": SECRET, "eos_token_id": 7, SECRET: SECRET}))
    return path


def link_out(folder: Path, name: str, target: Path) -> None:
    (folder / name).unlink(missing_ok=True)
    (folder / name).symlink_to(os.path.relpath(target, folder))


def one_line(capsys: pytest.CaptureFixture[str], argv: list[str], *words: str) -> str:
    """Run ``zoo argv`` in this process: exit 2, one error line holding ``words``, no secret."""
    code = main(argv)
    out = capsys.readouterr()
    lines = out.err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("zoo: error: "), (code, out.err)
    assert SECRET not in out.out + out.err
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def _caps() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))


def zoo_process(*args: str, cwd: Path | None = None) -> str:
    """The installed command under the caps: exit 2, one error line, which is returned."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [ZOO, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        preexec_fn=_caps,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("zoo: error: "), result
    assert SECRET not in result.stdout + result.stderr
    return lines[0]


# ---- the cases of the issue, as real processes --------------------------------------------
def test_config_linked_out_of_the_folder_is_refused_unread(ckpt: Path, tmp_path: Path) -> None:
    folder = copy_of(ckpt, tmp_path / "model")
    link_out(folder, "config.json", outside(tmp_path))
    line = zoo_process("generate", "--weights", str(folder), "hi", "--device", "cpu")
    assert "leads outside its folder" in line and "secret" not in line


def test_a_shard_linked_to_etc_passwd_is_refused_unread(ckpt: Path, tmp_path: Path) -> None:
    folder = copy_of(ckpt, tmp_path / "model")
    names = list(zoo.hub.safetensors_io.SafetensorsFile(folder / "model.safetensors").tensors)
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {n: "shard.safetensors" for n in names}})
    )
    (folder / "shard.safetensors").symlink_to("/etc/passwd")
    line = zoo_process("generate", "--weights", str(folder), "hi", "--device", "cpu")
    assert "leads outside its folder" in line and "root:" not in line and "header" not in line


def test_a_73_byte_gguf_declaring_2_62_items(tmp_path: Path) -> None:
    path = write(
        tmp_path / "a.gguf", gguf_bytes([("general.architecture", STRING, "llama"), ("x", ARRAY, (U32, 2**62))], [])
    )
    assert "items" in zoo_process("generate", "--weights", str(path), "hi", "--device", "cpu")


def test_an_8m_item_token_type_array(tmp_path: Path) -> None:
    path = tiny_llama(tmp_path / "t.gguf", **{"tokenizer.ggml.token_type": (ARRAY, (U8, [1] * 8_000_000))})
    assert "tokenizer.ggml.token_type" in zoo_process("generate", "--weights", str(path), "hi", "--device", "cpu")


def test_a_sweep_file_of_10_9_points(tmp_path: Path) -> None:
    values = ", ".join(str(i) for i in range(1, 1001))
    path = tmp_path / "big.toml"
    path.write_text(
        f'arch = "qwen3-0.6b"\nanalysis_only = true\n[vary]\nn_layers = [{values}]\n'
        f"d_model = [{values}]\nvocab_size = [{values}]\n"
    )
    assert "1,000,000,000 points" in zoo_process("sweep", str(path), "--results-dir", str(tmp_path / "r"))


def test_eval_text_from_dev_zero_and_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for source, word in (("/dev/zero", "a device"), (str(fifo), "a FIFO")):
        assert word in zoo_process("bench", "--arch", "qwen3-0.6b", "--no-save", "--eval-text", source)


def test_a_results_log_linked_to_dev_zero(tmp_path: Path) -> None:
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "c.jsonl").symlink_to("/dev/zero")
    line = zoo_process(
        "compare",
        "--arch",
        "qwen3-0.6b",
        "--vary",
        "n_layers=1,2",
        "--analysis-only",
        "--save",
        "c",
        "--results-dir",
        str(tmp_path / "r"),
    )
    assert "not a regular file" in line


def test_head_count_zero_and_a_missing_embedding(tmp_path: Path) -> None:
    path = tiny_llama(tmp_path / "h.gguf", **{"llama.attention.head_count": (U32, 0)})
    assert "llama.attention.head_count" in zoo_process("generate", "--weights", str(path), "hi", "--device", "cpu")


def test_vocab_size_2_63_from_set(tmp_path: Path) -> None:
    line = zoo_process("bench", "--arch", "qwen3-0.6b", "--no-save", "--set", f"vocab_size={2**63}")
    assert "vocab_size" in line and "out of range" in line


def test_hidden_size_10_12_beside_valid_weights(ckpt: Path, tmp_path: Path) -> None:
    folder = copy_of(ckpt, tmp_path / "model")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "hidden_size": 10**8}))
    assert "needs about" in zoo_process("generate", "--weights", str(folder), "hi", "--device", "cpu")


def test_a_huge_batch_with_weights(ckpt: Path) -> None:
    line = zoo_process(
        "bench",
        "--weights",
        str(ckpt),
        "--no-save",
        "--batch-size",
        "100000000",
        "--device",
        "cpu",
        "--prompt-len",
        "8",
        "--gen-len",
        "4",
    )
    assert "needs about" in line and "batch 100,000,000" in line


def test_threads_past_the_machine(ckpt: Path) -> None:
    assert "CPU cores" in zoo_process("generate", "--weights", str(ckpt), "hi", "--threads", "1000000")


def test_overlapping_gguf_offsets(tmp_path: Path) -> None:
    tensors = llama_tensors()
    path = write(tmp_path / "o.gguf", gguf_bytes(llama_meta(), tensors, offsets=[0] * len(tensors)))
    assert "overlap" in zoo_process("generate", "--weights", str(path), "hi", "--device", "cpu")


def test_duplicate_keys_in_a_safetensors_header(ckpt: Path, tmp_path: Path) -> None:
    folder = copy_of(ckpt, tmp_path / "model")
    data = (folder / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = data[8 : 8 + n].decode().rstrip()
    first = header[1 : header.index("}") + 1]  # the first entry, repeated: the same key twice
    doubled = ("{" + first + "," + header[1:]).encode()
    doubled += b" " * (-len(doubled) % 8)
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(doubled)) + doubled + data[8 + n :])
    assert "duplicate key" in zoo_process("generate", "--weights", str(folder), "hi", "--device", "cpu")


# ---- more cases, in this process -----------------------------------------------------------
@pytest.mark.parametrize("name", ["config.json", "model.safetensors", "tokenizer.json", "generation_config.json"])
def test_every_checkpoint_file_linked_out_is_refused(ckpt: Path, tmp_path: Path, capsys: Any, name: str) -> None:
    folder = copy_of(ckpt, tmp_path / "model")
    target = outside(tmp_path)
    if name == "model.safetensors":
        target.write_bytes((ckpt / name).read_bytes() + SECRET.encode())
    link_out(folder, name, target)
    one_line(capsys, ["generate", "--weights", str(folder), "hi", "--device", "cpu"], "leads outside its folder")


def test_hub_cache_links_still_load(ckpt: Path, tmp_path: Path, capsys: Any) -> None:
    snapshot, blobs = tmp_path / "models--o--m" / "snapshots" / "r1", tmp_path / "models--o--m" / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir()
    for i, path in enumerate(sorted(ckpt.iterdir())):
        (blobs / f"b{i}").write_bytes(path.read_bytes())
        (snapshot / path.name).symlink_to(f"../../blobs/b{i}")
    assert main(["generate", "--weights", str(snapshot), "w1 w2", "--max-new-tokens", "2", "--device", "cpu"]) == 0


def test_a_gguf_linked_out_of_its_folder(tmp_path: Path, capsys: Any) -> None:
    real = tiny_llama(tmp_path / "real.gguf")
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "model.gguf").symlink_to(real)
    one_line(capsys, ["generate", "--weights", str(tmp_path / "m"), "hi"], "leads outside its folder")


@pytest.mark.parametrize(
    "change, words",
    [
        ({"llama.block_count": (STRING, "2")}, ("llama.block_count", "an integer")),
        ({"llama.block_count": (ARRAY, (U32, [1]))}, ("llama.block_count", "array")),
        ({"llama.block_count": (U32, 5)}, ("llama.block_count", "blocks")),
        ({"llama.context_length": (U64, 2**64 - 1)}, ("llama.context_length",)),
        ({"llama.embedding_length": (U32, 4096)}, ("token_embd.weight",)),
        ({"llama.attention.head_count_kv": (U32, 0)}, ("head_count_kv",)),
        ({"llama.attention.layer_norm_rms_epsilon": (F32, float("nan"))}, ("layer_norm_rms_epsilon", "finite")),
        ({"llama.rope.freq_base": (STRING, "x")}, ("llama.rope.freq_base",)),
        ({"tokenizer.ggml.bos_token_id": (U32, 10**6)}, ("tokenizer.ggml.bos_token_id", "1000000")),
        ({"tokenizer.ggml.eos_token_id": (I64, -3)}, ("tokenizer.ggml.eos_token_id",)),
        ({"tokenizer.ggml.tokens": (ARRAY, (U32, [1, 2]))}, ("tokenizer.ggml.tokens", "strings")),
        ({"tokenizer.ggml.model": (STRING, "bert")}, ("tokenizer.ggml.model", "'bert'")),
        (
            {"tokenizer.ggml.model": (STRING, "gpt2"), "tokenizer.ggml.pre": (STRING, "evil")},
            ("tokenizer.ggml.pre", "'evil'"),
        ),
        ({"general.architecture": (U32, 7)}, ("general.architecture",)),
        ({"general.alignment": (U32, 0)}, ("general.alignment",)),
        ({"split.count": (U32, 2)}, ("split.count",)),
        ({"llama.expert_count": (U32, 4), "llama.expert_used_count": (U32, 9)}, ()),
    ],
)
def test_one_bad_gguf_value_is_one_line(
    tmp_path: Path, capsys: Any, change: dict[str, Any], words: tuple[str, ...]
) -> None:
    path = tiny_llama(tmp_path / "m.gguf", **change)
    one_line(capsys, ["generate", "--weights", str(path), "hi", "--device", "cpu"], *words)


@pytest.mark.parametrize(
    "data, words",
    [
        (b"GGUF", ("not a readable GGUF",)),
        (b"GGUF" + struct.pack("<IQQ", 3, 2**63, 0), ("tensor_count",)),
        (gguf_bytes([("general.name", STRING, b"\xc3\x28")], []), ("general.name", "not UTF-8")),
        (gguf_bytes([("general.architecture", STRING, "llama")], [("t", [4], 999, b"\0" * 16)]), ("ggml type 999",)),
    ],
)
def test_header_lies_are_one_line(tmp_path: Path, capsys: Any, data: bytes, words: tuple[str, ...]) -> None:
    one_line(capsys, ["generate", "--weights", str(write(tmp_path / "h.gguf", data)), "hi"], *words)


def test_a_gguf_directory_and_fifo(tmp_path: Path, capsys: Any) -> None:
    (tmp_path / "d.gguf").mkdir()
    one_line(capsys, ["generate", "--weights", str(tmp_path / "d.gguf"), "hi"], "d.gguf")
    os.mkfifo(tmp_path / "f.gguf")
    one_line(capsys, ["generate", "--weights", str(tmp_path / "f.gguf"), "hi"], "a FIFO")


@pytest.mark.parametrize(
    "key, value, words",
    [
        ("vocab_size", 2**63, ("vocab_size",)),
        ("hidden_size", 10**12, ("d_model", "out of range")),
        ("num_hidden_layers", 10**9, ("1000000000",)),
        ("num_attention_heads", 0, ("num_attention_heads",)),
        ("rope_theta", "NaN", ("rope_theta",)),
        ("max_position_embeddings", -1, ("max_position_embeddings",)),
    ],
)
def test_bad_config_values_are_one_line(
    ckpt: Path, tmp_path: Path, capsys: Any, key: str, value: Any, words: tuple[str, ...]
) -> None:
    folder = copy_of(ckpt, tmp_path / "model")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, key: value}))
    one_line(capsys, ["generate", "--weights", str(folder), "hi", "--device", "cpu"], *words)


def test_files_that_are_not_regular_or_too_large(ckpt: Path, tmp_path: Path, capsys: Any) -> None:
    one_line(capsys, ["bench", "--spec", "/dev/zero", "--no-save"], "a device")
    os.mkfifo(tmp_path / "spec.yaml")
    one_line(capsys, ["bench", "--spec", str(tmp_path / "spec.yaml"), "--no-save"], "a FIFO")
    one_line(capsys, ["sweep", "/dev/zero"], "a device")
    sparse = tmp_path / "huge.yaml"
    with open(sparse, "wb") as handle:
        handle.truncate(1 << 40)  # a terabyte that takes no disk: refused by its size, not read
    one_line(capsys, ["bench", "--spec", str(sparse), "--no-save"], "larger than zoo reads")
    folder = copy_of(ckpt, tmp_path / "model")
    with open(folder / "tokenizer.json", "r+b") as handle:
        handle.truncate(1 << 40)
    one_line(capsys, ["generate", "--weights", str(folder), "hi", "--device", "cpu"], "tokenizer", "larger than")
    one_line(capsys, ["bench", "--arch", "qwen3-0.6b", "--no-save", "--eval-text", str(sparse)], "larger than")


def test_run_options_bounded(ckpt: Path, capsys: Any) -> None:
    one_line(capsys, ["bench", "--arch", "qwen3-0.6b", "--no-save", "--threads", "100000"], "CPU cores")
    one_line(capsys, ["bench", "--arch", "qwen3-0.6b", "--no-save", "--batch-size", str(10**12)], "batch_size")
    one_line(capsys, ["bench", "--weights", str(ckpt), "--no-save", "--prompt-len", str(2**40)], "prompt_len")
    one_line(capsys, ["bench", "--arch", "qwen3-0.6b", "--no-save", "--set", "attention.n_heads=9999999999"], "n_heads")
    one_line(capsys, ["bench", "--arch", "qwen3-0.6b", "--no-save", "--set", "ffn.hidden=-1"], "ffn.hidden")
    one_line(
        capsys,
        ["compare", "--arch", "qwen3-0.6b", "--vary", "n_layers=1,2,3", "--analysis-only", "--max-points", "2"],
        "3 points",
        "at most 2",
    )
    one_line(capsys, ["compare", "--arch", "qwen3-0.6b", "--vary", "n_layers=1", "--max-points", "0"], "max_points")
    one_line(capsys, ["compare", "--arch", "qwen3-0.6b", "--analysis-only", "--contexts", "1e30"], "contexts")


def test_a_sweep_over_its_limit_and_its_override(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "s.toml"
    path.write_text('arch = "qwen3-0.6b"\nanalysis_only = true\nmax_points = 2\n[vary]\nn_layers = [1, 2, 3]\n')
    one_line(capsys, ["sweep", str(path), "--results-dir", str(tmp_path / "r")], "3 points", "at most 2")
    assert main(["sweep", str(path), "--results-dir", str(tmp_path / "r"), "--max-points", "3"]) == 0


def test_a_plugin_registering_one_name_twice_is_refused() -> None:
    from zoo.errors import PluginError
    from zoo.specs.registry import Registry

    class Twice:
        @zoo.hookimpl
        def zoo_register_architectures(self, register: Any) -> None:
            register("twice-arch", tiny_spec("qwen3-0.6b"))
            register("twice-arch", tiny_spec("llama-3.2-1b"))

    with pytest.raises(PluginError, match="registers architecture 'twice-arch' twice"):
        Registry().add_plugin(Twice(), name="twice")


def test_an_interrupted_compare_save_leaves_the_earlier_save(tmp_path: Path, monkeypatch: Any, capsys: Any) -> None:
    argv = [
        "compare",
        "--arch",
        "qwen3-0.6b",
        "--vary",
        "n_layers=1,2",
        "--analysis-only",
        "--save",
        "c",
        "--results-dir",
        str(tmp_path),
    ]
    from zoo.harness.sweep import run as sweep_run  # where the sweep looks render_sweep up

    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(sweep_run, "render_sweep", interrupted)
        assert main(argv) == 130  # a first save interrupted: nothing at all is left
    assert list(tmp_path.iterdir()) == []
    assert main(argv) == 0
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    monkeypatch.setattr(sweep_run, "render_sweep", interrupted)
    assert main([*argv[:4], "n_layers=1,2,3", *argv[5:]]) == 130  # Ctrl-C after the rows, before the tables
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # nothing half replaced, nothing left
