"""The roofline of the host CPU, measured: memory bandwidth and matmul FLOP/s, cached per machine.

A CPU has no spec sheet a row could divide by (the bandwidth a core sees depends on the
board, the memory channels, the VM and the thread count), so the peaks are measured:

- **bandwidth**: a large ``copy_`` (reads and writes every byte once), a large ``sum``
  (reads only: a decode step's weights are read, not written, and a read stream ran 13-15%
  above the copy here) and the one-row products a batch-1 decode step is made of
  (``torch.mv`` in float32, ``F.linear`` of one row in bfloat16: the default paths of
  ``zoo/components/linear.py``), each over a buffer several times the last-level cache, so
  every byte comes from memory. The roofline takes the fastest: it is an upper bound, and a
  bound set by the slower kernel would let a model read above 100% of it. The buffers are
  allocated as ``zoo.build`` re-homes a CPU model's weights (``host_memory.huge_buffer``: huge
  pages where the system gives them), so they read as the weights do: a buffer as first
  allocated in ordinary pages read 12-20% slower on this project's Zen 4 VM than a copy of it,
  and the copy itself cost a 256 MiB in-run sample 0.2 s of its 0.3 (AVX2 EPYC: 219 ms to
  make the copied buffer, 21 ms the huge-page one, which read the same 33-34 GB/s).
- **one-row paths**: on a decode-shaped weight (rows of ``ROW_WIDTH``, where torch's paths
  stream slowest on some CPUs) torch's default one-row product against zoo's fused row kernel
  (``zoo/components/row_product.py``), per dtype: ``row_kernel_faster`` says where the kernel
  won, and a run on this CPU takes it there; its bandwidth joins the roofline's candidates.
- **fetching past the caches**: where a step's weights outgrow the last-level cache, zoo's row
  kernel can fetch them ahead without keeping them (``row_product.past_cache``). Whether that
  helps is the CPU's business: on a Sapphire Rapids Xeon bfloat16 decode ran 1.03-1.12x as fast
  with it, on this project's Zen 4 VM 0.82-0.92x. So the probe reads a decode step's shapes
  of weights (``_step_weights``) with the fetch and without, in turn, and ``past_cache_faster``
  says by dtype where the fetch won; a run takes it only there (``fetches_past_cache``).
- **FLOP/s**: a square matmul per dtype (float32, bfloat16, float16), cache-resident as a
  GEMM's blocking makes it, the size doubled (up to 2048) while a product takes under
  ``MATMUL_QUICK_S``: a 1024 product took 12-18 ms at two threads on an AVX2 EPYC and its
  median read 120-170 GFLOP/s between runs, which put float32 prefills at up to 127% of the
  roof; 2048 read 172. A half precision measured under half float32's is widened by runs
  (``widened_matmul_dtypes``). The same product also goes through oneDNN's linear
  (``zoo.components.onednn``: torch's float32 GEMM is MKL's, which a Zen 4 EPYC ran at 0.8x
  oneDNN's speed); ``onednn_faster`` says by dtype where that won, a run takes it there, and
  ``matmul_flops`` is the faster of the two: what a run's several-row products get.

Each is timed at the thread count torch uses now (``torch.get_num_threads()``), the median of
a few runs after a warm-up. The result is cached as JSON in zoo's cache folder
(``zoo.files.cache``), keyed by a fingerprint of what decides it: CPU model, logical CPUs,
torch version and thread count; a second call on the same machine reads the file. The
probe takes a few seconds and holds ``probe_bytes()`` of memory while it runs (twice that
for a moment, as it re-homes the buffer).
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from zoo.analysis.host_machine import fingerprint, last_level_cache_bytes, machine
from zoo.components import onednn, row_product
from zoo.files import host_memory
from zoo.files.atomic import write_text_atomic
from zoo.files.cache import cache_dir

# 2: one-row paths; 3: the row kernel in C++; 4: a read stream, re-homed buffers; 5: four-stream rows; 6: bfloat16
# rows widened in even/odd order, matmuls up to 2048; 7: buffers in the weights' huge pages; 8: rows read past the
# caches where they outgrow them (past_cache); 9: that fetch where it measured faster (past_cache_faster); 10: matmuls
# through oneDNN's linear too (onednn_faster)
PROBE_FORMAT = 10
PAST_CACHE_TIMES = 2  # bytes over this many times the last-level cache are read past it (past_cache)
CACHE_FILE = "hardware.json"
MIN_PROBE_BYTES, MAX_PROBE_BYTES = 256 << 20, 512 << 20
MATMUL_DTYPES = ("float32", "bfloat16", "float16")
MATMUL_SIZES = (512, 1024, 2048)  # the next when a product of the one before takes under MATMUL_QUICK_S
MATMUL_QUICK_S = 0.02
RUNS = 5
SAMPLE_RUNS = 3  # timed reads of each way in an in-run sample (``read_sample``): ~0.4 s on a 256 MiB buffer
ROW_WIDTH = 1024  # the one-row paths' weight: rows as long as a small model's width


@dataclass(frozen=True)
class HostPeaks:
    """One machine's measured peaks (bytes/s and FLOP/s) and what they were measured on."""

    fingerprint: str  # short hash of ``machine``
    machine: dict[str, Any]  # cpu, logical_cpus, torch, threads
    copy_bytes_per_s: float  # bytes read + written by a large copy_, per second
    gemv_bytes_per_s: dict[str, float]  # weight bytes streamed per second by one-row products, by dtype
    matmul_flops: dict[str, float]  # FLOP/s of a square matmul, by dtype
    probe_bytes: int
    probe_seconds: float
    row_kernel_faster: dict[str, bool] = field(default_factory=dict)  # by dtype: zoo's row kernel beat torch's
    read_bytes_per_s: float = 0.0  # bytes read by a large sum, per second
    past_cache_faster: dict[str, bool] = field(default_factory=dict)  # by dtype: the kernel's fetch past the caches won
    onednn_faster: dict[str, bool] = field(default_factory=dict)  # by dtype: oneDNN's linear beat aten's matmul

    @property
    def bandwidth(self) -> float:
        """The fastest of the bandwidths measured (the roofline is an upper bound)."""
        return max(self.copy_bytes_per_s, self.read_bytes_per_s, *self.gemv_bytes_per_s.values())

    @property
    def widened_matmul_dtypes(self) -> list[str]:
        """The half-precision dtypes whose matmul ran at under half float32's FLOP/s here (no
        native GEMM for them: an AVX2-only CPU's bfloat16 1.2 against float32's 120-172 GFLOP/s),
        whose several-row products a run computes widened to float32
        (``zoo.components.widened``)."""
        wide = self.matmul_flops.get("float32", 0.0)
        return [name for name, flops in self.matmul_flops.items() if name != "float32" and flops < wide / 2]

    def to_json(self) -> dict[str, Any]:
        return {"format": PROBE_FORMAT, **asdict(self)}

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> HostPeaks:
        if record.get("format") != PROBE_FORMAT:
            raise ValueError(f"host probe format {record.get('format')!r}, expected {PROBE_FORMAT}")
        return cls(**{k: v for k, v in record.items() if k != "format"})


