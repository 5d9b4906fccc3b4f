"""C++ shared by the prompt products that run in weight tiles (zoo's int8 tiles and int4 tiles):
how many weight rows a tile holds, so that every thread gets the same work.

A tile of at most ``tile`` rows per call, handed out by ``at::parallel_for`` one or more to a
thread: with a fixed size, 576 rows over two threads made tiles of 256, 256 and 64, one thread
taking two and the other one, and the layers of 576 rows ran 1.12-1.15x faster at two threads
than at one (SmolLM2-135M's o and down projections, 128 token rows, an AVX2-only AMD EPYC)
against 1.58-1.86x for its other matrices. Now each thread's share is cut into the fewest tiles
of at most ``tile`` rows and all tiles take the same size (in whole units of ``unit`` rows, an
int4 panel's 16): those two int4 layers 1.62-1.67x faster at two threads (interleaved builds in
one process), the same at one; SmolLM2-135M's Q4_1 prefill at two threads 362 -> 426 tokens/s
(``bench/vs_llamacpp.py``, runs minutes apart).
"""

SOURCE = r"""
#include <ATen/Parallel.h>
#include <algorithm>
#include <cstdint>

// Rows a weight tile holds: `N` rows shared equally over the threads, a thread's share in the fewest tiles of at most
// `tile` rows, every tile the same size in whole `unit`s.
static inline int64_t balanced_tile(int64_t N, int64_t tile, int64_t unit) {
  const int64_t threads = std::max<int64_t>(1, at::get_num_threads());
  const int64_t share = (N + threads - 1) / threads;
  const int64_t tiles = threads * std::max<int64_t>(1, (share + tile - 1) / tile);
  const int64_t rows = (N + tiles - 1) / tiles;
  return std::max<int64_t>(unit, (rows + unit - 1) / unit * unit);
}
"""
