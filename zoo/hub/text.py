"""A checkpoint's text side: its own tokenizer, the ids that end generation, its chat template.

From a folder (``tokenizer.json``, ``tokenizer_config.json``, ``generation_config.json``,
``config.json``, ``chat_template.jinja``) or a GGUF file (``tokenizer.ggml.*`` and
``tokenizer.chat_template`` metadata). Everything here reads metadata only, so a command
checks it before a single weight is read: a checkpoint whose tokenizer zoo cannot build
fails in milliseconds, not after loading.

Chat templates render as transformers renders them (``apply_chat_template``): jinja2's
immutable sandbox (a template is data from the checkpoint, never code with access to
Python), ``trim_blocks``/``lstrip_blocks``, ``raise_exception``, a ``tojson`` that keeps
non-ASCII text, ``strftime_now``, the special tokens by name, ``add_generation_prompt``.
The rendered text already holds the template's BOS, so it is encoded without adding one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from zoo.errors import CheckpointError
from zoo.files.safe_io import inside, load_json, read_text


@dataclass
class CheckpointText:
    """The tokenizer (a ``tokenizers.Tokenizer``), the ids ending a reply, the chat template
    (None when the checkpoint has none) and the special tokens spelled out (``bos_token``...)."""

    tokenizer: Any
    eos_ids: list[int]
    chat_template: str | None = None
    special_tokens: dict[str, str] = field(default_factory=dict)

    def encode_chat(self, messages: list[dict[str, Any]]) -> list[int]:
        """Token ids of ``messages`` rendered by the checkpoint's template, ready for a reply."""
        return list(self.tokenizer.encode(render_chat(self, messages), add_special_tokens=False).ids)


TOKENIZER_BYTES = 512 << 20  # a tokenizer.json larger than this is refused (real ones are up to ~35 MB)


def _tokenizer_json(folder: Path) -> Any:
    from tokenizers import Tokenizer

    path = folder / "tokenizer.json"
    if not path.exists():
        raise CheckpointError(f"{path}: missing; zoo needs the checkpoint's tokenizer.json for text")
    text = read_text(
        inside(folder, "tokenizer.json", CheckpointError, "tokenizer"),
        CheckpointError,
        "tokenizer",
        limit=TOKENIZER_BYTES,
    )
    try:
        return Tokenizer.from_str(text)
    except Exception as exc:  # the tokenizers library raises plain Exceptions
        raise CheckpointError(f"{path}: not a readable tokenizer.json: {exc}") from None


def _token_text(value: Any) -> str | None:
    """A special token in tokenizer_config.json: a string or an AddedToken dict."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _folder_text(folder: Path) -> CheckpointText:
    from zoo.hub.config import eos_token_ids

    tokenizer = _tokenizer_json(folder)
    config_path = folder / "tokenizer_config.json"
    config = (
        load_json(
            read_text(inside(folder, config_path.name, CheckpointError, "tokenizer config"), CheckpointError),
            CheckpointError,
            str(config_path),
        )
        if config_path.exists()
        else {}
    )
    if not isinstance(config, dict):
        raise CheckpointError(f"{config_path}: expected a JSON object")
    special = {
        name: text
        for name in ("bos_token", "eos_token", "unk_token", "pad_token")
        if (text := _token_text(config.get(name))) is not None
    }
    ids = eos_token_ids(folder)
    eos = tokenizer.token_to_id(special["eos_token"]) if "eos_token" in special else None
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: the default one
        template = next(
            (t.get("template") for t in template if isinstance(t, dict) and t.get("name") == "default"), None
        )
    jinja = folder / "chat_template.jinja"
    if jinja.exists():
        template = read_text(inside(folder, jinja.name, CheckpointError, "chat template"), CheckpointError)
    return CheckpointText(
        tokenizer,
        list(dict.fromkeys(ids + ([eos] if eos is not None else []))),
        template if isinstance(template, str) else None,
        special,
    )


def _gguf_text(path: Path) -> CheckpointText:
    from zoo.hub.gguf.reader import GGUFCheckpoint
    from zoo.hub.gguf.tokenizer import (
        gguf_chat_template,
        gguf_eos_ids,
        gguf_special_tokens,
        gguf_tokenizer,
    )

    g = GGUFCheckpoint(path)
    return CheckpointText(gguf_tokenizer(g), gguf_eos_ids(g), gguf_chat_template(g), gguf_special_tokens(g))


def resolve(weights: str | Path, revision: str | None = None, gguf_file: str | None = None) -> Path:
    """The folder (or GGUF file) meant by ``weights``: a path, or a hub repo id resolved by
    zoo.hub (only config, tokenizer and weight files are downloaded)."""
    from zoo.hub.download import resolve_checkpoint
    from zoo.hub.gguf.loading import find_gguf

    return find_gguf(weights, gguf_file, revision) or resolve_checkpoint(str(weights), revision=revision)


def checkpoint_text(path: str | Path) -> CheckpointText:
    """The text side of a checkpoint folder or GGUF file (metadata only; no weight is read)."""
    path = Path(path)
    if path.suffix == ".gguf" and path.exists() and not path.is_dir():
        return _gguf_text(path)  # the reader refuses what is no regular file (a FIFO) in one line
    return _folder_text(path)


def render_chat(text: CheckpointText, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
    """``messages`` ([{"role": ..., "content": ...}]) through the checkpoint's chat template."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    if text.chat_template is None:
        raise CheckpointError(
            "chat_template: this checkpoint has none (tokenizer_config.json chat_template, "
            "chat_template.jinja or GGUF tokenizer.chat_template); give a plain prompt instead"
        )

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        value: Any,
        ensure_ascii: bool = False,
        indent: int | None = None,
        separators: Any = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception, strftime_now=lambda fmt: datetime.now().strftime(fmt))
    try:
        return env.from_string(text.chat_template).render(
            messages=messages, add_generation_prompt=add_generation_prompt, **text.special_tokens
        )
    except jinja2.exceptions.TemplateError as exc:
        raise CheckpointError(f"chat_template: {exc}") from None


