"""Phase ``weights``: the weights dtype applied to the built model, and what it did to it.

It runs first (the timed phases then measure the quantized model). With int8/int4 weights
it quantizes the model in place, after taking the unquantized logits on fixed prompts as
the reference (``fidelity_*``); with ``eval_text`` it reports the perplexity of the text
(and, quantized, of the unquantized model too). See ``zoo.harness.quantized``.
"""

from __future__ import annotations

from typing import Any

from zoo.harness.phases.base import Phase, RunContext
from zoo.harness.quantized import prepare_weights
from zoo.harness.run_config import BenchConfig
from zoo.quant import QUANTIZED


class Weights(Phase):
    name = "weights"
    order = 0
    topologies = frozenset({"decoder"})
    options = ("weights_dtype", "weights_group_size", "eval_text")
    fields = ("fidelity_max_logit_error", "fidelity_kl", "eval_perplexity", "eval_perplexity_reference")

    def wanted(self, config: BenchConfig) -> bool:
        return config.weights_dtype in QUANTIZED or config.eval_text is not None

    def measure(self, ctx: RunContext) -> dict[str, Any]:
        ctx.progress("weights")
        ctx.model, fields = prepare_weights(ctx.model, ctx.config, ctx.spec.max_seq_len, ctx.spec.vocab_size)
        return fields
