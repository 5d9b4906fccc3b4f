"""Layer selectors of per-layer overrides: '3', '0,2,4', '1-3', '0::2', '5::6'."""

from __future__ import annotations

from zoo.errors import SpecError


def parse_layer_selector(key: str, n_layers: int) -> list[int]:
    """Layer indices named by a selector: '3', '0,2,4', '1-3' (inclusive), '0::2', '5::6'."""
    indices: list[int] = []
    for raw in str(key).split(","):
        item = raw.strip()
        try:
            if ":" in item:
                parts = [int(p) if p.strip() else None for p in item.split(":")]
                if len(parts) > 3:
                    raise ValueError
                indices.extend(range(n_layers)[slice(*parts)])
            elif "-" in item.lstrip("-"):
                lo, hi = (int(p) for p in item.split("-", 1))
                indices.extend(range(lo, hi + 1))
            else:
                indices.append(int(item))
        except ValueError:
            raise SpecError(
                f"layers.{key}: cannot read layer selector {item!r}; allowed: an index '3', "
                "a list '0,2,4', a range '1-3' or a slice '0::2'"
            ) from None
    bad = [i for i in indices if not 0 <= i < n_layers]
    if bad:
        raise SpecError(f"layers.{key}: layer {bad[0]} is out of range; allowed: 0..{n_layers - 1}")
    return sorted(set(indices))
