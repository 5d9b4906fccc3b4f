"""Analytic FLOPs and roofline inputs against what runs: FlopCounterMode on zoo's own forward
(matrix products, convolutions, attention), with the elementwise ops it does not count
written out here, and hand counts of the presets' published shapes."""

from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode

from zoo.analysis.counts import (
    decode_bytes_per_step,
    forward_flops,
    matmul_params,
    weight_bytes_read,
)
from zoo.analysis.devices import gpu_peaks
from zoo.analysis.encoder import encoder_weight_bytes_read
from zoo.components.attention import bidirectional_keys_seen
from zoo.components.kernels import preferring
from zoo.harness.phases.decode import Decode
from zoo.harness.run_config import make_config
from zoo.model.build import as_spec, build
from zoo.specs.visibility import visible_keys

MAMBA2 = {
    "name": "tiny-mamba2",
    "vocab_size": 64,
    "d_model": 32,
    "n_layers": 2,
    "max_seq_len": 256,
    "norm": {"kind": "rmsnorm"},
    "positional": {"kind": "none"},
    "ffn": {"kind": "none"},
    "attention": {"kind": "mamba2", "n_heads": 4, "head_dim": 16, "state_size": 8, "chunk_size": 16},
}


def counted(model, ids) -> dict[str, int]:
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(ids)
    return {str(op).removeprefix("aten."): n for op, n in counter.get_flop_counts()["Global"].items()}


def test_t5_small_decode_flops_charge_the_cross_projections_once_per_prompt():
    # hand count (t5-small: d 512, 8 heads x 64, FFN 2048, 6 decoder layers, untied head 32128 x 512):
    # per layer self q,k,v,o and cross q,o (6 x 512^2) and the FFN (2 x 512 x 2048); cross k,v not run
    per_layer = 6 * 512 * 512 + 2 * 512 * 2048
    matmul = 2 * (6 * per_layer + 32128 * 512)
    scores = 6 * (4 * 8 * 64 * 16 + 4 * 8 * 64 * 64)  # self: 16 keys; cross: 64 memory tokens
    assert forward_flops("t5-small", 1, 16, memory_len=64) == matmul + scores == 77_922_304


def test_t5_small_decode_roofline_reads_decoder_weights_self_and_cross_kv():
    # hand count, bf16: decoder layers (self q,k,v,o, cross q,o, FFN 2 x 512 x 2048, 3 norm scales) without
    # cross k,v, the final norm, the untied head 32128 x 512; self K/V at the midpoint 1 + 64 and cross
    # K/V of 128 memory tokens (6 layers x 2 x 512 each); at 3.35 TB/s, memory-bound
    weights = 6 * (6 * 512 * 512 + 2 * 512 * 2048 + 3 * 512) + 512 + 32128 * 512 + 32 * 8  # + relative buckets
    kv = 6 * 2 * 512 * (1 + 64) + 6 * 2 * 512 * 128
    config = make_config(prompt_len=128, gen_len=128, dtype="bfloat16")
    line = Decode().predict(as_spec("t5-small"), config, gpu_peaks("h100-sxm"), torch.bfloat16)
    assert abs(line["tokens_per_s"] - 3.35e12 / (2 * (weights + kv))) < 1e-6 * line["tokens_per_s"]


def test_a_recurrent_state_is_read_and_written_back_each_decode_step():
    spec = as_spec("mamba-130m")
    # hand count: 24 layers x (conv 1536 x 4 in bf16 + ssm 1536 x 16 in float32), each read and written
    state = 24 * (1536 * 4 * 2 + 1536 * 16 * 4)
    assert decode_bytes_per_step(spec, 1, 100) == weight_bytes_read(spec) + 2 * state


def test_mamba_decode_flops_are_the_counted_products_plus_the_elementwise_update():
    spec = as_spec({**MAMBA2, "attention": {"kind": "mamba", "d_state": 8}})
    with preferring("reference"):  # torch's convolution, which FlopCounterMode sees; cpu-scan's is one C++ pass
        model = build(spec)
    ids = torch.randint(0, 64, (1, 5))
    ops = counted(model, ids)
    # not counted by FlopCounterMode, per token and layer (d_inner 64, N 8, kernel 4): the scan's
    # 8 per state entry, the dt bias, D skip and gate (5 per channel); the conv is counted (as a
    # convolution). zoo charges 2 per bias of a projection (none here) and none for the norms.
    elementwise = 5 * 2 * 64 * (8 * 8 + 5)
    assert forward_flops(spec, 5, 5) == ops["mm"] + ops["convolution"] + elementwise


def test_mamba2_prefill_model_and_executed_flops():
    spec = as_spec(MAMBA2)
    with preferring("reference"):  # executed FLOPs are the chunked reference's; cpu-scan runs the recurrence
        model = build(spec)
    ids = torch.randint(0, 64, (1, 20))  # 20 tokens: two chunks of 16, the second padded
    ops = counted(model, ids)
    # per token, layer and head (P 16, N 8): the recurrence's 5 P N + 3 P, elementwise
    recurrence = 20 * 2 * 4 * (5 * 16 * 8 + 3 * 16)
    executed = forward_flops(spec, 20, 20, executed=True)
    assert executed == ops["mm"] + ops["bmm"] + ops["convolution"] + recurrence
    assert forward_flops(spec, 20, 20) == ops["mm"] + ops["convolution"] + recurrence  # model FLOPs: no chunk products