def probe_bytes() -> int:
    """The buffer the bandwidth probes stream: four times the last-level cache, within 256-512 MiB."""
    llc = last_level_cache_bytes() or 0
    return min(max(4 * llc, MIN_PROBE_BYTES), MAX_PROBE_BYTES)


def _median_seconds(work: Callable[[], object], runs: int) -> float:
    """Median wall time of ``runs`` calls of ``work`` after one untimed warm-up call."""
    work()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _weights_buffer(rows: int, cols: int) -> torch.Tensor:
    """A float32 (rows, cols) of 0.5 (a bfloat16 view: 0x0000 and 0x3F00, no NaN) in memory
    allocated now as a model's weights are (module doc)."""
    return host_memory.huge_buffer(rows * cols * 4).view(torch.float32).view(rows, cols).fill_(0.5)  # (R, C)


def past_cache(nbytes: int) -> bool:
    """Whether ``nbytes`` read once a step (a decode step's weights, a probe's buffer) are over
    ``PAST_CACHE_TIMES`` this host's last-level cache, so that zoo's row kernel fetches them past
    the caches (``row_product.past_cache``); False where Linux reports no cache.

    Twice, not once: on a 2-core Xeon with 105 MB of L3 (one process, interleaved, compiled
    decode) t5-small's float32 decoder (154 MB, 1.5x the cache) ran 0.95x as fast fetched past
    it, the part that had stayed cached lost; gpt2's bfloat16 (249 MB, 2.4x) 1.03x. The probe
    reads its buffer (four times the cache, within 256-512 MiB) the same way: there the row
    kernel read 23.5 GB/s past the caches against 20.7 through them."""
    cache = last_level_cache_bytes()
    return cache is not None and nbytes > PAST_CACHE_TIMES * cache


