"""DeBERTa's relative positions: one learned table of relative-distance embeddings per
stack (``rel_embeddings``, optionally LayerNormed: ``norm_rel_ebd: layer_norm``), and the
log buckets that map a query-key distance to a row of it.

The disentangled attention (``zoo.components.disentangled_attention``) projects the table
with its own key and query projections and adds the content-to-position and
position-to-content terms; this module only holds the table and says which row each
(query, key) pair reads. DeBERTa-v3 has no absolute position embeddings
(``position_biased_input: false``); v2 models that add them to the word embeddings set
``absolute`` (a learned table, as BERT's).

Buckets (``position_buckets`` > 0, DeBERTa-v3: 256): distances below half the buckets are
exact, longer ones share logarithmically wider buckets up to ``max_relative_positions``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from pydantic import Field, NonNegativeInt, PositiveInt
from torch import nn

from zoo.specs.hookspecs import hookimpl
from zoo.specs.interfaces import BuildContext, Positional
from zoo.specs.options import Options


class DisentangledOptions(Options):
    position_buckets: NonNegativeInt = Field(256, description="log-bucketed distances (DeBERTa-v3: 256); 0: exact")
    max_relative_positions: PositiveInt | None = Field(
        None, description="the longest distance told apart; default max_seq_len (a config's -1)"
    )
    norm: bool = Field(True, description="a norm of the model's norm kind on the table (norm_rel_ebd: layer_norm)")
    absolute: bool = Field(False, description="also add learned absolute position embeddings (position_biased_input)")


def log_bucket_position(relative: torch.Tensor, buckets: int, max_position: int) -> torch.Tensor:
    """DeBERTa's ``make_log_bucket_position``: distances (int64, any shape) -> bucketed, same shape."""
    sign = torch.sign(relative)
    mid = buckets // 2
    near = (relative < mid) & (relative > -mid)
    magnitude = torch.where(near, torch.full_like(relative, mid - 1), relative.abs())
    # float32 logs as DeBERTa takes them: ceil() turns a last-bit difference into another bucket
    log_span = torch.log(torch.tensor((max_position - 1) / mid, device=relative.device))
    log_pos = torch.ceil(torch.log(magnitude / mid) / log_span * (mid - 1)) + mid
    return torch.where(magnitude <= mid, relative.to(log_pos.dtype), log_pos * sign).long()


class DisentangledPositions(Positional):
    """The relative-distance table (2 * span, d), its norm, and the optional absolute table.

    State-dict names: ``weight`` (rel_embeddings), ``norm.*``, ``absolute``.
    """

    def __init__(self, options: DisentangledOptions, ctx: BuildContext) -> None:
        super().__init__()
        self.buckets = options.position_buckets
        self.max_relative = options.max_relative_positions or ctx.max_seq_len
        self.span = self.buckets or self.max_relative  # rows on each side of distance 0
        self.weight = nn.Parameter(torch.empty(2 * self.span, ctx.d_model))
        self.norm = ctx.make_norm(ctx.d_model) if options.norm else None
        self.absolute = nn.Parameter(torch.empty(ctx.max_seq_len, ctx.d_model)) if options.absolute else None
        self.reset_parameters()

    @classmethod
    def layer_key(cls, options: Options, ctx: BuildContext) -> None:
        """One table per stack, whatever the layers' mixers."""
        return

    def reset_parameters(self) -> None:
        for table in (self.weight, self.absolute):
            if table is not None and not table.is_meta:
                nn.init.normal_(table, std=0.02)

    def params_read(self, positions: int) -> int:
        """The whole relative table and norm; of the absolute table, the rows of ``positions`` tokens."""
        total = sum(p.numel() for p in self.parameters())
        if self.absolute is None:
            return total
        rows, width = self.absolute.shape
        return total - (rows - min(positions, rows)) * width

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return x if self.absolute is None else x + self.absolute[positions].to(x.dtype)  # (B, T, d)

    def table(self) -> torch.Tensor:
        """The relative embeddings the attention projects (2 * span, d), normed if so configured."""
        return self.weight if self.norm is None else self.norm(self.weight)

    def relative(self, query_positions: torch.Tensor, key_positions: torch.Tensor) -> torch.Tensor:
        """Bucketed ``query - key`` distances (B, T, S) for (B, T) queries and (B, S) keys."""
        distance = query_positions[:, :, None] - key_positions[:, None, :]  # (B, T, S)
        if self.buckets > 0:
            distance = log_bucket_position(distance, self.buckets, self.max_relative)
        return distance

    def extra_repr(self) -> str:
        return f"buckets={self.buckets}, max_relative={self.max_relative}, absolute={self.absolute is not None}"


def build_disentangled(options: DisentangledOptions, ctx: BuildContext) -> DisentangledPositions:
    """DeBERTa's relative-position table (read by the ``disentangled`` attention)."""
    return DisentangledPositions(options, ctx)


@hookimpl
def zoo_register_components(register: Callable[..., None]) -> None:
    register(
        "positional", "disentangled", build_disentangled, options=DisentangledOptions, module=DisentangledPositions
    )
