"""Finding a checkpoint: a local folder as is, or a Hugging Face repo through huggingface_hub.

Only the files a model needs are fetched (config, safetensors shards and their index,
tokenizer files), never pickles or code. ``snapshot_download`` honours ``HF_HOME`` and
``HF_HUB_OFFLINE`` and reuses an already-populated cache, so an offline machine loads by repo
id exactly as an online one does.
"""

from __future__ import annotations

from pathlib import Path

from zoo.errors import CheckpointError

ALLOW_PATTERNS: tuple[str, ...] = (
    "config.json",
    "generation_config.json",
    "*.safetensors",
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
)


def resolve_checkpoint(repo_or_dir: str | Path, revision: str | None = None) -> Path:
    """The local folder holding the checkpoint; downloads (or finds in the cache) a repo id."""
    path = Path(repo_or_dir).expanduser()
    if path.is_dir():
        return path
    text = str(repo_or_dir)
    if path.exists():
        raise CheckpointError(f"{text}: is a file; pass the folder holding config.json and the safetensors files")
    if text.startswith((".", "/", "~")) or text.count("/") > 1:
        raise CheckpointError(f"{text}: no such folder (and not a Hugging Face repo id like 'org/name')")
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        folder = snapshot_download(repo_id=text, revision=revision, allow_patterns=list(ALLOW_PATTERNS))
    except LocalEntryNotFoundError as exc:
        raise CheckpointError(
            f"{text}: not in the local Hugging Face cache and cannot be downloaded "
            f"(offline, or the hub is unreachable): {exc}"
        ) from None
    except (HfHubHTTPError, ValueError, OSError) as exc:
        raise CheckpointError(f"{text}: cannot download from the Hugging Face hub: {exc}") from None
    return Path(folder)
