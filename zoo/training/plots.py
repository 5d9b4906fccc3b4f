"""Training plots (matplotlib, PNG): recall against state bytes, loss curves."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zoo.files.atomic import atomic_path


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_recall(rows: Sequence[dict[str, Any]], path: Path) -> None:
    """MQAR accuracy against state bytes per sequence (log x): a line per pair count through
    the variants in order of state, a marker per variant, so the recall-memory frontier and
    where each mixer falls off it read at a glance."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    by_pairs: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_pairs[int(row["num_kv_pairs"])].append(row)
    names = list(dict.fromkeys(str(r["variant"]) for r in rows))
    markers = dict(zip(names, "osD^vP*Xph<>" * (1 + len(names) // 12)))
    colours = plt.get_cmap("viridis")
    for index, (pairs, group) in enumerate(sorted(by_pairs.items())):
        colour = colours(index / max(1, len(by_pairs) - 1) * 0.85)
        group = sorted(group, key=lambda r: r["state_bytes_per_sequence"])
        ax.plot(
            [r["state_bytes_per_sequence"] for r in group],
            [r["accuracy"] for r in group],
            "-",
            color=colour,
            alpha=0.6,
            label=f"{pairs} pairs",
        )
        for r in group:
            ax.plot(r["state_bytes_per_sequence"], r["accuracy"], markers[str(r["variant"])], color=colour, ms=7)
    handles = [plt.Line2D([], [], color="grey", marker=markers[n], ls="", label=n) for n in names]
    first = ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), title="pairs", fontsize=8)
    ax.add_artist(first)
    ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(1.01, 0.0), title="mixer", fontsize=8)
    from matplotlib.ticker import FuncFormatter  # matplotlib loads with the plot, as in _pyplot

    ax.set_xscale("log")
    byte_ticks = FuncFormatter(lambda v, _: f"{v:,.0f}" if f"{v:.0e}"[0] in "1235" else "")  # plain numbers
    ax.xaxis.set_major_formatter(byte_ticks)
    ax.xaxis.set_minor_formatter(byte_ticks)
    ax.set_xlabel("state / KV bytes per sequence, all layers (K/V bf16, recurrent state float32)")
    ax.set_ylabel("MQAR recall accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)


def plot_losses(curves: dict[str, Sequence[tuple[int, float]]], path: Path) -> None:
    """Training loss against tokens seen, one line per run."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, curve in curves.items():
        ax.plot([t for t, _ in curve], [loss for _, loss in curve], label=label)
    ax.set_xlabel("tokens")
    ax.set_ylabel("training loss")
    ax.legend()
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
