"""Learned positions with an offset (BART) against transformers' BartLearnedPositionalEmbedding."""

import pytest
import torch

import zoo
from zoo.components.positional import LearnedPositional

transformers = pytest.importorskip("transformers")


def test_bart_offset_two() -> None:
    from transformers.models.bart.modeling_bart import BartLearnedPositionalEmbedding

    theirs = BartLearnedPositionalEmbedding(16, 8)  # 16 positions, table of 18 rows
    ours = LearnedPositional(18, 8, offset=2)  # max_positions is the table size
    assert ours.weight.shape == theirs.weight.shape == (18, 8)
    with torch.no_grad():
        ours.weight.copy_(theirs.weight)
    ids = torch.zeros(2, 5, dtype=torch.long)
    x = torch.zeros(2, 5, 8)
    positions = torch.arange(5)[None].expand(2, 5)
    torch.testing.assert_close(ours.embed(x, positions), theirs(ids).expand(2, 5, 8))


def test_offset_counts_in_the_parameters() -> None:
    spec = zoo.spec("gpt2").override({"positional.offset": 2})
    assert zoo.count_params(spec).total == zoo.count_params("gpt2").total + 2 * 768
