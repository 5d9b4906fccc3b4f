"""Write a GGUF at SmolLM2-135M's exact shape with seeded random weights, quantized as the
real ``SmolLM2-135M-Instruct-Q4_1.gguf`` is, for timing zoo against llama.cpp on one file.

No weights can be downloaded here, and speed and memory depend on the shapes and the block
types only, not on the values. The layout follows llama.cpp's own tools:

- llama architecture: d 576, 30 layers, 9 heads (head 64), 3 KV heads, FFN 1536, vocab
  49152, RoPE base 100000, tied embeddings (no ``output.weight``);
- every layer matrix ``Q4_1`` (``--type q4_1``); the token table, which is also the head,
  ``Q8_0``: llama-quantize gives the output matrix ``Q6_K``, or ``Q8_0`` where the width is
  not a multiple of 256 (576 is not), and a tied table is treated as the output;
- norms ``F32``; blocks written with gguf-py's own quantizers (``gguf.quants``);
- a byte-level BPE vocabulary llama.cpp accepts (``gpt2`` model, ``smollm`` pre-tokenizer):
  3 special tokens, the 256 byte symbols, then two-byte merges up to 49152 tokens.

    python bench/make_smollm_gguf.py /tmp/smollm2-135m-q4_1.gguf
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import numpy as np

D, LAYERS, HEADS, KV_HEADS, FFN, VOCAB, CONTEXT = 576, 30, 9, 3, 1536, 49152, 8192
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def byte_symbols() -> list[str]:
    """GPT-2's byte -> printable character table (the symbols byte-level BPE tokens are made of)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def vocabulary() -> tuple[list[str], list[str], list[int]]:
    """Tokens, merges and token types: specials, bytes, then pairs of bytes in a fixed order."""
    symbols = byte_symbols()
    tokens, merges = [*SPECIALS, *symbols], []
    pairs = ((a, b) for a in symbols for b in symbols)
    while len(tokens) < VOCAB:
        a, b = next(pairs)
        tokens.append(a + b)
        merges.append(f"{a} {b}")
    types = [3] * len(SPECIALS) + [1] * (len(tokens) - len(SPECIALS))
    return tokens, merges, types


def tensors(rng: np.random.Generator) -> Iterator[tuple[str, np.ndarray, str]]:
    """(GGUF name, float32 values in PyTorch shape order, the GGML type to store them as),
    one at a time so that only one float matrix is alive."""
    head = D // HEADS
    yield "token_embd.weight", rng.normal(0, 0.02, (VOCAB, D)).astype(np.float32), "Q8_0"
    yield "output_norm.weight", np.ones(D, np.float32), "F32"
    for i in range(LAYERS):
        shapes = {
            "attn_q": (HEADS * head, D),
            "attn_k": (KV_HEADS * head, D),
            "attn_v": (KV_HEADS * head, D),
            "attn_output": (D, HEADS * head),
            "ffn_gate": (FFN, D),
            "ffn_up": (FFN, D),
            "ffn_down": (D, FFN),
        }
        for name, shape in shapes.items():
            yield f"blk.{i}.{name}.weight", rng.normal(0, 0.02, shape).astype(np.float32), "Q4_1"
        yield f"blk.{i}.attn_norm.weight", np.ones(D, np.float32), "F32"
        yield f"blk.{i}.ffn_norm.weight", np.ones(D, np.float32), "F32"


def write(path: Path, seed: int) -> Path:
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("SmolLM2-135M-shaped random Q4_1")
    w.add_block_count(LAYERS)
    w.add_context_length(CONTEXT)
    w.add_embedding_length(D)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_dimension_count(D // HEADS)
    w.add_rope_freq_base(100000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(VOCAB)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_1)
    tokens, merges, types = vocabulary()
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_merges(merges)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)
    for name, values, kind in tensors(np.random.default_rng(seed)):
        qtype = gguf.GGMLQuantizationType[kind]
        raw = gguf.quants.quantize(values, qtype)
        w.add_tensor(name, raw, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, nargs="?", default=Path("/tmp/smollm2-135m-q4_1.gguf"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(write(args.path, args.seed), f"{args.path.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
