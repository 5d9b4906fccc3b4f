"""The decode-against-context plot's legend names only the kinds of point it draws: a plot of
predictions alone says nothing of "measured"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from zoo.harness.report import context_plots

pytest.importorskip("matplotlib")


def _legend(frame: pd.DataFrame, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    seen: list[Any] = []
    monkeypatch.setattr(context_plots, "_save", lambda fig, path: seen.append(fig) or path)
    context_plots.plot_decode_against_context(frame, [], "t", tmp_path / "t.png")
    return [text.get_text() for text in seen[0].axes[0].get_legend().get_texts()]


@pytest.mark.parametrize(
    "sources,expected",
    [
        (["predicted", "predicted"], ["mha", "predicted"]),
        (["measured", "predicted"], ["mha", "measured", "predicted"]),
        (["measured", "measured"], ["mha", "measured"]),
    ],
)
def test_the_legend_names_only_the_kinds_drawn(
    sources: list[str], expected: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    frame = pd.DataFrame(
        {
            "label": ["mha", "mha"],
            "context": [4096, 8192],
            "decode_tokens_per_s": [50.0, 40.0],
            "decode_source": sources,
            "decode_basis": ["h100-sxm roofline"] * 2,
        }
    )
    assert _legend(frame, monkeypatch, tmp_path) == expected


def test_points_past_max_seq_len_are_crossed_and_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {
            "label": ["mha", "mha"],
            "context": [4096, 8192],
            "decode_tokens_per_s": [50.0, 40.0],
            "decode_source": ["predicted"] * 2,
            "decode_basis": ["h100-sxm roofline"] * 2,
            "note": [None, "beyond max_seq_len 4,096"],
        }
    )
    assert _legend(frame, monkeypatch, tmp_path) == ["mha", "predicted", "beyond max_seq_len"]


def test_log_axes_read_as_plain_numbers_and_legends_as_short_labels(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from zoo.harness.report import plots

    seen: list[Any] = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: seen.append(fig) or path)
    hybrid = {"layers": {"0::4,1::4,2::4": {"attention": {"kind": "mamba"}}}}
    rows = [
        {"values": values, "analysis": {"kv_curve": [[256, 2**20], [1024, 2**22], [4096, 2**24]]}}
        for values in ({"layers": {}}, hybrid)
    ]
    plots.plot_kv_against_context(rows, "t", tmp_path / "t.png")
    (ax,) = seen[0].axes
    seen[0].canvas.draw()
    ticks = [
        t.get_text()
        for axis in (ax.xaxis, ax.yaxis)
        for minor in (False, True)
        for t in axis.get_ticklabels(minor=minor)
        if t.get_text()
    ]
    assert ticks and not any("times" in t or "^" in t for t in ticks)
    assert "2" in ticks or "20" in ticks or "2,000" in ticks  # a 2 between decades, written plainly
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["layers=none", "mamba ×3/4"]
