"""Sweep plots (matplotlib, PNG): KV cache against context, decode tokens/s against batch
size, parameters against KV bytes per token, training loss curves (``--train-tokens``).
Each is drawn only when the rows hold what it needs (the batch plot needs a ``batch_size``
axis and measured rows), and written whole.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from zoo.files.atomic import write_bytes_atomic
from zoo.harness.sweep.labels import label_of

RUN_KEYS = ("batch_size", "prompt_len", "gen_len", "repeats", "warmup", "compile", "seed", "threads", "device", "dtype")


def _figure():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(7, 4.5), dpi=110)


def _save(fig, path: Path) -> Path:  # type: ignore[no-untyped-def]
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return write_bytes_atomic(path, buffer.getvalue())


def plain_number(value: float, _: Any = None) -> str:
    """A log axis's tick as a number (2, 0.5, 1,024), never 2x10^0."""
    return f"{value:,.0f}" if value >= 10 else f"{value:.2g}"


def plain_log_axes(ax: Any) -> None:
    """Plain numbers on every log axis of ``ax``: each decade, and 2 and 5 between decades."""
    from matplotlib.ticker import FuncFormatter

    for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
        if scale == "log":
            axis.set_major_formatter(FuncFormatter(plain_number))
            axis.set_minor_formatter(FuncFormatter(lambda v, _: plain_number(v) if f"{v:.0e}"[0] in "25" else ""))


def _label(values: Mapping[str, Any], leave_out: Sequence[str]) -> str:
    return label_of({k: v for k, v in values.items() if k not in leave_out}).replace("(base)", "base")


def plot_kv_against_context(rows: Sequence[Mapping[str, Any]], title: str, path: Path) -> Path | None:
    """One line per distinct model (run options left out): KV bytes at batch 1 by context."""
    curves: dict[str, list] = {}
    for row in rows:
        analysis = row.get("analysis") or {}
        if analysis.get("kv_curve"):
            curves.setdefault(_label(row["values"], RUN_KEYS), analysis["kv_curve"])
    if not curves:
        return None
    fig, ax = _figure()
    for label, curve in curves.items():
        ax.plot([c for c, _ in curve], [b / 2**20 for _, b in curve], marker="o", markersize=3, label=label)
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="context length (tokens)",
        ylabel="KV cache, batch 1 (MiB)",
        title=f"{title}: KV cache",
    )
    plain_log_axes(ax)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, path)


def plot_decode_against_batch(rows: Sequence[Mapping[str, Any]], title: str, path: Path) -> Path | None:
    series: dict[str, list[tuple[int, float]]] = {}
    for row in rows:
        measurement = row.get("measurement") or {}
        if "batch_size" in row["values"] and measurement.get("decode_tokens_per_s"):
            series.setdefault(_label(row["values"], ("batch_size",)), []).append(
                (row["values"]["batch_size"], measurement["decode_tokens_per_s"])
            )
    if not series or max(len(v) for v in series.values()) < 2:
        return None
    fig, ax = _figure()
    for label, points in series.items():
        points.sort()
        ax.plot([b for b, _ in points], [t for _, t in points], marker="o", label=label)
    layers = {row.get("measured_n_layers") for row in rows if row.get("measurement")}
    depth = f" ({', '.join(str(n) for n in sorted(layers))} layers measured)" if layers else ""
    ax.set(xscale="log", xlabel="batch size", ylabel="decode tokens/s", title=f"{title}: decode{depth}")
    plain_log_axes(ax)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, path)


def plot_params_against_kv(rows: Sequence[Mapping[str, Any]], title: str, path: Path) -> Path | None:
    points: dict[str, tuple[int, int]] = {}
    for row in rows:
        analysis = row.get("analysis") or {}
        if analysis.get("params_total") and analysis.get("kv_bytes_per_token") is not None:  # an encoder: no KV
            points.setdefault(
                _label(row["values"], RUN_KEYS), (analysis["kv_bytes_per_token"], analysis["params_total"])
            )
    if not points:
        return None
    fig, ax = _figure()
    for label, (kv, params) in points.items():
        ax.scatter([kv / 1024], [params / 1e9])
        ax.annotate(label, (kv / 1024, params / 1e9), fontsize=7, xytext=(4, 4), textcoords="offset points")
    ax.set(
        xscale="log",
        xlabel="KV bytes per token (KiB)",
        ylabel="parameters (billions)",
        title=f"{title}: parameters vs KV",
    )
    plain_log_axes(ax)
    ax.grid(True, which="both", alpha=0.3)
    return _save(fig, path)


def plot_training_loss(rows: Sequence[Mapping[str, Any]], title: str, path: Path) -> Path | None:
    """Each variant's training loss against tokens seen (``--train-tokens``), its held-out
    loss in the legend: the curves say how fast each learns, the legend where it ended."""
    curves = [(row["label"], row["measurement"]) for row in rows if (row.get("measurement") or {}).get("train_curve")]
    if not curves:
        return None
    fig, ax = _figure()
    for label, measurement in curves:
        curve = measurement["train_curve"]
        held = measurement.get("train_held_out_loss")
        ax.plot(
            [t for t, _ in curve],
            [loss for _, loss in curve],
            linewidth=1.2,
            label=label if held is None else f"{label} (held-out {held:.3f})",
        )
    tokenizer = curves[0][1].get("train_tokenizer")
    ax.set(xlabel="training tokens", ylabel=f"training loss (nats/token, {tokenizer})", title=f"{title}: training loss")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def write_plots(frame: Any, rows: Sequence[Mapping[str, Any]], keys: Sequence[str], stem: Path) -> dict[str, Path]:
    """Every plot the rows allow, as ``<stem>-kv-context.png`` and so on."""
    ok = [r for r in rows if r.get("status") == "ok"]
    title = stem.name
    made = {
        "kv_context": plot_kv_against_context(ok, title, stem.with_name(f"{stem.name}-kv-context.png")),
        "decode_batch": plot_decode_against_batch(ok, title, stem.with_name(f"{stem.name}-decode-batch.png")),
        "params_kv": plot_params_against_kv(ok, title, stem.with_name(f"{stem.name}-params-kv.png")),
        "train_loss": plot_training_loss(ok, title, stem.with_name(f"{stem.name}-train-loss.png")),
    }
    return {k: v for k, v in made.items() if v is not None}
