"""A raw GGUF byte writer for hostile tests: it writes whatever it is told (counts that lie,
overlapping offsets, nested arrays), which ``gguf.GGUFWriter`` refuses to; and a valid tiny
llama GGUF (d_model 8, one layer, a 16-token SentencePiece vocabulary) to start lies from."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np

U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12
CODES = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32: "f", BOOL: "?", U64: "Q", I64: "q", F64: "d"}
F32_TYPE = 0  # ggml type id of float32 tensors

Meta = list[tuple[str, int, Any]]  # (key, value type, value); arrays: (item type, items)


def string(text: str | bytes) -> bytes:
    raw = text.encode("utf-8") if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def value(kind: int, v: Any) -> bytes:
    if kind == STRING:
        return string(v)
    if kind == ARRAY:
        item, items = v
        count = items if isinstance(items, int) else len(items)  # an int: a declared count that lies
        body = b"" if isinstance(items, int) else b"".join(value(item, x) for x in items)
        return struct.pack("<IQ", item, count) + body
    return struct.pack("<" + CODES[kind], v) if kind in CODES else b""  # an unknown type: no value


def gguf_bytes(
    meta: Meta,
    tensors: list[tuple[str, list[int], int, bytes]],
    *,
    version: int = 3,
    n_kv: int | None = None,
    n_tensors: int | None = None,
    offsets: list[int] | None = None,
    alignment: int = 32,
) -> bytes:
    """A GGUF file: ``tensors`` are (name, dims innermost first, ggml type, data)."""
    out = b"GGUF" + struct.pack(
        "<IQQ", version, len(tensors) if n_tensors is None else n_tensors, len(meta) if n_kv is None else n_kv
    )
    for key, kind, v in meta:
        out += string(key) + struct.pack("<I", kind) + value(kind, v)
    places, at = [], 0
    for _, _, _, data in tensors:
        places.append(at)
        at += -(-len(data) // alignment) * alignment
    for i, (name, dims, kind, _) in enumerate(tensors):
        where = places[i] if offsets is None else offsets[i]
        out += string(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        out += struct.pack("<IQ", kind, where)
    out += b"\0" * (-len(out) % alignment)
    for _, _, _, data in tensors:
        out += data + b"\0" * (-len(data) % alignment)
    return out


D, FF, VOCAB, HEADS = 8, 16, 16, 2
TOKENS = ["<unk>", "<s>", "</s>", "▁", "a", "b", "c", "d", "e", "f", "g", "h", "▁a", "▁b", "ab", "cd"]


def llama_meta(**changes: tuple[int, Any] | None) -> Meta:
    """The metadata of the tiny llama; ``changes`` (full key names, ``**{"llama.block_count": ...}``)
    replace a key's (type, value) or drop it (None)."""
    meta: dict[str, tuple[int, Any]] = {
        "general.architecture": (STRING, "llama"),
        "general.name": (STRING, "tiny"),
        "llama.block_count": (U32, 1),
        "llama.context_length": (U32, 128),
        "llama.embedding_length": (U32, D),
        "llama.feed_forward_length": (U32, FF),
        "llama.attention.head_count": (U32, HEADS),
        "llama.attention.head_count_kv": (U32, HEADS),
        "llama.attention.layer_norm_rms_epsilon": (F32, 1e-5),
        "llama.rope.freq_base": (F32, 10000.0),
        "tokenizer.ggml.model": (STRING, "llama"),
        "tokenizer.ggml.tokens": (ARRAY, (STRING, TOKENS)),
        "tokenizer.ggml.scores": (ARRAY, (F32, [float(-i) for i in range(VOCAB)])),
        "tokenizer.ggml.token_type": (ARRAY, (I32, [2, 3, 3] + [1] * (VOCAB - 3))),
        "tokenizer.ggml.bos_token_id": (U32, 1),
        "tokenizer.ggml.eos_token_id": (U32, 2),
        "tokenizer.ggml.unknown_token_id": (U32, 0),
    }
    for key, change in changes.items():
        if change is None:
            meta.pop(key, None)
        else:
            meta[key] = change
    return [(k, kind, v) for k, (kind, v) in meta.items()]


def llama_tensors(seed: int = 0) -> list[tuple[str, list[int], int, bytes]]:
    """The tiny llama's float32 tensors (dims innermost first, as GGUF lists them)."""
    rng = np.random.default_rng(seed)
    shapes = {
        "token_embd.weight": (VOCAB, D),
        "output_norm.weight": (D,),
        "blk.0.attn_norm.weight": (D,),
        "blk.0.attn_q.weight": (D, D),
        "blk.0.attn_k.weight": (D, D),
        "blk.0.attn_v.weight": (D, D),
        "blk.0.attn_output.weight": (D, D),
        "blk.0.ffn_norm.weight": (D,),
        "blk.0.ffn_gate.weight": (FF, D),
        "blk.0.ffn_up.weight": (FF, D),
        "blk.0.ffn_down.weight": (D, FF),
    }
    return [
        (name, list(reversed(shape)), F32_TYPE, (rng.standard_normal(shape) * 0.1).astype("<f4").tobytes())
        for name, shape in shapes.items()
    ]


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def tiny_llama(path: Path, **changes: tuple[int, Any] | None) -> Path:
    return write(path, gguf_bytes(llama_meta(**changes), llama_tensors()))