def chat(
    model: Any,
    messages: list[dict[str, Any]],
    weights: str | Path | None = None,
    max_new_tokens: int = 256,
    **sampling: Any,
) -> str:
    """The model's reply to ``messages``, through the chat template and tokenizer of the
    checkpoint at ``weights`` (default: the folder or GGUF ``from_pretrained`` loaded it from),
    stopping at its end of turn. ``sampling``: ``generate``'s ``temperature``, ``top_k``,
    ``top_p``, ``seed``."""
    import torch

    from zoo.model.generation import generate

    source = weights if weights is not None else model.checkpoint
    if source is None:
        raise CheckpointError(
            "weights: this model was not loaded from a checkpoint; name the folder or GGUF whose "
            "tokenizer and chat template to use"
        )
    text = checkpoint_text(source)
    prompt = text.encode_chat(messages)
    out = generate(model, torch.tensor([prompt]), max_new_tokens, eos_token_id=text.eos_ids or None, **sampling)
    reply = out[0, len(prompt) :].tolist()
    end = next((i for i, token in enumerate(reply) if token in text.eos_ids), len(reply))
    return str(text.tokenizer.decode(reply[:end], skip_special_tokens=True))


def tokenizer_files(source: Path) -> dict[str, str]:
    """The files that carry a GGUF's text side into a safetensors folder: tokenizer.json,
    tokenizer_config.json (special tokens, chat template, BOS policy) and
    generation_config.json (bos and the end-of-generation ids); {} for any other source,
    whose own files a user copies, or for a GGUF without a tokenizer."""
    from zoo.hub.gguf.reader import GGUFCheckpoint

    if source.suffix != ".gguf" or not source.is_file():
        return {}
    g = GGUFCheckpoint(source)
    if g.text("tokenizer.ggml.model", None) is None:  # weights only: nothing more to carry
        return {}
    text = _gguf_text(source)
    config: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast", **text.special_tokens}
    if text.chat_template is not None:
        config["chat_template"] = text.chat_template
    add_bos = g.flag("tokenizer.ggml.add_bos_token", None)
    if add_bos is not None:
        config["add_bos_token"] = bool(add_bos)
    generation: dict[str, Any] = {"eos_token_id": text.eos_ids}
    bos = g.token_id("tokenizer.ggml.bos_token_id", len(text.tokenizer.get_vocab()))
    if bos is not None:
        generation["bos_token_id"] = int(bos)
    return {
        "tokenizer.json": text.tokenizer.to_str(),
        "tokenizer_config.json": json.dumps(config, indent=2) + "\n",
        "generation_config.json": json.dumps(generation, indent=2) + "\n",
    }
