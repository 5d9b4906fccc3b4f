"""Where decode time goes: torch.profiler over zoo's and transformers' decode steps.

``python bench/vs_transformers.py --profile qwen3 --dtypes bfloat16`` prints, per library
and dtype, the operators by self CPU time over ``--decode`` steps at batch ``--batch[0]``
after a ``--prompt[0]`` prompt, so a missed target comes with the ops that explain it.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile


def profile_decode(checkpoint: Path, args: argparse.Namespace, console: Any) -> None:
    from transformers import AutoModelForCausalLM
    from vs_transformers import hf_runner, zoo_runner

    import zoo

    torch.set_num_threads(args.threads[0])
    batch, prompt = args.batch[0], args.prompt[0]
    max_len = prompt + args.decode + 1
    for dtype in args.dtypes:
        ours = zoo.from_pretrained(str(checkpoint), dtype=dtype).eval()
        theirs = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=getattr(torch, dtype)).eval()
        ids = torch.randint(0, ours.spec.vocab_size, (batch, prompt), generator=torch.Generator().manual_seed(0))
        runners = {
            "zoo": zoo_runner(ours, batch, max_len, compiled=False),
            "transformers": hf_runner(theirs, batch, max_len, args.hf_cache, compiled=False),
        }
        with torch.inference_mode():
            for name, run in runners.items():
                run(ids, 4)  # warm-up
                with profile(activities=[ProfilerActivity.CPU]) as prof:
                    prefill_s, decode_s, _ = run(ids, args.decode)
                console.rule(f"{name} {dtype}: decode {args.decode * batch / decode_s:.2f} tok/s (profiled)")
                table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=40)
                print(table)
        del ours, theirs, runners