def test_each_mixer_parameter_is_charged_once():
    spec = as_spec(MAMBA2)
    # in_proj (32 -> 64 z + 80 conv channels + 4 dt) and out_proj (64 -> 32) per layer, and the tied head
    assert matmul_params(spec) == 2 * (32 * 148 + 64 * 32) + 64 * 32


def test_bert_encoder_flops_leave_out_the_pooler_that_model_ids_does_not_run():
    spec = as_spec(
        {
            "name": "tiny-bert",
            "vocab_size": 64,
            "d_model": 32,
            "n_layers": 2,
            "max_seq_len": 64,
            "norm": {"kind": "layernorm", "bias": True},
            "positional": {"kind": "learned"},
            "attention": {"kind": "mha", "n_heads": 4, "head_dim": 8, "bias": True, "causal": False},
            "ffn": {"kind": "mlp", "hidden": 64, "activation": "gelu", "bias": True},
            "block": {"kind": "post_norm"},
            "embedding": {"kind": "token", "type_vocab_size": 2, "norm": True},
            "head": {"kind": "pooler"},
            "final_norm": False,
        }
    )
    model = build(spec)
    ops = counted(model, torch.randint(0, 64, (1, 12)))
    # zoo charges 2 per bias per row (FlopCounterMode counts none): q,k,v,o (4 x 32) and FFN (64 + 32) per layer
    biases = 2 * 12 * 2 * (4 * 32 + 64 + 32)
    scores = 2 * 4 * 4 * 8 * 12 * 12  # q·kᵀ and probs·v per layer (SDPA's CPU path is not counted here)
    assert forward_flops(spec, 12, 12) == ops["addmm"] + biases + scores  # no pooler: 2 x 32^2 per row less


def test_bidirectional_window_keys_have_edges():
    for length in (1, 5, 64, 129, 300):
        for half in (0, 3, 64):
            time = torch.arange(length)
            mask = visible_keys(time, time, 2 * half + 1 if half else 1, causal=False)
            assert bidirectional_keys_seen(length, half) == int(mask.sum())


def test_bert_encoder_pass_reads_the_position_rows_it_looks_up():
    # hand count, bert-base-uncased (d 768, FFN 3072, 12 layers, biases, two LayerNorms a layer), float32:
    # per layer q,k,v,o (4 x (768^2 + 768)), FFN (768 x 3072 + 3072 + 3072 x 768 + 768), 2 LayerNorms (2 x 1536);
    # the embedding LayerNorm; 128 of the 512 position rows; not the token and token-type tables (lookups of
    # a row per token), nor the pooler (model(ids) does not run it)
    per_layer = 4 * (768 * 768 + 768) + 768 * 3072 + 3072 + 3072 * 768 + 768 + 2 * 1536
    expected = 12 * per_layer + 1536 + 128 * 768
    assert encoder_weight_bytes_read("bert-base-uncased", 128, "float32") == 4 * expected == 4 * 85_154_304
    # past the table's 512 rows, the whole table: never more than exists
    assert encoder_weight_bytes_read("bert-base-uncased", 4096, "float32") == 4 * (12 * per_layer + 1536 + 512 * 768)


GATED_DELTANET = {
    **MAMBA2,
    "name": "tiny-gdn",
    "attention": {
        "kind": "gated_deltanet",
        "n_k_heads": 2,
        "n_v_heads": 4,
        "head_k_dim": 8,
        "head_v_dim": 16,
        "chunk_size": 16,
    },
}


def test_gated_deltanet_prefill_model_and_executed_flops():
    spec = as_spec(GATED_DELTANET)
    with preferring("reference"):  # executed FLOPs are the chunked reference's; cpu-scan runs the recurrence
        model = build(spec)
    ids = torch.randint(0, 64, (1, 20))  # 20 tokens: two chunks of 16, the second padded
    ops = counted(model, ids)  # mm: projections and head; convolution: the depthwise conv; bmm: the chunk products
    layers, heads, C, K, V = 2, 4, 16, 8, 16
    # per token and value head, elementwise (not counted by FlopCounterMode): the recurrence's decay of the
    # state (K V), kᵀS (2 K V), the correction (v - kᵀS) beta (2 V), the rank-one write (2 K V), qᵀS (2 K V)
    recurrence = 20 * layers * heads * (7 * K * V + 2 * V)
    assert forward_flops(spec, 20, 20) == ops["mm"] + ops["convolution"] + recurrence  # model FLOPs
    # executed: the chunk products FlopCounterMode counts (bmm), and the two unit lower-triangular solves
    # per chunk and head it does not (torch.linalg.solve_triangular: C (C - 1) / 2 multiply-adds per column
    # of the d_v and d_k right-hand sides), over the two chunks, the padded one in full
    solves = layers * heads * 2 * C * (C - 1) * (V + K)
    executed = forward_flops(spec, 20, 20, executed=True)
    assert executed == ops["mm"] + ops["bmm"] + ops["convolution"] + solves + recurrence
    assert ops["bmm"] == layers * heads * 2 * (C * C * (4 * K + 2 * V) + 6 * C * K * V)  # the products, by hand
