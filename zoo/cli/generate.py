"""`zoo generate`: continue a prompt with a checkpoint's weights and its own tokenizer.

Text is printed as tokens arrive: the new tokens are decoded together each step and only
the part not yet printed is written, so multi-token characters and merges print correctly.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

TOKENIZER_BYTES = 512 << 20  # a tokenizer.json larger than this is refused (real ones are up to ~35 MB)


class Tokenizer(Protocol):
    """What the command needs of a ``tokenizers.Tokenizer``."""

    def encode(self, text: str) -> Any: ...

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str: ...


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("generate", help="continue a prompt with a checkpoint, streaming tokens")
    p.add_argument("prompt", help="text to continue")
    p.add_argument("--weights", required=True, metavar="REPO_OR_DIR",
                   help="a Hugging Face repo id, a local folder with config.json, safetensors and tokenizer.json, "
                        "or a GGUF file (its own tokenizer is used)")
    p.add_argument("--gguf-file", metavar="NAME", help="the .gguf file to download from the repo id in --weights")
    p.add_argument("--revision", help="hub revision (branch, tag or commit)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--dtype", default="float32", help="float32, bfloat16 or float16")
    p.add_argument("--device", default="auto", help="auto (cuda, then mps, then cpu), cpu, cuda, cuda:N, mps (default: auto)")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice; 1 is steadiest on a shared CPU)")
    p.set_defaults(func=run_generate)


def load_checkpoint(weights: str, revision: str | None, dtype: str, device: str,
                    gguf_file: str | None = None) -> tuple[Any, Path]:
    """The model and the folder (or GGUF file) it came from (zoo.hub resolves repo ids)."""
    from zoo.hub.download import resolve_checkpoint
    from zoo.hub.gguf.loading import find_gguf
    from zoo.hub.loading import from_pretrained

    path = find_gguf(weights, gguf_file, revision) or resolve_checkpoint(weights, revision=revision)
    return from_pretrained(path, dtype=dtype, device=device), path  # checks the weights fit first


def load_tokenizer(folder: Path) -> Tokenizer:
    """The checkpoint's own tokenizer.json, or a GGUF file's tokenizer.ggml.* metadata
    (the tokenizers library; no remote code)."""
    from tokenizers import Tokenizer as HFTokenizer

    from zoo.errors import CheckpointError

    if folder.suffix == ".gguf" and folder.is_file():
        from zoo.hub.gguf.reader import GGUFCheckpoint
        from zoo.hub.gguf.tokenizer import gguf_tokenizer

        return gguf_tokenizer(GGUFCheckpoint(folder))  # type: ignore[no-any-return]
    from zoo.files.safe_io import inside, read_text

    path = folder / "tokenizer.json"
    if not path.exists():
        raise CheckpointError(f"{path}: missing; zoo generate needs the checkpoint's tokenizer.json")
    text = read_text(inside(folder, "tokenizer.json", CheckpointError, "tokenizer"), CheckpointError, "tokenizer",
                     limit=TOKENIZER_BYTES)
    try:
        return HFTokenizer.from_str(text)
    except Exception as exc:  # the tokenizers library raises plain Exceptions
        raise CheckpointError(f"{path}: not a readable tokenizer.json: {exc}") from None


def eos_token_ids(folder: Path) -> list[int]:
    """End-of-sequence ids from generation_config.json, else config.json (an id or a list),
    or a GGUF file's EOS, end-of-turn and end-of-message ids."""
    if folder.suffix == ".gguf" and folder.is_file():
        from zoo.hub.gguf.reader import GGUFCheckpoint
        from zoo.hub.gguf.tokenizer import gguf_eos_ids

        return gguf_eos_ids(GGUFCheckpoint(folder))
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


def _checked_options(args: argparse.Namespace) -> str:
    """Fail on bad options before anything loads; the device to use."""
    from zoo.errors import GenerationError

    if not args.prompt.strip():
        raise GenerationError("prompt: empty; give some text to continue, e.g. zoo generate --weights DIR \"Once upon a time\"")
    if args.threads is not None:
        from zoo.harness.run_config import check_threads

        try:
            check_threads(args.threads, "--threads")
        except ValueError as exc:
            raise GenerationError(str(exc)) from None
    import torch

    from zoo.harness.environment import pick_device
    from zoo.model.sampling import SamplingSettings

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    SamplingSettings(args.temperature, args.top_k, args.top_p)
    return str(pick_device(args.device))


def run_generate(args: argparse.Namespace) -> int:
    device = _checked_options(args)  # before torch is imported where it can: bad options fail fast
    import torch

    from zoo.model.generation import stream

    # loading shows its own bar (zoo.hub), on a terminal only
    extra = {"gguf_file": args.gguf_file} if args.gguf_file else {}
    model, folder = load_checkpoint(args.weights, args.revision, args.dtype, device, **extra)
    tokenizer = load_tokenizer(folder)
    prompt_ids = tokenizer.encode(args.prompt).ids
    eos = eos_token_ids(folder)
    ids = torch.tensor([prompt_ids], dtype=torch.long, device=device)
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
