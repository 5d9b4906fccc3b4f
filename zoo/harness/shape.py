"""The shape of one run by topology: how many tokens each stack sees, decided in one place.

A decoder prefills the prompt and decodes ``gen_len - 1`` more tokens after it; an encoder
runs the prompt through once and keeps no cache; an encoder-decoder runs the prompt through
its encoder (the memory), prefills the decoder's start token and decodes after it. Phases,
the analysis columns, the memory check's messages and the rooflines all read these figures
from ``run_shape`` instead of each testing the topology.
"""

from __future__ import annotations

from dataclasses import dataclass

from zoo.analysis.counts import Topology
from zoo.errors import BenchError
from zoo.harness.run_config import BenchConfig
from zoo.specs.model import ModelSpec


@dataclass(frozen=True)
class RunShape:
    batch: int
    encoder_len: int  # tokens per row through an encoder (0: none)
    prefill_len: int  # tokens per row the decoder's prefill writes (0: no decoder)
    context_len: int  # decoder positions per row cached at the end (an encoder: its input length)
    memory_len: int  # encoder tokens per row the cross-attention keeps (0 without one)
    has_cache: bool
    decode_midpoint: int = 0  # the decoder context halfway through the decode: where per-step figures are taken


def run_shape(topology: Topology, config: BenchConfig) -> RunShape:
    B, P, G = config.batch_size, config.prompt_len, config.gen_len
    if topology == "encoder":
        return RunShape(B, encoder_len=P, prefill_len=0, context_len=P, memory_len=0, has_cache=False)
    if topology == "encoder-decoder":
        return RunShape(
            B, encoder_len=P, prefill_len=1, context_len=G, memory_len=P, has_cache=True, decode_midpoint=1 + G // 2
        )
    return RunShape(
        B, encoder_len=0, prefill_len=P, context_len=P + G, memory_len=0, has_cache=True, decode_midpoint=P + G // 2
    )


def check_shape(spec: ModelSpec, topology: Topology, config: BenchConfig) -> None:
    """The run fits the model's positions: a BenchError naming the lengths otherwise."""
    shape = run_shape(topology, config)
    limit = spec.max_seq_len
    if topology == "decoder" and shape.context_len > limit:
        raise BenchError(
            f"prompt_len + gen_len = {shape.context_len} exceeds max_seq_len={limit} of {spec.name}; "
            f"allowed: at most {limit}"
        )
    if shape.encoder_len > limit:
        raise BenchError(f"prompt_len: {shape.encoder_len} exceeds max_seq_len={limit} of {spec.name}")
