"""Build zoo's CPU int4 kernel (``zoo.quant.int4_cpu.SOURCE``) for instruction sets below the
host's and check each against the PyTorch references of its numerics: the AVX2 path
(``vpmaddubsw``, as on CPUs without AVX-512) and the portable scalar path. The build the
library uses takes ``-march=native``; these take ``-mavx2 -mfma -mf16c`` and no flag at all
(x86-64's baseline). Each build takes a minute or two; they are cached like the library's.

    python bench/int4_isa_check.py
"""

from __future__ import annotations

import torch
from torch.utils import cpp_extension

from zoo.quant import int4_cpu
from zoo.quant.int4_cpu import SOURCE

BUILDS = {"avx2": ["-mavx2", "-mfma", "-mf16c"], "scalar": []}
CASES = [(37, 512, 32, 1), (37, 512, 64, 5), (101, 256, 256, 3), (40, 128, 32, 30)]  # (out, in, group, rows)


def build(tag: str, flags: list[str]):  # type: ignore[no-untyped-def]
    return cpp_extension.load_inline(  # SOURCE alone: pybind functions, none of the library's ops
        name=f"zoo_int4_check_{tag}",
        cpp_sources=[SOURCE],
        functions=["int4_q8", "int4_tiles"],
        extra_cflags=["-O3", "-fopenmp", *flags],
        extra_ldflags=["-fopenmp"],
    )


def main() -> None:
    worst = 0.0
    for tag, flags in BUILDS.items():
        module = build(tag, flags)
        for out_features, in_features, group, rows in CASES:
            values = torch.randint(0, 16, (out_features, in_features))
            so = torch.rand(out_features, in_features // group, 2).bfloat16()  # (out, G, 2)
            packed, so = int4_cpu.pack(values, so)
            x = torch.randn(rows, in_features)
            for got, expected in (
                (module.int4_q8(x, packed, so, 64, True), int4_cpu.reference_q8(x, packed, so)),
                (module.int4_tiles(x, packed, so, 32), int4_cpu.reference(x, packed, so)),
            ):
                error = ((got - expected).abs().max() / expected.abs().max()).item()
                worst = max(worst, error)
                print(f"{tag} out={out_features} in={in_features} group={group} rows={rows}: {error:.1e}")
    print(f"largest relative error {worst:.1e}: {'ok' if worst < 1e-5 else 'MISMATCH'}")


if __name__ == "__main__":
    main()
