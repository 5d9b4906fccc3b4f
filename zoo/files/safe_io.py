"""Reading user files and values without hanging, reading outside, or tracebacks.

Everything zoo reads from a user (spec files, sweep files, checkpoint JSON, ``--set``
values) goes through here, so the same limits hold everywhere:

- only regular files are opened (a FIFO named ``model.safetensors`` would block forever,
  ``/dev/zero`` never ends): the file is opened non-blocking and checked with ``fstat``
  before a byte is read, and a file read whole is bounded in size (``MAX_FILE_BYTES``);
- a file found inside a checkpoint folder must resolve inside it (``inside``): a
  ``config.json`` linked to ``../secret.json`` is refused without reading it;
- text must be UTF-8, else one error naming the file and the byte offset;
- YAML is read by a safe loader that refuses duplicate keys, nesting deeper than
  ``MAX_DEPTH`` and aliases that expand beyond ``MAX_NODES`` nodes (a 615-byte "billion
  laughs" file would otherwise expand to gigabytes when formatted);
- JSON refuses duplicate keys and nesting deeper than ``MAX_DEPTH``.

Each problem is raised as the caller's ``ZooError`` type, so the CLI prints one line.
"""

from __future__ import annotations

import json
import os
import reprlib
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from zoo.errors import ZooError

MAX_DEPTH = 64  # nesting of mappings/lists; specs need about 4
MAX_NODES = 100_000  # scalars + collections once aliases are expanded; a large spec has a few hundred
MAX_FILE_BYTES = 64 << 20  # a file read whole (spec, sweep, config, index); tokenizers and logs pass more

ErrorType = Callable[[str], ZooError]


def bounded_repr(value: Any, limit: int = 120) -> str:
    """``repr`` that never formats more than a few items per level (safe on alias bombs)."""
    short = reprlib.Repr()
    short.maxlevel, short.maxlist, short.maxdict, short.maxstring, short.maxother = 3, 6, 6, limit, limit
    text = short.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def inside(folder: str | Path, name: str | Path, error: ErrorType, what: str = "file") -> Path:
    """``folder / name`` resolved, refused unless it lies inside ``folder`` once every link is
    followed. The one allowance is the Hugging Face cache, whose ``snapshots/<revision>``
    files link into the repo's ``blobs/``. The message never names where a link leads."""
    base = Path(folder).resolve()
    target = (Path(folder) / name).resolve()
    if target == base or base in target.parents:
        return target
    for snapshot in (base, *base.parents):  # the folder may be a snapshot's subfolder
        repo = snapshot.parent.parent
        if snapshot.parent.name == "snapshots" and repo.name.startswith(("models--", "datasets--")):
            if repo / "blobs" in target.parents:
                return target
            break
    raise error(
        f"{Path(folder) / name}: {what} is a link that leads outside its folder {folder}; zoo reads "
        "checkpoint files only inside their folder (the Hugging Face cache's snapshot links excepted)"
    )


