"""`zoo generate`: continue a prompt with a checkpoint's weights and its own tokenizer.

Text is printed as tokens arrive: the new tokens are decoded together each step and only
the part not yet printed is written, so multi-token characters and merges print correctly.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol


class Tokenizer(Protocol):
    """What the command needs of a ``tokenizers.Tokenizer``."""

    def encode(self, text: str) -> Any: ...

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str: ...


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("generate", help="continue a prompt with a checkpoint, streaming tokens")
    p.add_argument("prompt", help="text to continue")
    p.add_argument("--weights", required=True, metavar="REPO_OR_DIR",
                   help="a Hugging Face repo id or a local folder with config.json, safetensors and tokenizer.json")
    p.add_argument("--revision", help="hub revision (branch, tag or commit)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--dtype", default="float32", help="float32, bfloat16 or float16")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ... (auto: cuda when available)")
    p.set_defaults(func=run_generate)


def load_checkpoint(weights: str, revision: str | None, dtype: str, device: str) -> tuple[Any, Path]:
    """The model and the folder it came from (zoo.hub resolves repo ids and loads weights)."""
    from zoo.hub.download import resolve_checkpoint
    from zoo.hub.loading import from_pretrained

    folder = resolve_checkpoint(weights, revision=revision)
    return from_pretrained(folder, dtype=dtype, device=device), folder


def load_tokenizer(folder: Path) -> Tokenizer:
    """The checkpoint's own tokenizer.json (the tokenizers library; no remote code)."""
    from tokenizers import Tokenizer as HFTokenizer

    from zoo.errors import CheckpointError

    path = folder / "tokenizer.json"
    if not path.is_file():
        raise CheckpointError(f"{path}: missing; zoo generate needs the checkpoint's tokenizer.json")
    try:
        return HFTokenizer.from_file(str(path))
    except Exception as exc:  # the tokenizers library raises plain Exceptions
        raise CheckpointError(f"{path}: not a readable tokenizer.json: {exc}") from None


def eos_token_ids(folder: Path) -> list[int]:
    """End-of-sequence ids from generation_config.json, else config.json (checked in zoo.hub.config)."""
    from zoo.hub.config import eos_token_ids as read_ids

    return read_ids(folder)


def text_pieces(tokenizer: Tokenizer, tokens: Iterable[int], context: list[int] | None = None) -> Iterator[str]:
    """The decoded text of a token stream, piece by piece as it becomes printable.

    Tokens are decoded after ``context`` (the prompt) so that spaces and merges at the
    boundary come out as the tokenizer writes them.
    """
    ids: list[int] = list(context or [])
    printed = tokenizer.decode(ids, skip_special_tokens=True) if ids else ""
    for token in tokens:
        ids.append(token)
        text = tokenizer.decode(ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):  # an incomplete multi-byte character: wait for the rest
            continue
        if text.startswith(printed):
            yield text[len(printed) :]
        printed = text


def _device(name: str) -> str:
    if name != "auto":
        return name
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def run_generate(args: argparse.Namespace) -> int:
    import torch

    from zoo.generation import stream
    from zoo.sampling import SamplingSettings

    SamplingSettings(args.temperature, args.top_k, args.top_p)  # bad values fail before loading
    model, folder = load_checkpoint(args.weights, args.revision, args.dtype, _device(args.device))
    tokenizer = load_tokenizer(folder)
    prompt_ids = tokenizer.encode(args.prompt).ids
    eos = eos_token_ids(folder)
    ids = torch.tensor([prompt_ids], dtype=torch.long)
    tokens = stream(model, ids, args.max_new_tokens, args.temperature, args.top_k, args.top_p, args.seed,
                    eos_token_id=eos or None)
    count = 0
    start = time.perf_counter()

    def counted() -> Iterator[int]:
        nonlocal count
        for step in tokens:
            token = int(step[0])
            if token in eos:
                return
            count += 1
            yield token

    sys.stdout.write(args.prompt)
    sys.stdout.flush()
    for piece in text_pieces(tokenizer, counted(), context=prompt_ids):
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    elapsed = time.perf_counter() - start
    sys.stderr.write(f"{count} tokens in {elapsed:.2f} s ({count / elapsed if elapsed else 0:.1f} tokens/s)\n")
    return 0
