"""Where zoo keeps what it can recompute: ``$ZOO_CACHE_DIR``, else ``$XDG_CACHE_HOME/zoo``,
else ``~/.cache/zoo``.

One place for the rule, so that `zoo list`'s table and the measured host roofline
(``zoo.analysis.host_probe``) land in the same folder, and tests redirect both at once.
A cache that cannot be read or written is ignored by its users, never an error.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    if os.environ.get("ZOO_CACHE_DIR"):
        return Path(os.environ["ZOO_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "zoo"
