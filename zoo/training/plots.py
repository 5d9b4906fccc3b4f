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
    """MQAR accuracy against state bytes per sequence, one line per pair count."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    by_pairs: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_pairs[int(row["num_kv_pairs"])].append(row)
    for pairs, group in sorted(by_pairs.items()):
        group = sorted(group, key=lambda r: r["state_bytes_per_sequence"])
        ax.plot([r["state_bytes_per_sequence"] for r in group], [r["accuracy"] for r in group], "o-", label=f"{pairs} pairs")
        for r in group:
            ax.annotate(str(r["variant"]), (r["state_bytes_per_sequence"], r["accuracy"]), fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("state / KV bytes per sequence (bf16)")
    ax.set_ylabel("MQAR recall accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.legend()
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
