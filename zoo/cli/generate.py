"""`zoo generate`: continue a prompt with a checkpoint's weights and its own tokenizer.

Text is printed as tokens arrive: the new tokens are decoded together each step and only
the part not yet printed is written, so multi-token characters and merges print correctly.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from zoo.hub.text import CheckpointText, checkpoint_text, resolve


class Tokenizer(Protocol):
    """What the command needs of a ``tokenizers.Tokenizer``."""

    def encode(self, text: str) -> Any: ...

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str: ...


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "generate",
        help="continue a prompt (or answer a chat message) with a checkpoint, streaming tokens",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("prompt", help="text to continue, or with --chat the user's message")
    p.add_argument(
        "--weights",
        required=True,
        metavar="REPO_OR_DIR",
        help="a Hugging Face repo id, a local folder with config.json, safetensors and tokenizer.json, "
        "or a GGUF file (its own tokenizer is used)",
    )
    p.add_argument("--gguf-file", metavar="NAME", help="the .gguf file to download from the repo id in --weights")
    p.add_argument("--revision", help="hub revision (branch, tag or commit)")
    p.add_argument(
        "--chat",
        action="store_true",
        help="apply the checkpoint's chat template to the prompt as a user message and print the reply, "
        "stopping at the end of the turn",
    )
    p.add_argument("--system", metavar="TEXT", help="with --chat: a system message before the user's")
    p.add_argument("--max-new-tokens", type=int, default=64, help="most tokens to generate")
    p.add_argument("--temperature", type=float, default=0.0, help="sampling temperature; 0 is greedy")
    p.add_argument("--top-k", type=int, default=None, help="sample among the k most likely tokens")
    p.add_argument("--top-p", type=float, default=None, help="sample among the tokens holding this probability mass")
    p.add_argument("--seed", type=int, default=None, help="seed for repeatable sampling")
    p.add_argument(
        "--dtype",
        help="float32, bfloat16 or float16 (default: bfloat16 for a GGUF whose 4- to 8-bit "
        "matrices stay packed, the activations the int kernels are fast with; float32 otherwise)",
    )
    p.add_argument(
        "--dequantize",
        action="store_true",
        help="a GGUF's 4- and 8-bit matrices as floats of --dtype, not packed int4 / int8 layers",
    )
    p.add_argument("--device", default="auto", help="auto (cuda, then mps, then cpu), cpu, cuda, cuda:N, mps")
    p.add_argument(
        "--threads", type=int, help="torch CPU threads (default: torch's choice; 1 is steadiest on a shared CPU)"
    )
    p.set_defaults(func=run_generate)


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

    if args.system is not None and not args.chat:
        raise GenerationError("--system: only with --chat")
    if not args.prompt.strip():
        raise GenerationError(
            'prompt: empty; give some text to continue, e.g. zoo generate --weights DIR "Once upon a time"'
        )
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


def _prompt_ids(args: argparse.Namespace, text: CheckpointText) -> list[int]:
    if not args.chat:
        return list(text.tokenizer.encode(args.prompt).ids)
    messages = ([{"role": "system", "content": args.system}] if args.system else []) + [
        {"role": "user", "content": args.prompt}
    ]
    return text.encode_chat(messages)


def run_generate(args: argparse.Namespace) -> int:
    device = _checked_options(args)  # before torch is imported where it can: bad options fail fast
    import torch

    from zoo.hub.loading import from_pretrained, keeps_packed
    from zoo.model.generation import check_generates, stream

    path = resolve(args.weights, args.revision, args.gguf_file)
    text = checkpoint_text(path)  # tokenizer and chat template: checked before a weight is read
    prompt_ids = _prompt_ids(args, text)
    dtype = args.dtype or ("bfloat16" if keeps_packed(path, dequantize=args.dequantize) else "float32")
    model = from_pretrained(
        path, dtype=dtype, device=device, dequantize=args.dequantize
    )  # shows its own bar, on a terminal only
    check_generates(model)  # an encoder fails here, before anything is printed
    eos = text.eos_ids
    ids = torch.tensor([prompt_ids], dtype=torch.long, device=device)
    tokens = stream(
        model, ids, args.max_new_tokens, args.temperature, args.top_k, args.top_p, args.seed, eos_token_id=eos or None
    )
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

    if not args.chat:
        sys.stdout.write(args.prompt)
        sys.stdout.flush()
    for piece in text_pieces(text.tokenizer, counted(), context=prompt_ids):
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    sys.stdout.flush()  # the answer's line ends before the rate on stderr, pipes included
    elapsed = time.perf_counter() - start
    sys.stderr.write(f"{count} tokens in {elapsed:.2f} s ({count / elapsed if elapsed else 0:.1f} tokens/s)\n")
    return 0
