"""`zoo compare --contexts` crossovers against the closed form worked by hand: a Qwen3-Next
layout (three Gated DeltaNet layers of every four) on qwen3-0.6b against full attention.
Both sides are affine in the context, so the crossing is one division of hand counts."""

from __future__ import annotations

import json

from zoo.cli import main

GDN = {
    "kind": "gated_deltanet",
    "n_k_heads": 16,
    "n_v_heads": 32,
    "head_k_dim": 128,
    "head_v_dim": 128,
    "conv_kernel": 4,
}
HYBRID = json.dumps({"0::4,1::4,2::4": {"attention": GDN, "positional": {"kind": "none"}}})

# hand counts, qwen3-0.6b (d 1024, 28 layers, GQA 16 q / 8 kv heads of 128, QK-norm), bfloat16:
# a GQA layer's attention: q 1024 x 2048, k and v 1024 x 1024, o 2048 x 1024, q/k norms 2 x 128
GQA = 1024 * 2048 + 2 * 1024 * 1024 + 2048 * 1024 + 2 * 128
# a Gated DeltaNet layer (key dim 16 x 128 = 2048, value dim 32 x 128 = 4096): in_proj_qkvz 1024 x (2 x 2048 +
# 2 x 4096), in_proj_ba 1024 x (2 x 32), depthwise conv (2 x 2048 + 4096 channels x 4 taps), dt_bias and A_log
# (32 each), the gated norm (128), out_proj 4096 x 1024
DELTANET = 1024 * 12288 + 1024 * 64 + 8192 * 4 + 2 * 32 + 128 + 4096 * 1024
EXTRA_WEIGHT_BYTES = 21 * (DELTANET - GQA) * 2  # 21 of the 28 layers swapped
# per sequence: 21 x (conv window 8192 x 4 in bf16 + recurrent state 32 heads x 128 x 128 in float32)
STATE_BYTES = 21 * (8192 * 4 * 2 + 32 * 128 * 128 * 4)
# K/V per token: 28 layers x 2 x 8 heads x 128 x 2 bytes, against the hybrid's 7 attention layers
SAVED_PER_TOKEN = (28 - 7) * 2 * 8 * 128 * 2


def test_hybrid_crossovers_equal_the_closed_form(capsys):
    assert (
        main(
            [
                "compare",
                "--arch",
                "qwen3-0.6b",
                "--vary",
                f"layers={{}},{HYBRID}",
                "--dtype",
                "bfloat16",
                "--contexts",
                "4k,32k,128k",
                "--analysis-only",
                "--format",
                "json",
            ]
        )
        == 0
    )
    document = json.loads(capsys.readouterr().out)
    found = {item["measure"]: item for item in document["crossovers"]}
    # memory: weights + state + K/V x context, equal where the saved K/V pays for the extra weights and state
    memory = (EXTRA_WEIGHT_BYTES + STATE_BYTES) / SAVED_PER_TOKEN
    # decode (memory-bound at batch 1 on an H100): a step reads the weights and the K/V at its context and
    # reads and writes back the state; the step is taken at the decode's midpoint, context - 16 + 16 // 2
    decode = (EXTRA_WEIGHT_BYTES + 2 * STATE_BYTES) / SAVED_PER_TOKEN + 8
    assert abs(found["memory"]["context"] - memory) < 1 and found["memory"]["after"] == "better"
    assert abs(found["decode tokens/s"]["context"] - decode) < 1 and found["decode tokens/s"]["after"] == "better"
    assert found["memory"]["between"] == [4096, 32768]
    assert round(memory) == 5_696 and round(decode) == 6_232  # the figures, for the reader