def probe_buffer(nbytes: int) -> torch.Tensor:
    """The bandwidth probes' float32 buffer (R, 4096) of about ``nbytes``, R even, in memory
    allocated now as a model's weights are."""
    cols = 4096
    return _weights_buffer(max(nbytes // (4 * cols), 2) // 2 * 2, cols)  # (R, C)


def read_bytes_per_s(buffer: torch.Tensor, runs: int = RUNS) -> float:
    """The bandwidth of reading ``buffer`` whole (a sum): the roofline's figure. A benchmark on a
    shared machine measures it in each of its rounds too (bench/family_speed.py), so that its
    fractions compare figures taken under the same load."""
    return buffer.numel() * buffer.element_size() / _median_seconds(buffer.sum, runs)


def stream_bytes_per_s(buffer: torch.Tensor, runs: int = RUNS) -> float:
    """The fastest read of ``buffer`` (R, C) float32 zoo has now: a sum, or where zoo's row
    kernel builds, its one-row product over the buffer's rows, which reads four streams a
    thread (``zoo/components/row_product_source.py``) and out-read the sum's one by 1.25x on
    this project's Zen 4 VM, fetching the buffer past the caches or not as a run here reads
    weights of that size (``fetches_past_cache``: through them on that VM, where this buffer
    read 0.96-1.01x as fast fetched past them). The roofline is the fastest read, as ``HostPeaks.bandwidth`` is:
    a sum alone would let a decode step built of those products read above 100% of it."""
    rate = read_bytes_per_s(buffer, runs)
    if row_product.available():
        row = torch.full((buffer.shape[1],), 0.25)  # (C,)
        with row_product.past_cache(fetches_past_cache(buffer.nbytes, buffer.dtype)):  # as a run reads such weights
            seconds = _median_seconds(lambda: row_product.row_product(buffer, row, None), runs)
        kernel = buffer.numel() * buffer.element_size() / seconds
        rate = max(rate, kernel)
    return rate


def read_sample() -> float:
    """The read bandwidth now (``stream_bytes_per_s``), over a fresh buffer of the size the
    cached probe streamed (``HostPeaks.probe_bytes``), freed on return: a run on a shared
    machine samples it around its timed phases (``zoo.harness.run``), so that its roofline
    fractions divide by what the memory gave under the run's own load, not by the cached
    probe's moment."""
    with torch.inference_mode():
        return stream_bytes_per_s(probe_buffer(host_peaks().probe_bytes), SAMPLE_RUNS)


def _bandwidths(nbytes: int) -> tuple[float, float, dict[str, float]]:
    """(copy bytes/s, read bytes/s, one-row product bytes/s by dtype) over one buffer of ``nbytes``."""
    buffer = probe_buffer(nbytes)  # (R, C) float32
    rows, cols = buffer.shape
    half = rows // 2
    source, target = buffer[:half], buffer[half:]  # (R/2, C) each
    copy = 2 * source.numel() * 4 / _median_seconds(lambda: target.copy_(source), RUNS)
    read = read_bytes_per_s(buffer)
    vector = torch.full((cols,), 0.25)  # (C,)
    gemv = {"float32": buffer.numel() * 4 / _median_seconds(lambda: torch.mv(buffer, vector), RUNS)}
    weight = buffer.view(torch.bfloat16)  # (R, 2C), the same bytes
    row = torch.full((1, 2 * cols), 0.25, dtype=torch.bfloat16)  # (1, 2C)
    gemv["bfloat16"] = weight.numel() * 2 / _median_seconds(lambda: F.linear(row, weight), RUNS)
    return copy, read, gemv


def _row_paths(nbytes: int, past: dict[str, bool]) -> tuple[dict[str, float], dict[str, bool]]:
    """Bytes/s of zoo's row kernel by dtype (named ``"<dtype> row kernel"``) and whether it beat
    torch's one-row path (``torch.mv`` in float32, ``F.linear`` in bfloat16) on a weight of
    ``nbytes`` in rows of ``ROW_WIDTH``, timed in turn on the same bytes; the kernel fetches
    the weight past the caches as a run here would (``past``: ``_past_cache_paths``)."""
    weight = _weights_buffer(max(nbytes // (4 * ROW_WIDTH), 1), ROW_WIDTH)  # (R, W) float32
    halves = weight.view(torch.bfloat16)  # (R, 2W), the same bytes
    x, x_half = torch.full((ROW_WIDTH,), 0.25), torch.full((2 * ROW_WIDTH,), 0.25, dtype=torch.bfloat16)
    paths = {
        "float32": (weight, lambda: torch.mv(weight, x), lambda: row_product.row_product(weight, x, None)),
        "bfloat16": (
            halves,
            lambda: F.linear(x_half[None], halves),
            lambda: row_product.row_product(halves, x_half, None),
        ),
    }
    rates, faster = {}, {}
    for name, (w, torch_path, kernel) in paths.items():
        size = w.numel() * w.element_size()
        with row_product.past_cache(past_cache(size) and past.get(name, False)):  # as a run reads such weights
            ours = size / _median_seconds(kernel, RUNS)
        theirs = size / _median_seconds(torch_path, RUNS)
        if row_product.available():  # where it cannot be built F.linear ran, not the kernel
            rates[f"{name} row kernel"] = ours
            faster[name] = ours > theirs
    return rates, faster


def _step_weights(flat: torch.Tensor, dtype: torch.dtype) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(weight, row) pairs carved from ``flat`` in ``dtype``: a decode layer's four products at
    width ``ROW_WIDTH`` (qkv (3W, W), out (W, W), up (4W, W), down (W, 4W)), as many layers as
    ``flat``'s bytes hold, each weight a view of its own bytes."""
    width = ROW_WIDTH
    shapes = ((3 * width, width), (width, width), (4 * width, width), (width, 4 * width))
    elements = flat.view(-1).view(dtype)  # (E,): the same bytes
    rows = {cols: torch.full((cols,), 0.25, dtype=dtype) for cols in (width, 4 * width)}  # (cols,)
    pairs, at = [], 0
    while at + sum(o * i for o, i in shapes) <= elements.numel():
        for out_features, in_features in shapes:
            size = out_features * in_features
            pairs.append((elements[at : at + size].view(out_features, in_features), rows[in_features]))  # (O, I)
            at += size
    return pairs


def _past_cache_paths(nbytes: int) -> dict[str, bool]:
    """By dtype: whether zoo's row kernel ran a decode step's products (``_step_weights`` over
    ``nbytes``) faster fetching the weights past the caches than through them: the median of
    per-turn ratios, the two ways timed in turn (their order flipped each turn) on the same
    bytes. Empty where the kernel does not build; a dtype of which not one layer fits in
    ``nbytes`` is left out (runs read it through the caches)."""
    if not row_product.available():
        return {}
    flat = _weights_buffer(max(nbytes // (4 * ROW_WIDTH), 1), ROW_WIDTH)  # (R, W) float32
    faster = {}
    for name in ("float32", "bfloat16"):
        pairs = _step_weights(flat, getattr(torch, name))
        if not pairs:
            continue

        def step(pairs: list[tuple[torch.Tensor, torch.Tensor]] = pairs) -> None:
            for weight, row in pairs:
                row_product.row_product(weight, row, None)

        ratios = []
        for turn in range(RUNS):
            seconds = {}
            for on in (True, False) if turn % 2 else (False, True):
                with row_product.past_cache(on):
                    seconds[on] = _median_seconds(step, 1)
            ratios.append(seconds[False] / seconds[True])
        faster[name] = statistics.median(ratios) > 1.0
    return faster


def fetches_past_cache(nbytes: int, dtype: torch.dtype) -> bool:
    """Whether a step that reads ``nbytes`` of weights in ``dtype`` has zoo's row kernel fetch
    them past the caches: they outgrow the last-level cache (``past_cache``) and the host probe
    measured the fetch faster in that dtype here (``HostPeaks.past_cache_faster``)."""
    if not past_cache(nbytes):
        return False
    return host_peaks().past_cache_faster.get(str(dtype).removeprefix("torch."), False)


def _matmul_paths(name: str) -> tuple[float, bool]:
    """FLOP/s of an (n, n) @ (n, n) product in ``name``'s dtype (n grows while a product is
    quick) by the faster of aten's matmul and oneDNN's linear, and whether oneDNN's was the
    faster (oneDNN only where it runs here and takes the dtype: float16 has no oneDNN linear
    on a CPU without AVX512-FP16)."""
    dtype = getattr(torch, name)
    aten = other = 0.0
    for n in MATMUL_SIZES:
        a = torch.full((n, n), 0.5, dtype=dtype)  # (n, n)
        b = torch.full((n, n), 0.25, dtype=dtype)  # (n, n)
        seconds = _median_seconds(lambda a=a, b=b: a @ b, 3)
        aten = 2 * n**3 / seconds
        if seconds >= MATMUL_QUICK_S:
            break
    if onednn.available():
        try:  # a @ b.T: the same work
            other = 2 * n**3 / _median_seconds(lambda a=a, b=b: onednn.linear(a, b, None), 3)
        except RuntimeError:  # no oneDNN primitive for this dtype here
            other = 0.0
    return max(aten, other), other > aten


def measure() -> HostPeaks:
    """Run the probes now, at torch's current thread count (see the module docstring)."""
    described = machine()
    start = time.perf_counter()
    nbytes = probe_bytes()
    with torch.inference_mode():
        copy, read, gemv = _bandwidths(nbytes)
        past = _past_cache_paths(nbytes)
        kernel_rates, faster = _row_paths(nbytes, past)
        matmuls = {name: _matmul_paths(name) for name in MATMUL_DTYPES}
    seconds = time.perf_counter() - start
    rates = {**gemv, **kernel_rates}
    flops = {name: rate for name, (rate, _) in matmuls.items()}
    onednn_won = {name: won for name, (_, won) in matmuls.items()}
    peaks = (copy, rates, flops, nbytes, seconds, faster, read, past, onednn_won)
    return HostPeaks(fingerprint(described), described, *peaks)


def host_peaks(refresh: bool = False) -> HostPeaks:
    """This machine's peaks at torch's current thread count: from the cache when it holds this
    fingerprint (and ``refresh`` is off), else measured and cached."""
    described = machine()
    key = fingerprint(described)
    path = cache_dir() / CACHE_FILE
    entries = _read_cache(path)
    if not refresh and key in entries:
        try:
            return HostPeaks.from_json(entries[key])
        except (TypeError, ValueError):
            pass  # an older or damaged record: measure again
    peaks = measure()
    entries[key] = peaks.to_json()
    try:
        write_text_atomic(path, json.dumps(entries, indent=1, sort_keys=True) + "\n")
    except OSError:
        pass  # an unwritable cache costs a re-measure next time, nothing else
    return peaks


def _read_cache(path: Path) -> dict[str, Any]:
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return entries if isinstance(entries, dict) else {}
