"""Loading a ~100 MB checkpoint raises peak RSS by at most 1.3x its size.

Measured in a fresh subprocess: the kernel's peak-RSS counter (VmHWM) is reset after imports
and a warm-up build, so only the load itself counts.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import zoo

MEASURE = """
import sys
import zoo
from zoo.hub import loading  # imports and a first build before the baseline


def status(field):
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) * 1024 for line in handle if line.startswith(field + ":"))


zoo.build(zoo.spec("qwen3-0.6b").override({"d_model": 64, "n_layers": 1, "vocab_size": 100, "ffn.hidden": 64}),
         init=False)
with open("/proc/self/clear_refs", "w") as handle:
    handle.write("5")  # reset the peak (VmHWM) to the current RSS: import-time peaks do not count
before = status("VmRSS")
model = zoo.from_pretrained(sys.argv[1], progress=False)
print(status("VmHWM") - before)
"""


def test_peak_rss_of_loading_is_about_one_copy(tmp_path: Path) -> None:
    spec = zoo.spec("llama-3.2-1b").override(
        {
            "d_model": 256,
            "n_layers": 4,
            "vocab_size": 42000,
            "tie_embeddings": False,
            "ffn.hidden": 1024,
            "attention.n_heads": 4,
            "attention.n_kv_heads": 2,
            "attention.head_dim": 64,
        }
    )
    zoo.save_pretrained(zoo.build(spec, seed=0), tmp_path / "ckpt", model_type="llama")
    size = (tmp_path / "ckpt" / "model.safetensors").stat().st_size
    assert 90e6 < size < 110e6
    result = subprocess.run(
        [sys.executable, "-c", MEASURE, str(tmp_path / "ckpt")], capture_output=True, text=True, check=True
    )
    growth = int(result.stdout.strip().splitlines()[-1])
    print(f"RSS growth {growth / 1e6:.1f} MB for {size / 1e6:.1f} MB")
    assert growth <= 1.3 * size, f"peak RSS grew by {growth / 1e6:.1f} MB for a {size / 1e6:.1f} MB checkpoint"
