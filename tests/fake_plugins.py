"""Fake installed plugin distributions: a dist-info with an entry point, plus its module.

Put the returned directory on a subprocess's PYTHONPATH and the real entry-point
machinery finds it, without touching the test environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def add_fake_plugin(site: Path, dist: str, entry_name: str, module: str, source: str, version: str = "0.1") -> Path:
    """Write ``{dist}-{version}.dist-info`` declaring ``[zoo] entry_name = module`` and the module."""
    site.mkdir(parents=True, exist_ok=True)
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[zoo]\n{entry_name} = {module}\n")
    (site / f"{module}.py").write_text(textwrap.dedent(source))
    return site


BROKEN = 'raise RuntimeError("this plugin is broken on purpose")\n'


def kind_plugin(kind: str, override: bool = False) -> str:
    """Source of a plugin registering norm kind ``kind`` (an RMSNorm under another name)."""
    return f"""
        import zoo
        from zoo.components.norms import RMSNormOptions, build_rmsnorm

        @zoo.hookimpl
        def zoo_register_components(register):
            register("norm", {kind!r}, build_rmsnorm, options=RMSNormOptions, override={override})
    """


def run_zoo(args: list[str], site: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m zoo ARGS`` in a subprocess with ``site`` on PYTHONPATH."""
    environ = {k: v for k, v in os.environ.items() if k != "ZOO_PLUGINS"}
    if site is not None:
        environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), environ.get("PYTHONPATH", "")) if p)
    environ.update(env)
    return subprocess.run(
        [sys.executable, "-m", "zoo", *args], capture_output=True, text=True, env=environ, cwd=REPO, timeout=120
    )
