"""Print the KV-cache table of the README: MLA against GQA/MHA of the same width.

``python -m zoo_mla.kv_table`` — every figure comes from zoo's analysis of the specs (the
attention modules' declared cache layouts), none is typed in.
"""

from __future__ import annotations

import zoo


def rows() -> list[tuple[str, int, int]]:
    spec = zoo.spec("deepseek-v2-lite")
    variants = [("MLA (deepseek-v2-lite): latent 512 + rope key 64", spec)]
    for kv_heads in (16, 8, 4, 1):
        label = {16: "MHA, 16 heads x 128", 1: "MQA, 1 KV head x 128"}.get(kv_heads, f"GQA, {kv_heads} KV heads x 128")
        variants.append((label, spec.override({"attention.kind": "gqa", "attention.n_kv_heads": kv_heads})))
    return [(label, zoo.kv_bytes_per_token(s), zoo.kv_cache_bytes(s, 1, 32768)) for label, s in variants]


def main() -> None:
    table = rows()
    base = table[0][1]
    print(
        "| attention (27 layers, d_model 2048, 16 query heads) | KV bytes/token (bf16) | vs MLA | KV cache at 32k "
        "tokens |"
    )
    print("|---|---:|---:|---:|")
    for label, per_token, at_32k in table:
        print(f"| {label} | {per_token:,} | {per_token / base:.2f}x | {at_32k / 2**30:.2f} GiB |")


if __name__ == "__main__":
    main()