def open_regular(path: str | Path, error: ErrorType, what: str = "file") -> int:
    """A read-only descriptor of ``path``, refused unless it is a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise error(f"{path}: cannot read {what} ({exc.strerror or exc})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = (
            "a directory"
            if stat.S_ISDIR(mode)
            else "a FIFO"
            if stat.S_ISFIFO(mode)
            else "a device"
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "not a regular file"
        )
        raise error(f"{path}: cannot read {what}: it is {kind}; only regular files are read")
    return fd


def check_readable(path: str | Path, error: ErrorType, what: str = "file", limit: int = MAX_FILE_BYTES) -> None:
    """Fail now, before any work, unless ``path`` is a regular file of at most ``limit`` bytes
    (an option naming a file read only at the end of a run: ``--eval-text``)."""
    fd = open_regular(path, error, what)
    size = os.fstat(fd).st_size
    os.close(fd)
    if size > limit:
        raise error(f"{path}: {what} of {size:,} bytes is larger than zoo reads (at most {limit:,} bytes)")


def read_bytes(path: str | Path, error: ErrorType, what: str = "file", limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (checked before reading, and
    again while reading: a file that grows, or lies about its size, stops at the limit)."""
    fd = open_regular(path, error, what)
    try:
        with os.fdopen(fd, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            data = handle.read(limit + 1) if size <= limit else b""
    except OSError as exc:
        raise error(f"{path}: cannot read {what} ({exc.strerror or exc})") from None
    if size > limit or len(data) > limit:
        raise error(
            f"{path}: {what} of {max(size, len(data)):,} bytes is larger than zoo reads (at most {limit:,} bytes)"
        )
    return data


def read_text(path: str | Path, error: ErrorType, what: str = "file", limit: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text of a regular file; bad bytes are one error naming the offset."""
    data = read_bytes(path, error, what, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: {what} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None


# ---- YAML ----------------------------------------------------------------------------------
class _LimitedLoader(yaml.SafeLoader):
    """SafeLoader with a nesting bound, an expansion bound and no duplicate keys."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):  # type: ignore[no-untyped-def]
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.YAMLError(f"nested more than {MAX_DEPTH} levels deep")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def get_single_data(self):  # type: ignore[no-untyped-def]
        node = self.get_single_node()
        if node is None:
            return None
        _check_expansion(node)
        return self.construct_document(node)

    def construct_mapping(self, node, deep=False):  # type: ignore[no-untyped-def]
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:
                    continue  # an unhashable key fails in the base class with its own message
                if duplicate:
                    raise yaml.YAMLError(f"duplicate key {bounded_repr(key)} (line {key_node.start_mark.line + 1})")
        return super().construct_mapping(node, deep=deep)


def _check_expansion(root: yaml.Node) -> None:
    """Count the nodes the document has once every alias is expanded; refuse a cycle or more
    than ``MAX_NODES`` (done on the composed graph, so it costs one visit per distinct node)."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in sizes:
            continue
        children = _children(node)
        if children_done:
            on_path.discard(key)
            sizes[key] = 1 + sum(sizes[id(c)] for c in children)
            if sizes[key] > MAX_NODES:
                raise yaml.YAMLError(f"aliases expand to more than {MAX_NODES:,} values")
            continue
        if key in on_path:
            raise yaml.YAMLError("an alias refers to the collection that contains it")
        on_path.add(key)
        stack.append((node, True))
        for child in children:
            if id(child) in on_path:
                raise yaml.YAMLError("an alias refers to the collection that contains it")
            if id(child) not in sizes:
                stack.append((child, False))


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def load_yaml(text: str, error: ErrorType, where: str) -> Any:
    """YAML read with the limits above; any problem is ``error('<where>: not valid YAML: ...')``."""
    try:
        return yaml.load(text, Loader=_LimitedLoader)
    except yaml.YAMLError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise error(f"{where}: not valid YAML: {first}") from None
    except RecursionError:
        raise error(f"{where}: not valid YAML: nested too deep") from None


def parse_scalar(raw: str, error: ErrorType, where: str) -> Any:
    """A command-line value read as YAML (numbers, null, true, flow mappings); text that is
    not YAML stays text, but a value YAML refuses for its size or keys is an error."""
    if not raw.strip():
        return None
    try:
        return yaml.load(raw, Loader=_LimitedLoader)
    except yaml.YAMLError as exc:
        message = str(exc)
        if any(word in message for word in ("duplicate key", "nested more than", "aliases expand", "alias refers")):
            raise error(f"{where}: {message.strip().splitlines()[0]}") from None
        return raw
    except RecursionError:
        raise error(f"{where}: nested too deep") from None


# ---- JSON ----------------------------------------------------------------------------------
def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def load_json(text: str | bytes, error: ErrorType, where: str) -> Any:
    """JSON with duplicate keys refused and nesting bounded; problems are one ``error``."""
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates)
    except RecursionError:
        raise error(f"{where}: not valid JSON: nested too deep") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise error(f"{where}: not valid JSON: {str(exc).splitlines()[0]}") from None
    check_depth(data, error, where)
    return data


def check_depth(data: Any, error: ErrorType, where: str) -> None:
    """Refuse values nested deeper than ``MAX_DEPTH`` (checked without recursion)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children = list(value.values())
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > MAX_DEPTH:
            raise error(f"{where}: nested more than {MAX_DEPTH} levels deep")
        stack.extend((child, depth + 1) for child in children)
