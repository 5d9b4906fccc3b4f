"""Text to token ids (a tokenizer.json or raw bytes), split into training and held-out parts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from zoo.errors import TrainingError
from zoo.files.safe_io import check_readable, read_bytes

HELD_OUT = 0.1  # the last tenth of the text is held out
TEXT_MAX_BYTES = 256 << 20  # a training text or tokenizer.json larger than this is refused before it is read


@dataclass
class TokenText:
    train: torch.Tensor  # (N,) int64
    held_out: torch.Tensor  # (M,)
    tokenizer: str  # "bytes" or the tokenizer file
    vocab_size: int


def load_text(path: str | Path, tokenizer: str | Path | None = None) -> TokenText:
    """The file's tokens: ``tokenizer`` a tokenizer.json (the `tokenizers` library), else UTF-8
    bytes (vocabulary 256). The last 10% is held out."""
    path = Path(path)
    data = read_bytes(path, TrainingError, "--text file", TEXT_MAX_BYTES)
    if tokenizer is None:
        ids = torch.frombuffer(bytearray(data), dtype=torch.uint8).long()
        name, vocab = "bytes", 256
    else:
        from tokenizers import Tokenizer

        check_readable(tokenizer, TrainingError, "--tokenizer file", TEXT_MAX_BYTES)
        tok = Tokenizer.from_file(str(tokenizer))
        ids = torch.tensor(tok.encode(data.decode("utf-8", errors="replace")).ids, dtype=torch.long)
        name, vocab = str(tokenizer), tok.get_vocab_size()
    cut = int(len(ids) * (1 - HELD_OUT))
    return TokenText(ids[:cut], ids[cut:], name, vocab)


def rows_at(tokens: torch.Tensor, batch_size: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """``batch_size`` random windows (B, length) of ``tokens``."""
    if len(tokens) < length:
        raise TrainingError(f"--text: {len(tokens)} training tokens, fewer than one row of {length}")
    starts = torch.randint(len(tokens) - length + 1, (batch_size,), generator=generator)
    return torch.stack([tokens[s : s + length] for s in starts.tolist()])  # (B, length)


def held_out_rows(tokens: torch.Tensor, length: int, max_rows: int = 64) -> torch.Tensor:
    """Consecutive non-overlapping rows (R, length) of the held-out tokens."""
    rows = min(len(tokens) // length, max_rows)
    if rows == 0:
        raise TrainingError(f"--text: the held-out tenth has {len(tokens)} tokens, fewer than one row of {length}")
    return tokens[: rows * length].view(rows, length)
