"""transformers is a test-only dependency: zoo saves, loads and generates without it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import FAMILY_PRESETS

REPO = Path(__file__).resolve().parents[2]

PROBE = """
import sys
sys.modules["transformers"] = None  # any import of transformers now raises ImportError
import torch, zoo
from tests.conftest import tiny_spec

for preset in sys.argv[2:]:
    model = zoo.build(tiny_spec(preset), seed=0).eval()
    folder = f"{sys.argv[1]}/{preset}"
    zoo.save_pretrained(model, folder)
    again = zoo.from_pretrained(folder, progress=False)
    ids = torch.arange(10)[None]
    with torch.no_grad():
        assert torch.equal(again(ids), model(ids)), preset
    zoo.generate(again, ids, max_new_tokens=3)
    zoo.ModelSpec.from_hf_config(f"{folder}/config.json")
assert "transformers" not in {name.split(".")[0] for name, module in sys.modules.items() if module is not None}
print("ok")
"""


def test_save_load_and_generate_never_import_transformers(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path), *FAMILY_PRESETS],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]
