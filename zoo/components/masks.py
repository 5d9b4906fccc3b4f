"""Which keys each query may see: causality, sliding windows, padding.

The function is public API as ``zoo.specs.interfaces.visible_keys`` (plugins use that name);
``visible`` is kept here for the built-in attention kinds.
"""

from __future__ import annotations

from zoo.specs.interfaces import visible_keys as visible

__all__ = ["visible"]
