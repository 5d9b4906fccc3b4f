"""Plots against context length (``--contexts``): memory and decode tokens/s, one curve per
variant on a log2 axis. Measured decode points are filled markers on solid lines, predicted
ones hollow markers on dashed lines (memory is exact analysis: solid); each crossover with
the baseline is a dotted vertical line labelled with its context. Written whole (PNG).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zoo.harness.context_lengths import format_context
from zoo.harness.report.plots import _figure, _save, plain_log_axes

if TYPE_CHECKING:
    import pandas as pd


def _curves(frame: pd.DataFrame, column: str) -> dict[str, list[tuple[int, float, bool]]]:
    """label -> [(context, value, measured)] in context order, values present only."""
    curves: dict[str, list[tuple[int, float, bool]]] = {}
    for record in frame.to_dict("records"):
        value = record.get(column)
        if value is None or value != value:  # NaN
            continue
        measured = record.get("decode_source") == "measured" if column == "decode_tokens_per_s" else True
        curves.setdefault(str(record["label"]), []).append((int(record["context"]), float(value), measured))
    for points in curves.values():
        points.sort()
    return curves


def _draw(ax: Any, curves: Mapping[str, list[tuple[int, float, bool]]], scale: float) -> dict[str, str]:
    """Each segment solid when both its ends were measured, else dashed; markers filled when
    measured. Returns each variant's colour."""
    colors = {}
    for i, (label, points) in enumerate(curves.items()):
        color = colors[label] = f"C{i % 10}"
        for (x1, y1, m1), (x2, y2, m2) in zip(points, points[1:]):
            ax.plot(
                [x1, x2], [y1 / scale, y2 / scale], color=color, linestyle="-" if m1 and m2 else "--", linewidth=1.5
            )
        for x, y, measured in points:
            ax.plot(
                [x],
                [y / scale],
                marker="o",
                markersize=5,
                color=color,
                markerfacecolor=color if measured else "white",
                linestyle="none",
            )
        ax.plot([], [], color=color, marker="o", label=label)  # one legend entry per variant
    return colors


def _mark_beyond(ax: Any, frame: pd.DataFrame, column: str, scale: float) -> bool:
    """A black cross over each point past its model's max_seq_len (the table's note says so
    too): a curve there is the formula carried on, not a length the model takes. Whether any."""
    beyond = [
        (int(r["context"]), float(r[column]) / scale)
        for r in frame.to_dict("records")
        if str(r.get("note") or "").startswith("beyond max_seq_len")
        and r.get(column) == r.get(column)
        and r.get(column) is not None
    ]
    for x, y in beyond:
        ax.plot([x], [y], marker="x", markersize=8, color="black", linestyle="none")
    return bool(beyond)


def _mark_crossovers(ax: Any, items: Sequence[Mapping[str, Any]], measure: str, colors: Mapping[str, str]) -> None:
    """A dotted line in the variant's colour at each crossing, labelled with its context;
    labels of crossings close together are set side by side."""
    placed: list[int] = []
    for item in items:
        if item["measure"] != measure or item["context"] is None:  # None: no crossover among the contexts
            continue
        n, color = item["context"], colors.get(item["variant"], "grey")
        ax.axvline(n, color=color, linestyle=":", linewidth=1)
        verb = "overtakes" if item["after"] == "better" else "falls behind"
        near = sum(1 for other in placed if max(n, other) / min(n, other) < 1.15)
        placed.append(n)
        where = f"{n / 1024:.2f}k" if n >= 1024 else f"{n:.0f}"
        ax.annotate(
            f"{where}: {verb} the baseline",
            (n, 0.97),
            xycoords=("data", "axes fraction"),
            xytext=(-2 - 9 * near, 0),
            textcoords="offset points",
            fontsize=6,
            rotation=90,
            ha="right",
            va="top",
            color=color,
        )


def _style(
    ax: Any, contexts: Sequence[int], ylabel: str, title: str, legend_note: Sequence[bool], beyond: bool = False
) -> None:
    """Axes, ticks and the legend; ``legend_note``: which kinds of point the plot holds
    (measured True, predicted False), each given a legend entry only when present; ``beyond``:
    some points are past max_seq_len (crossed)."""
    from matplotlib.lines import Line2D

    ax.set_xscale("log", base=2)
    ax.set_xticks(list(contexts))
    ax.set_xticklabels([format_context(n) for n in contexts])
    ax.set(xlabel="context length (tokens)", ylabel=ylabel, title=title)
    ax.grid(True, which="both", alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if True in legend_note:
        handles.append(Line2D([], [], color="black", marker="o", linestyle="-"))
        labels.append("measured")
    if False in legend_note:
        handles.append(Line2D([], [], color="black", marker="o", markerfacecolor="white", linestyle="--"))
        labels.append("predicted")
    if beyond:
        handles.append(Line2D([], [], color="black", marker="x", linestyle="none"))
        labels.append("beyond max_seq_len")
    ax.legend(handles, labels, fontsize=7)


def plot_memory_against_context(
    frame: pd.DataFrame, items: Sequence[Mapping[str, Any]], title: str, path: Path
) -> Path | None:
    curves = _curves(frame, "memory_bytes")
    if not curves:
        return None
    fig, ax = _figure()
    colors = _draw(ax, curves, 2**30)
    _mark_crossovers(ax, items, "memory", colors)
    beyond = _mark_beyond(ax, frame, "memory_bytes", 2**30)
    contexts = sorted({c for points in curves.values() for c, _, _ in points})
    _style(ax, contexts, "weights + cache (GiB, exact)", f"{title}: memory vs context", legend_note=(), beyond=beyond)
    return _save(fig, path)


def plot_decode_against_context(
    frame: pd.DataFrame, items: Sequence[Mapping[str, Any]], title: str, path: Path
) -> Path | None:
    curves = _curves(frame, "decode_tokens_per_s")
    if not curves:
        return None
    fig, ax = _figure()
    colors = _draw(ax, curves, 1.0)
    _mark_crossovers(ax, items, "decode tokens/s", colors)
    beyond = _mark_beyond(ax, frame, "decode_tokens_per_s", 1.0)
    ax.set_yscale("log")
    plain_log_axes(ax)  # 2, 5 between the decades: no crowding
    contexts = sorted({c for points in curves.values() for c, _, _ in points})
    bases = sorted({str(b) for b in frame["decode_basis"].dropna()})
    kinds = sorted({measured for points in curves.values() for _, _, measured in points})
    _style(
        ax,
        contexts,
        "decode tokens/s",
        f"{title}: decode vs context\n{'; '.join(bases)}",
        legend_note=kinds,
        beyond=beyond,
    )
    ax.title.set_fontsize(8)
    return _save(fig, path)


def write_context_plots(frame: pd.DataFrame, items: Sequence[Mapping[str, Any]], stem: Path) -> dict[str, Path]:
    """``<stem>-memory-context.png`` and ``<stem>-decode-context.png`` (those the rows allow)."""
    made = {
        "memory_context": plot_memory_against_context(
            frame, items, stem.name, stem.with_name(f"{stem.name}-memory-context.png")
        ),
        "decode_context": plot_decode_against_context(
            frame, items, stem.name, stem.with_name(f"{stem.name}-decode-context.png")
        ),
    }
    return {k: v for k, v in made.items() if v is not None}
