"""Hostile GGUF files: generated headers, metadata values and byte mutations of a valid tiny
file each end quickly in a ``zoo.errors`` type (or load), never in a hang, a huge allocation
or another exception type. The cases the issue names are written out by hand."""

from __future__ import annotations

import math
import random
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zoo
from tests.hub.gguf.hostile import (
    ARRAY,
    BOOL,
    F32,
    F64,
    I32,
    I64,
    STRING,
    TOKENS,
    U8,
    U32,
    U64,
    gguf_bytes,
    llama_meta,
    llama_tensors,
    tiny_llama,
    write,
)
from zoo.errors import CheckpointError, ZooError
from zoo.hub.gguf.reader import GGUFCheckpoint
from zoo.hub.gguf.spec import spec_from_gguf
from zoo.hub.gguf.tokenizer import gguf_eos_ids, gguf_tokenizer

pytest.importorskip("gguf")
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def everything(path: Path) -> None:
    """What zoo does with a GGUF: header, spec, tokenizer, end ids, every tensor, the model."""
    g = GGUFCheckpoint(path)
    spec_from_gguf(g)
    gguf_tokenizer(g)
    gguf_eos_ids(g)
    for name in g.tensors:
        g.tensor(name)
    zoo.from_pretrained(path, progress=False)


