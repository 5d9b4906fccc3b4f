"""T5's bucketed relative position bias: a learned (buckets, heads) table added to scores.

Relative distances ``key - query`` fall into ``num_buckets`` buckets: half of them exact
for small distances, the rest logarithmically wider up to ``max_distance``, beyond which
all distances share the last bucket. A bidirectional table (T5's encoder) spends half its
buckets on keys after the query; a unidirectional one (the decoder's causal self-attention)
maps every key after the query to bucket 0 and spends all buckets on the past.

One module per stack holds the table (zoo builds one positional module per distinct
positional spec, shared by every layer that names it), which is what T5 does by letting
the first layer's attention own the table and handing its bias to the others. T5 scores
are not scaled (``attention.scale: 1``) and cross-attention has no position bias.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from pydantic import Field, PositiveInt, model_validator
from torch import nn

from zoo.specs.hookspecs import hookimpl
from zoo.specs.interfaces import BuildContext, Positional
from zoo.specs.options import Options


class RelativeBucketsOptions(Options):
    num_buckets: PositiveInt = Field(32, description="buckets of the learned table (T5: 32)")
    max_distance: PositiveInt = Field(128, description="distances from here on share the last bucket")
    bidirectional: bool | None = Field(
        None, description="separate buckets for keys after the query; default: true when the attention is not causal"
    )

    @model_validator(mode="after")
    def _room_for_log_buckets(self) -> RelativeBucketsOptions:
        exact = self.num_buckets // (4 if self.bidirectional is not False else 2)
        if exact < 1:
            raise ValueError(f"num_buckets: {self.num_buckets} leaves no exact bucket; allowed: 4 or more")
        if self.max_distance <= exact:
            raise ValueError(
                f"max_distance: must exceed the {exact} exactly bucketed distances, got {self.max_distance}"
            )
        return self


def relative_position_bucket(
    relative_position: torch.Tensor, bidirectional: bool, num_buckets: int, max_distance: int
) -> torch.Tensor:
    """Bucket index (same shape, int64) of each ``key - query`` distance, as T5 computes it."""
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative_position > 0).long() * num_buckets
        distance = relative_position.abs()
    else:
        distance = (-relative_position).clamp(min=0)  # keys after the query: distance 0
    max_exact = num_buckets // 2
    is_small = distance < max_exact
    # float32 log as T5 does; distance 0 gives -inf here, but only where is_small picks the exact bucket
    log_ratio = torch.log(distance.float() / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + (log_ratio * (num_buckets - max_exact)).long()
    large = large.clamp(max=num_buckets - 1)
    return buckets + torch.where(is_small, distance, large)


class RelativeBuckets(Positional):
    """The learned bias table (num_buckets, n_heads); ``score_bias`` looks it up by distance."""

    def __init__(self, n_heads: int, num_buckets: int, max_distance: int, bidirectional: bool) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.bidirectional = bidirectional
        self.weight = nn.Parameter(torch.empty(num_buckets, n_heads))
        self._buckets: dict[torch.device, torch.Tensor] = {}  # per device: bucket of -M..M (not state)
        # per dtype, on the CPU: the weight it was made from and the bias (H, L) of distances -(L-1)..0
        self._by_distance: dict[torch.dtype, tuple[torch.Tensor, torch.Tensor]] = {}
        self.reset_parameters()

    @classmethod
    def layer_key(cls, options: Options, ctx: BuildContext) -> tuple[int, bool]:
        """Layers with other head counts (or causality) need a table of their own."""
        assert isinstance(options, RelativeBucketsOptions)
        return table_geometry(options, ctx)

    def reset_parameters(self) -> None:
        if not self.weight.is_meta:
            nn.init.normal_(self.weight, std=0.02)

    def score_bias(self, query_positions: torch.Tensor, key_positions: torch.Tensor, n_heads: int) -> torch.Tensor:
        """Bias (B, H, T, S) for queries at (B, T) and keys at (B, S) positions (or times)."""
        if n_heads != self.n_heads:
            raise ValueError(f"relative position table has {self.n_heads} heads, attention asked for {n_heads}")
        relative = key_positions[:, None, :] - query_positions[:, :, None]  # (B, T, S)
        return F.embedding(self._bucket(relative), self.weight).permute(0, 3, 1, 2)  # (B, H, T, S)

    def last_query_bias(self, key_times: torch.Tensor, n_heads: int, dtype: torch.dtype) -> torch.Tensor | None:
        """A cached decode step's bias (1, H, 1, S): a slice of a table of every distance kept
        across steps, one copy where ``score_bias`` makes eight operator calls (the mask of a
        4-layer t5-small bfloat16 step: 115 -> 54 µs, about 1.5% of the step). The table is
        remade when it is too short or the weight it was made from changed (compared whole: 32
        x H values, a read the host makes, so on the CPU only: on a GPU it would synchronise
        every step); autograd, compiled graphs and fake tensors take ``score_bias``."""
        if n_heads != self.n_heads:
            raise ValueError(f"relative position table has {self.n_heads} heads, attention asked for {n_heads}")
        weight, n_keys, device = self.weight, key_times.shape[0], key_times.device
        kept = type(key_times) is torch.Tensor and device.type == "cpu" and weight.device == device
        if not kept or torch.is_grad_enabled() or torch.compiler.is_compiling():
            return super().last_query_bias(key_times, n_heads, dtype)
        made = self._by_distance.get(dtype)
        if made is None or made[1].shape[1] < n_keys or not torch.equal(made[0], weight):
            length = max(n_keys, 2 * made[1].shape[1] if made is not None else 256)
            distances = torch.arange(1 - length, 1, device=device)  # (L,): keys -(L-1)..0 from the query
            table = F.embedding(self._bucket(distances), weight).T.to(dtype).contiguous()  # (H, L)
            made = self._by_distance[dtype] = (weight.detach().clone(), table)
        table = made[1]
        return table[None, :, None, table.shape[1] - n_keys :].contiguous()  # (1, H, 1, S)

    def _bucket(self, relative: torch.Tensor) -> torch.Tensor:
        """``relative_position_bucket`` of each distance, eager by lookup: every distance from
        ``max_distance`` on shares its sign's last bucket, so a table of -M..M (made once per
        device) covers all of them, three operator calls where the formula makes a dozen (a
        t5-small decode step built its relative-bias mask in 4.5% of its time, py-spy). A
        compiled graph keeps the formula (inductor fuses it), as do fake tensors (an analysis
        trace's table would outlive its mode)."""
        M = self.max_distance
        if torch.compiler.is_compiling() or type(relative) is not torch.Tensor:
            return relative_position_bucket(relative, self.bidirectional, self.num_buckets, M)
        table = self._buckets.get(relative.device)
        if table is None:
            span = torch.arange(-M, M + 1, device=relative.device)  # (2M + 1,)
            table = relative_position_bucket(span, self.bidirectional, self.num_buckets, M)
            self._buckets[relative.device] = table
        return table[relative.clamp(-M, M) + M]  # (B, T, S)

    def extra_repr(self) -> str:
        return (
            f"buckets={self.num_buckets}, heads={self.n_heads}, max_distance={self.max_distance}, "
            f"bidirectional={self.bidirectional}"
        )


def table_geometry(options: RelativeBucketsOptions, ctx: BuildContext) -> tuple[int, bool]:
    """What the table reads of its layer: the mixer's heads, and whether it is causal."""
    attention = ctx.layer.attention.options
    bidirectional = options.bidirectional
    if (
        bidirectional is None
    ):  # an encoder stack's table; else the mixer's own causal option (a kind without one is causal)
        bidirectional = not ctx.causal or not bool(getattr(attention, "causal", True))
    return int(attention.n_heads), bidirectional


def build_relative_buckets(options: RelativeBucketsOptions, ctx: BuildContext) -> Positional:
    """T5's relative position bias, one table per stack, bidirectional unless causal."""
    n_heads, bidirectional = table_geometry(options, ctx)
    return RelativeBuckets(n_heads, options.num_buckets, options.max_distance, bidirectional)


@hookimpl
def zoo_register_components(register: Callable[..., None]) -> None:
    register(
        "positional", "relative_buckets", build_relative_buckets, options=RelativeBucketsOptions, module=RelativeBuckets
    )
