"""zoo.files.safe_io: regular files only, UTF-8, YAML and JSON with bounded size, depth and no duplicate keys."""

from __future__ import annotations

import os
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zoo
from zoo.errors import SpecError
from zoo.files.safe_io import MAX_DEPTH, bounded_repr, load_json, load_yaml, parse_scalar, read_text
from zoo.specs.model import ModelSpec

BOMB = (
    "a: &a [x,x,x,x,x,x,x,x,x]\n"
    + "".join(f"{n}: &{n} [{','.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefg", "bcdefgh"))
    + "name: ["
    + ",".join(["*h"] * 9)
    + "]\n"
)

FLOW_BOMB = (
    "[&a [x,x,x,x,x,x,x,x,x], "
    + ", ".join(f"&{n} [{','.join([f'*{p}'] * 9)}]" for p, n in zip("abcdefg", "bcdefgh"))
    + "]"
)


def test_alias_bomb_is_refused_quickly():
    start = time.perf_counter()
    with pytest.raises(SpecError, match="aliases expand to more than"):
        load_yaml(BOMB, SpecError, "bomb.yaml")
    assert time.perf_counter() - start < 5


def test_recursive_alias_is_refused():
    with pytest.raises(SpecError, match="refers to the collection that contains it"):
        load_yaml("a: &a [*a]\n", SpecError, "x")


def test_deep_nesting_is_refused_without_recursion_error():
    with pytest.raises(SpecError, match=f"nested more than {MAX_DEPTH}"):
        load_yaml("a: " + "[" * 5000 + "]" * 5000, SpecError, "x")
    with pytest.raises(SpecError, match="nested"):
        load_json("[" * 100_000 + "]" * 100_000, SpecError, "x")
    with pytest.raises(SpecError, match="nested more than"):
        load_json("[" * 200 + "]" * 200, SpecError, "x")


def test_duplicate_keys_are_refused():
    with pytest.raises(SpecError, match="duplicate key 'vocab_size' \\(line 2\\)"):
        load_yaml("vocab_size: 10\nvocab_size: 20\n", SpecError, "x")
    with pytest.raises(SpecError, match="duplicate key 'a'"):
        load_json('{"a": 1, "a": 2}', SpecError, "x")
    assert load_yaml("base: &b {x: 1}\nother: {<<: *b, y: 2}\n", SpecError, "x")["other"] == {"x": 1, "y": 2}


def test_non_utf8_and_fifo_are_one_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"name: \xff\n")
    with pytest.raises(SpecError, match="not UTF-8 text \\(byte 0xff at offset 6\\)"):
        read_text(bad, SpecError, "spec file")
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    with pytest.raises(SpecError, match="it is a FIFO"):
        ModelSpec.from_file(fifo)  # returns at once: the FIFO is never read
    with pytest.raises(SpecError, match="it is a directory"):
        ModelSpec.from_file(tmp_path)


def test_bounded_repr_of_a_huge_value():
    value: list = ["x"] * 9
    for _ in range(8):
        value = [value] * 9
    assert len(bounded_repr(value)) <= 120


def test_set_value_alias_bomb_and_duplicates_are_spec_errors():
    spec = zoo.spec("gpt2")
    with pytest.raises(SpecError, match="aliases expand"):
        spec.override([f"name={FLOW_BOMB}"])
    with pytest.raises(SpecError, match="duplicate key"):
        spec.override(["ffn={kind: mlp, kind: swiglu}"])
    assert parse_scalar("not: [valid", SpecError, "x") == "not: [valid"  # plain text stays text


# ---- fuzzing: whatever the input, the only failure is a SpecError ------------------------------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
FIELDS = [
    "vocab_size",
    "d_model",
    "n_layers",
    "max_seq_len",
    "attention.n_heads",
    "attention.kind",
    "ffn.hidden",
    "positional.theta",
    "norm.eps",
    "embedding_scale",
    "layers",
    "tie_embeddings",
    "ffn",
    "name",
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=st.sampled_from(FIELDS), text=st.text(max_size=30))
def test_override_text_fuzz(key, text):
    try:
        spec = zoo.spec("gpt2").override([f"{key}={text}"])
    except SpecError:
        return
    spec.to_json()  # whatever was accepted serialises


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=st.sampled_from(FIELDS), value=json_values)
def test_override_value_fuzz(key, value):
    try:
        spec = zoo.spec("gpt2").override({key: value})
    except SpecError:
        return
    assert "NaN" not in spec.to_json() and "Infinity" not in spec.to_json()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.dictionaries(
        st.sampled_from(FIELDS + ["norm", "positional", "attention", "block"]), json_values, max_size=8
    )
)
def test_spec_mapping_fuzz(data):
    base = zoo.spec("gpt2").to_dict()
    try:
        ModelSpec.model_validate({**base, **{k: v for k, v in data.items() if "." not in k}})
    except SpecError:
        pass


# ---- confinement and size bounds -----------------------------------------------------------
def test_inside_follows_links_only_within_the_folder_or_into_hub_blobs(tmp_path):
    from zoo.files.safe_io import inside

    repo = tmp_path / "models--org--name"
    snapshot, blobs = repo / "snapshots" / "rev" / "sub", repo / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir()
    (blobs / "b").write_text("{}")
    (snapshot / "config.json").symlink_to(blobs / "b")
    (snapshot / "local.json").write_text("{}")
    (snapshot / "alias.json").symlink_to("local.json")
    (tmp_path / "secret.json").write_text("{}")
    (snapshot / "out.json").symlink_to(tmp_path / "secret.json")
    assert inside(snapshot, "config.json", SpecError) == (blobs / "b").resolve()
    assert inside(snapshot, "alias.json", SpecError) == (snapshot / "local.json").resolve()
    with pytest.raises(SpecError, match="leads outside its folder") as info:
        inside(snapshot, "out.json", SpecError)
    assert "secret" not in str(info.value)
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "x.json").symlink_to(blobs / "b")  # blobs are allowed only from a snapshot
    with pytest.raises(SpecError, match="leads outside"):
        inside(plain, "x.json", SpecError)


def test_files_read_whole_are_bounded_by_size(tmp_path):
    from zoo.files.safe_io import check_readable, read_bytes

    path = tmp_path / "big"
    with open(path, "wb") as handle:
        handle.truncate(1 << 40)  # sparse: refused by its size, never read
    with pytest.raises(SpecError, match="larger than zoo reads"):
        read_bytes(path, SpecError)
    with pytest.raises(SpecError, match="larger than zoo reads"):
        check_readable(path, SpecError, limit=10)
    with pytest.raises(SpecError, match="a device"):
        read_bytes("/dev/zero", SpecError)
    (tmp_path / "small").write_bytes(b"abc")
    assert read_bytes(tmp_path / "small", SpecError, limit=3) == b"abc"