def refused(path: Path, *words: str) -> str:
    with pytest.raises(ZooError) as info:
        everything(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message, message
    for word in words:
        assert word in message, message
    return message


def test_the_tiny_file_loads(tmp_path: Path) -> None:
    everything(tiny_llama(tmp_path / "ok.gguf"))


# ---- the cases of the issue -------------------------------------------------------------
def test_an_array_declaring_2_62_items_is_refused_at_once(tmp_path: Path) -> None:
    path = write(
        tmp_path / "a.gguf", gguf_bytes([("general.architecture", STRING, "llama"), ("x", ARRAY, (U32, 2**62))], [])
    )
    assert path.stat().st_size < 100
    refused(path, "x", "4,611,686,018,427,387,904 items")


def test_a_huge_honest_token_type_array_is_refused_quickly(tmp_path: Path) -> None:
    path = tiny_llama(tmp_path / "t.gguf", **{"tokenizer.ggml.token_type": (ARRAY, (U8, [1] * 2_000_000))})
    refused(path, "tokenizer.ggml.token_type", "2,000,000 types for 16 tokens")


@pytest.mark.parametrize(
    "change, words",
    [
        ({"llama.attention.head_count": (U32, 0)}, ("llama.attention.head_count", "0")),
        ({"llama.block_count": (STRING, "2")}, ("llama.block_count", "'2'", "an integer")),
        ({"llama.block_count": (ARRAY, (U32, [1, 1]))}, ("llama.block_count", "array of 2 items")),
        ({"llama.block_count": (U32, 2)}, ("llama.block_count", "tensors for 1 blocks")),
        ({"llama.block_count": (U64, 2**63)}, ("llama.block_count",)),
        ({"llama.embedding_length": (U32, 10**6)}, ("llama.embedding_length", "token_embd.weight")),
        ({"tokenizer.ggml.bos_token_id": (U32, 16)}, ("tokenizer.ggml.bos_token_id", "16")),
        ({"tokenizer.ggml.eos_token_id": (I64, -1)}, ("tokenizer.ggml.eos_token_id",)),
        ({"tokenizer.ggml.unknown_token_id": (U32, 99)}, ("tokenizer.ggml.unknown_token_id",)),
        ({"tokenizer.ggml.scores": (ARRAY, (F32, [0.0] * 3))}, ("tokenizer.ggml.scores", "3 scores")),
        ({"tokenizer.ggml.scores": (ARRAY, (F32, [math.nan] * 16))}, ("tokenizer.ggml.scores", "finite")),
        ({"tokenizer.ggml.model": (U32, 1)}, ("tokenizer.ggml.model", "a string")),
        ({"llama.rope.freq_base": (F32, math.nan)}, ("llama.rope.freq_base", "finite")),
        ({"llama.attention.layer_norm_rms_epsilon": (F64, math.inf)}, ("layer_norm_rms_epsilon",)),
        ({"llama.context_length": (BOOL, True)}, ("llama.context_length", "True")),
        ({"llama.attention.head_count_kv": (ARRAY, (I32, [2, 1]))}, ("head_count_kv", "per-layer")),
        ({"general.alignment": (U32, 3)}, ("general.alignment", "power of two")),
        ({"llama.rope.scaling.type": (STRING, "magic")}, ("rope.scaling.type", "'magic'")),
        ({"split.count": (U32, 3)}, ("split.count",)),
        (
            {"tokenizer.ggml.model": (STRING, "gpt2"), "tokenizer.ggml.merges": (ARRAY, (STRING, ["zz qq"]))},
            ("out of vocabulary",),
        ),
        (
            {"tokenizer.ggml.model": (STRING, "gpt2"), "tokenizer.ggml.merges": (ARRAY, (STRING, ["ab"]))},
            ("merges", "space"),
        ),
        (
            {"tokenizer.ggml.tokens": (ARRAY, (STRING, [*TOKENS[:-1], "x" * 20_000]))},
            ("tokenizer.ggml.tokens", "too long"),
        ),
    ],
)
def test_one_bad_metadata_value_is_one_line(tmp_path: Path, change: dict[str, Any], words: tuple[str, ...]) -> None:
    refused(tiny_llama(tmp_path / "m.gguf", **change), *words)


def test_a_non_utf8_string_value_is_one_line(tmp_path: Path) -> None:
    data = gguf_bytes(llama_meta(**{"general.name": (STRING, b"\xff\xfe")}), llama_tensors())
    refused(write(tmp_path / "u.gguf", data), "general.name", "not UTF-8")


def test_a_missing_token_embedding_is_one_line(tmp_path: Path) -> None:
    tensors = [t for t in llama_tensors() if t[0] != "token_embd.weight"]
    refused(write(tmp_path / "e.gguf", gguf_bytes(llama_meta(), tensors)), "missing tensor 'token_embd.weight'")


def test_overlapping_tensor_offsets_are_refused(tmp_path: Path) -> None:
    tensors = llama_tensors()
    offsets = [0] * len(tensors)  # every tensor at the same bytes: aliased weights
    refused(write(tmp_path / "o.gguf", gguf_bytes(llama_meta(), tensors, offsets=offsets)), "overlap")


def test_a_tensor_past_the_end_and_a_misaligned_one_are_refused(tmp_path: Path) -> None:
    tensors = llama_tensors()
    refused(
        write(tmp_path / "p.gguf", gguf_bytes(llama_meta(), tensors, offsets=[10**9] * len(tensors))), "past the end"
    )
    refused(write(tmp_path / "q.gguf", gguf_bytes(llama_meta(), tensors, offsets=[4] * len(tensors))), "alignment")


def test_nan_rope_freqs_are_one_line(tmp_path: Path) -> None:
    nan = struct.pack("<f", math.nan) * 2
    data = gguf_bytes(llama_meta(), [*llama_tensors(), ("rope_freqs.weight", [2], 0, nan)])
    refused(write(tmp_path / "r.gguf", data), "rope_freqs.weight", "finite")


@pytest.mark.parametrize(
    "data, words",
    [
        (b"", ("not a readable GGUF",)),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 0)[:10], ("not a readable GGUF",)),
        (b"GGUF" + struct.pack("<IQQ", 1, 0, 0), ("version",)),
        (b"GGUF" + struct.pack(">IQQ", 3, 0, 0), ("big-endian",)),
        (b"GGUF" + struct.pack("<IQQ", 3, 2**40, 0), ("tensor_count",)),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 2**33), ("metadata_kv_count",)),
        (gguf_bytes([("k", 77, 0)], []), ("unknown value type 77",)),
        (gguf_bytes([("k", ARRAY, (ARRAY, 1))], []), ("array of arrays",)),
        (gguf_bytes([("k", STRING, "a"), ("k", STRING, "b")], []), ("appears twice",)),
        (gguf_bytes([], [("t", [8, 8, 8, 8, 8], 0, b"")]), ("5 dimensions",)),
        (gguf_bytes([], [("t", [0], 0, b"")]), ("dimensions [0]",)),
        (gguf_bytes([], [("t", [2**40, 2**40], 0, b"")]), ("dimensions",)),
        (gguf_bytes([], [("t", [4], 999, b"\0" * 16)]), ("unknown ggml type 999",)),
        (gguf_bytes([], [("t", [33], 8, b"\0" * 34)]), ("Q8_0 blocks of 32",)),
        (gguf_bytes([], [("t", [4], 0, b"\0" * 16), ("t", [4], 0, b"\0" * 16)]), ("appears twice",)),
    ],
)
def test_header_lies_are_one_line(tmp_path: Path, data: bytes, words: tuple[str, ...]) -> None:
    refused(write(tmp_path / "h.gguf", data), *words)


