"""``zoo.bench`` eager and with ``compile=True`` on a tiny, 4-layer llama-3.2-1b: time to first
token, decode tokens/s and ``compile_s`` as the harness reports them (CPU, one thread).

    python bench/compile_harness.py
"""

from __future__ import annotations

import argparse

import zoo

TINY = {
    "n_layers": 4,
    "d_model": 64,
    "attention.n_heads": 4,
    "attention.n_kv_heads": 2,
    "attention.head_dim": 16,
    "ffn.hidden": 128,
    "vocab_size": 128,
}

if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    spec = zoo.spec("llama-3.2-1b").override(TINY)
    for compiled in (False, True):
        m = zoo.bench(spec, device="cpu", prompt_len=128, gen_len=17, repeats=5, threads=1, compile=compiled)
        print(
            f"compile={compiled} mode={m.environment.compile_mode} ttft_ms={m.time_to_first_token_s * 1e3:.2f} "
            f"prefill_tok_s={m.prefill_tokens_per_s:.0f} decode_tok_s={m.decode_tokens_per_s:.1f} "
            f"compile_s={getattr(m, 'compile_s', 'n/a')}",
            flush=True,
        )
