"""Active parameters against the figures the model's authors published: zoo's exact count,
under the convention the authors used, printed at their precision, must read as they wrote.
The references are the published texts, copied here with their sources."""

from __future__ import annotations

import json

import pytest

import zoo
from zoo.analysis.published import published_comparison
from zoo.cli import main
from zoo.specs.published import PublishedParams

PUBLISHED = {  # name: (total, active, which tables the active figure counts, source's words)
    # https://mistral.ai/news/mixtral-of-experts: "46.7B total parameters but only uses 12.9B parameters per token"
    "mixtral-8x7b": ("46.7B", "12.9B", "embedding+unembedding"),
    # https://arxiv.org/abs/2508.10925 (gpt-oss model card): 20.9B total, 3.61B active; 116.8B / 5.13B
    "gpt-oss-20b": ("20.9B", "3.61B", "unembedding"),
    "gpt-oss-120b": ("116.8B", "5.13B", "unembedding"),
    # https://huggingface.co/Qwen/Qwen3-30B-A3B: "30.5B in total and 3.3B activated"
    "qwen3-30b-a3b": ("30.5B", "3.3B", "embedding+unembedding"),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_our_count_under_the_published_convention_reads_as_published(name):
    total, active, tables = PUBLISHED[name]
    spec = zoo.spec(name)
    assert (spec.published.total, spec.published.active, spec.published.active_tables) == (total, active, tables)
    ours = published_comparison(spec)["zoo"]
    assert (ours["total"], ours["active"]) == (total, active)


def test_the_conventions_differ_by_the_input_table():
    # gpt-oss-20b: the embedding table is 201,088 x 2,880 = 579,133,440; counting it would say 4.19B, not 3.61B
    count = zoo.count_params(zoo.spec("gpt-oss-20b"))
    assert count.active_with_embedding - count.active == 201_088 * 2_880
    # Mixtral under gpt-oss's convention: 12.75B, which its authors' 12.9B is not (+ 32,000 x 4,096 rows)
    mixtral = zoo.count_params(zoo.spec("mixtral-8x7b"))
    assert mixtral.active_with_embedding - mixtral.active == 32_000 * 4_096


def test_rendering_keeps_the_published_precision_and_rounding():
    nearest = PublishedParams(total="1B", active="3.3B", active_tables="unembedding", source="x")
    down = nearest.model_copy(update={"rounding": "down"})
    assert nearest.render(3_353_032_704, "3.3B") == "3.4B" and down.render(3_353_032_704, "3.3B") == "3.3B"
    assert nearest.render(3_608_307_264, "3.61B") == "3.61B" and nearest.render(20_914_757_184, "20.9B") == "20.9B"
    assert nearest.render(3_605_000_000, "3.61B") == "3.61B" and nearest.render(3_604_999_999, "3.61B") == "3.60B"


def test_zoo_show_puts_both_side_by_side(capsys):
    assert main(["show", "gpt-oss-20b", "--format", "json"]) == 0
    params = json.loads(capsys.readouterr().out)["analysis"]["params"]
    assert params["published"]["active"] == params["published"]["zoo"]["active"] == "3.61B"
    assert params["published"]["zoo"]["active_exact"] == params["active"] == 3_608_307_264
    assert "unembedding" in params["active_counts"] and "not the input embedding" in params["active_counts"]


def test_a_published_figure_must_read_like_one():
    with pytest.raises(zoo.errors.SpecError, match="published"):
        zoo.spec("gpt2").override(
            {"published": {"total": "lots", "active": "1B", "active_tables": "unembedding", "source": "x"}}
        )