# ---- generated ---------------------------------------------------------------------------
KEYS = [
    "llama.block_count",
    "llama.context_length",
    "llama.embedding_length",
    "llama.feed_forward_length",
    "llama.attention.head_count",
    "llama.attention.head_count_kv",
    "llama.attention.key_length",
    "llama.attention.value_length",
    "llama.attention.layer_norm_rms_epsilon",
    "llama.rope.freq_base",
    "llama.expert_count",
    "llama.expert_used_count",
    "llama.attention.sliding_window",
    "llama.rope.scaling.type",
    "llama.rope.scaling.factor",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.add_bos_token",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.scores",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.model",
    "tokenizer.ggml.pre",
    "tokenizer.ggml.merges",
    "general.architecture",
    "general.alignment",
    "split.count",
]
SCALARS = st.one_of(
    st.tuples(st.just(U32), st.integers(0, 2**32 - 1)),
    st.tuples(st.just(I32), st.integers(-(2**31), 2**31 - 1)),
    st.tuples(st.just(U64), st.integers(0, 2**64 - 1)),
    st.tuples(st.just(I64), st.integers(-(2**63), 2**63 - 1)),
    st.tuples(st.just(F32), st.floats(width=32)),
    st.tuples(st.just(F64), st.floats()),
    st.tuples(st.just(BOOL), st.booleans()),
    st.tuples(st.just(STRING), st.text(max_size=12)),
    st.tuples(st.just(U32), st.sampled_from([0, 1, 2, 3, 16, 1024, 2**31 - 1])),
)
ARRAYS = st.one_of(
    st.tuples(st.just(ARRAY), st.tuples(st.just(I32), st.lists(st.integers(-5, 40), max_size=20))),
    st.tuples(st.just(ARRAY), st.tuples(st.just(F32), st.lists(st.floats(width=32), max_size=20))),
    st.tuples(st.just(ARRAY), st.tuples(st.just(STRING), st.lists(st.text(max_size=4), max_size=20))),
)


@FAST
@given(changes=st.dictionaries(st.sampled_from(KEYS), st.one_of(SCALARS, ARRAYS, st.none()), min_size=1, max_size=3))
def test_generated_metadata_values_end_in_a_zoo_error_or_load(tmp_path: Path, changes: dict[str, Any]) -> None:
    path = tiny_llama(tmp_path / "g.gguf", **changes)
    try:
        everything(path)
    except ZooError as exc:
        assert "\n" not in str(exc)


@FAST
@given(
    counts=st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1)),
    meta=st.lists(st.tuples(st.text(max_size=8), st.one_of(SCALARS, ARRAYS)), max_size=4),
    dims=st.lists(st.integers(0, 2**64 - 1), min_size=0, max_size=6),
    kind=st.integers(0, 50),
    offset=st.integers(0, 2**64 - 1),
    tail=st.binary(max_size=64),
)
def test_generated_headers_end_in_a_zoo_error(
    tmp_path: Path, counts: tuple[int, int], meta: list[Any], dims: list[int], kind: int, offset: int, tail: bytes
) -> None:
    body = b"".join(
        struct.pack("<Q", len(k.encode())) + k.encode() + struct.pack("<I", t) + _value(t, v) for k, (t, v) in meta
    )
    info = struct.pack("<Q", 1) + b"t" + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
    data = b"GGUF" + struct.pack("<IQQ", 3, *counts) + body + info + struct.pack("<IQ", kind, offset) + tail
    with pytest.raises(ZooError):
        everything(write(tmp_path / "h.gguf", data))


def _value(kind: int, v: Any) -> bytes:
    from tests.hub.gguf.hostile import value

    return value(kind, v)


def test_seeded_mutations_of_a_valid_header_end_in_a_zoo_error_or_load(tmp_path: Path) -> None:
    """A few hundred random byte edits of the tiny file's header (tensor data left alone):
    each loads or is one ZooError."""
    original = tiny_llama(tmp_path / "ok.gguf").read_bytes()
    header_end = original.index(b"blk.0.ffn_down.weight") + 64
    rng = random.Random(24)
    for i in range(300):
        data = bytearray(original)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(4, header_end)
            data[at] = rng.choice([0, 0xFF, 0x7F, 0x80, rng.randrange(256)])
        path = write(tmp_path / f"m{i % 4}.gguf", bytes(data))
        try:
            g = GGUFCheckpoint(path)
            spec_from_gguf(g)
            gguf_tokenizer(g)
            for name in g.tensors:
                g.tensor(name)
        except ZooError as exc:
            assert "\n" not in str(exc)


def test_refusals_are_checkpoint_errors(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError):
        GGUFCheckpoint(write(tmp_path / "z.gguf", b"GGUF" + b"\0" * 30))
