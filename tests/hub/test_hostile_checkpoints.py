"""Checkpoints built to hurt: headers of the wrong JSON types, overlapping or negative
offsets, shards outside the folder, FIFOs, garbage configs. Each is one CheckpointError."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zoo
from tests.conftest import tiny_spec
from zoo.errors import CheckpointError, ZooError
from zoo.hub.config import eos_token_ids, spec_from_hf_config
from zoo.hub.safetensors_io import SafetensorsFile


def write_raw(path: Path, header: object, data: bytes = b"\0" * 64) -> Path:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


GOOD = {"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"dtype": 5, "shape": [2], "data_offsets": [0, 8]}, "dtype 5 is not supported"),
        ({"dtype": "F32", "shape": "2", "data_offsets": [0, 8]}, "shape must be a list"),
        ({"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}, "shape must be a list of non-negative"),
        ({"dtype": "F32", "shape": [True], "data_offsets": [0, 4]}, "shape must be a list of non-negative"),
        ({"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}, "bytes stored for shape"),
        ({"dtype": "F32", "shape": [2], "data_offsets": [-8, 0]}, "data_offsets must be two non-negative"),
        ({"dtype": "F32", "shape": [2], "data_offsets": {"a": 1}}, "data_offsets must be two"),
        ({"dtype": "F32", "shape": [2], "data_offsets": [0, 8], "extra": 1}, "corrupt header entry"),
        ([1, 2], "corrupt header entry"),
    ],
)
def test_header_entries_of_the_wrong_type(tmp_path, entry, message):
    path = write_raw(tmp_path / "m.safetensors", {"t": entry})
    with pytest.raises(CheckpointError, match=message):
        SafetensorsFile(path)


def test_overlapping_offsets_are_refused(tmp_path):
    header = {
        "a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
        "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]},
    }
    with pytest.raises(CheckpointError, match="'a' and 'b' overlap"):
        SafetensorsFile(write_raw(tmp_path / "m.safetensors", header))
    header["b"]["data_offsets"] = [16, 32]
    assert set(SafetensorsFile(write_raw(tmp_path / "ok.safetensors", header)).tensors) == {"a", "b"}


@pytest.mark.parametrize("metadata", [[1], {"a": 1}, "text"])
def test_metadata_must_be_an_object_of_strings(tmp_path, metadata):
    with pytest.raises(CheckpointError, match="__metadata__"):
        SafetensorsFile(write_raw(tmp_path / "m.safetensors", {**GOOD, "__metadata__": metadata}))


def test_a_fifo_is_refused_not_waited_on(tmp_path):
    os.mkfifo(tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match="it is a FIFO"):
        SafetensorsFile(tmp_path / "model.safetensors")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=6),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=12,
)
entries = st.fixed_dictionaries(
    {
        "dtype": st.sampled_from(["F32", "BF16", "I8", "X"]) | json_values,
        "shape": st.lists(st.integers(-3, 5), max_size=3) | json_values,
        "data_offsets": st.lists(st.integers(-8, 80), min_size=2, max_size=2) | json_values,
    }
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    header=st.dictionaries(st.text(min_size=1, max_size=4), entries | json_values, max_size=4),
    metadata=st.none() | json_values,
)
def test_header_fuzz_only_ever_raises_checkpoint_error(tmp_path, header, metadata):
    if metadata is not None:
        header = {**header, "__metadata__": metadata}
    path = write_raw(tmp_path / "fuzz.safetensors", header)
    try:
        file = SafetensorsFile(path)
    except CheckpointError:
        return
    spans = sorted((t.start, t.end) for t in file.tensors.values() if t.end > t.start)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # what is accepted never overlaps
    with file:
        for name in file.tensors:
            file.view(name).sum()


# ---- sharded index -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("ckpt")
    model = zoo.build(tiny_spec("qwen3-0.6b"), seed=0)
    zoo.save_pretrained(model, folder)
    return folder


def _with_index(saved: Path, tmp_path: Path, shard_for) -> Path:  # type: ignore[no-untyped-def]
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text((saved / "config.json").read_text())
    names = list(SafetensorsFile(saved / "model.safetensors").tensors)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {n: shard_for(n) for n in names}}))
    return folder


@pytest.mark.parametrize("where", ["../outside/model.safetensors", "/etc/passwd", "sub/../../model.safetensors"])
def test_index_shards_must_stay_in_the_folder(saved, tmp_path, where):
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "model.safetensors").write_bytes((saved / "model.safetensors").read_bytes())
    folder = _with_index(saved, tmp_path, lambda _: where)
    with pytest.raises(CheckpointError, match="outside the checkpoint folder"):
        zoo.from_pretrained(folder, progress=False)


@pytest.mark.parametrize("value", [3, None, ["model.safetensors"], {"a": 1}, ""])
def test_index_values_must_be_shard_names(saved, tmp_path, value):
    folder = _with_index(saved, tmp_path, lambda _: value)
    with pytest.raises(CheckpointError, match="expected a shard file name"):
        zoo.from_pretrained(folder, progress=False)


def test_a_shard_inside_the_folder_still_loads(saved, tmp_path):
    folder = _with_index(saved, tmp_path, lambda _: "shards/model.safetensors")
    (folder / "shards").mkdir()
    (folder / "shards" / "model.safetensors").write_bytes((saved / "model.safetensors").read_bytes())
    assert zoo.from_pretrained(folder, progress=False).spec.n_layers == 2


def test_links_into_the_hub_caches_blobs_are_the_one_allowance(saved, tmp_path):
    repo = tmp_path / "models--org--tiny"
    snapshot, blobs = repo / "snapshots" / "abc123", repo / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir()
    for i, name in enumerate(("config.json", "model.safetensors")):
        (blobs / f"blob{i}").write_bytes((saved / name).read_bytes())
        (snapshot / name).symlink_to(f"../../blobs/blob{i}")  # as huggingface_hub lays out its cache
    assert zoo.from_pretrained(snapshot, progress=False).spec.n_layers == 2


@pytest.mark.parametrize("name", ["config.json", "model.safetensors"])
def test_a_link_out_of_the_folder_is_refused_unread(saved, tmp_path, name):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    for other in ("config.json", "model.safetensors"):
        (folder / other).write_bytes((saved / other).read_bytes())
    (tmp_path / "secret").write_bytes((saved / name).read_bytes())
    (folder / name).unlink()
    (folder / name).symlink_to(tmp_path / "secret")
    with pytest.raises(CheckpointError, match="link that leads outside its folder") as info:
        zoo.from_pretrained(folder, progress=False)
    assert "secret" not in str(info.value)


# ---- config.json and generation_config.json ------------------------------------------------------
LLAMA = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "vocab_size": 97,
    "max_position_embeddings": 64,
    "intermediate_size": 96,
}


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("num_attention_heads", 0, "num_attention_heads: expected a positive integer, got 0"),
        ("hidden_size", [64], "hidden_size: expected a positive integer"),
        ("vocab_size", "97", "vocab_size: expected a positive integer, got '97'"),
        ("num_hidden_layers", True, "num_hidden_layers: expected a positive integer"),
        ("rms_norm_eps", "small", "rms_norm_eps: expected a finite number"),
        ("hidden_act", ["silu"], "hidden_act: expected a string"),
        ("rope_scaling", [1], "rope_scaling: expected an object"),
        ("tie_word_embeddings", "yes", "tie_word_embeddings: expected true or false"),
    ],
)
def test_config_values_of_the_wrong_type(key, value, message):
    with pytest.raises(CheckpointError, match=message.replace("[", "\\[")):
        spec_from_hf_config({**LLAMA, key: value})


@settings(max_examples=80, deadline=None)
@given(
    key=st.sampled_from(
        sorted(LLAMA)
        + ["head_dim", "num_key_value_heads", "rope_theta", "rope_parameters", "layer_types", "sliding_window"]
    ),
    value=json_values,
)
def test_config_fuzz_only_ever_raises_checkpoint_error(key, value):
    try:
        spec_from_hf_config({**LLAMA, key: value})
    except CheckpointError:
        pass


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\x00garbage", "not valid JSON"),
        (b"[1, 2]", "expected a JSON object"),
        (b'{"eos_token_id": "end"}', "eos_token_id: expected a token id"),
        (b'{"eos_token_id": [1, -2]}', "eos_token_id: expected a token id"),
        (b'{"eos_token_id": 1, "eos_token_id": 2}', "duplicate key"),
        (b"\xff\xfe{}", "not UTF-8"),
    ],
)
def test_garbage_generation_config(tmp_path, content, message):
    (tmp_path / "generation_config.json").write_bytes(content)
    with pytest.raises(CheckpointError, match=message):
        eos_token_ids(tmp_path)


def test_good_generation_config(tmp_path):
    (tmp_path / "generation_config.json").write_text('{"eos_token_id": [1, 2]}')
    assert eos_token_ids(tmp_path) == [1, 2]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    changes=st.dictionaries(
        st.sampled_from(
            [
                "vocab_size",
                "hidden_size",
                "intermediate_size",
                "num_attention_heads",
                "num_key_value_heads",
                "head_dim",
                "max_position_embeddings",
                "rope_theta",
                "rms_norm_eps",
                "tie_word_embeddings",
            ]
        ),
        json_values | st.sampled_from([0, 1, 2**31 - 1, 2**31, 2**63, 10**12, -1]),
        max_size=2,
    )
)
def test_config_values_beside_real_weights_load_or_raise_one_zoo_error(saved, tmp_path_factory, changes):
    """A tampered config.json beside valid weights: loads, or one ZooError (the memory check
    refuses sizes that cannot fit before anything is allocated)."""
    folder = tmp_path_factory.mktemp("tampered")
    (folder / "model.safetensors").write_bytes((saved / "model.safetensors").read_bytes())
    config = json.loads((saved / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))
    try:
        zoo.from_pretrained(folder, progress=False)
    except ZooError as exc:
        assert "\n" not in str(exc) and "leads outside" not in str(exc)
