"""Loading a GGUF file into a ZooModel: find the file, build the spec, copy dequantized tensors.

A GGUF is one file: a path to it, a folder holding exactly one ``.gguf`` (and no
config.json), or a hub repo id with ``gguf_file=`` (only that file is downloaded, through
huggingface_hub). Every tensor is checked: a zoo parameter without a GGUF tensor, a tensor
of the wrong shape, a GGUF tensor no parameter takes, or a type zoo cannot dequantize is a
``CheckpointError`` naming it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

import torch

from zoo.errors import CheckpointError
from zoo.files.host_memory import rehome, return_freed_memory
from zoo.files.safe_io import inside
from zoo.hub.fits import check_weights_fit
from zoo.hub.gguf.names import IGNORED, GGUFRule, gguf_rules
from zoo.hub.gguf.quantized import describe, materialize, place_quantized, place_table
from zoo.hub.gguf.reader import GGUFCheckpoint
from zoo.hub.gguf.spec import spec_from_gguf
from zoo.model.build import ZooModel, build, init_buffers
from zoo.quant.linear import QuantizedLinear


def find_gguf(repo_or_dir: str | Path, gguf_file: str | None = None, revision: str | None = None) -> Path | None:
    """The GGUF file meant by these arguments, or None when they name a safetensors checkpoint."""
    path = Path(repo_or_dir).expanduser()
    if gguf_file is not None:
        if path.is_dir():
            if not (path / gguf_file).is_file():
                raise CheckpointError(f"{path / gguf_file}: no such GGUF file")
            return inside(path, gguf_file, CheckpointError, "GGUF file")
        return _download(str(repo_or_dir), gguf_file, revision)
    if path.suffix == ".gguf":
        if not path.exists():  # a FIFO or folder so named is refused by the reader, saying what it is
            raise CheckpointError(f"{path}: no such GGUF file")
        return path
    if path.is_dir() and not (path / "config.json").exists():
        found = sorted(path.glob("*.gguf"))
        if len(found) == 1:
            return inside(path, found[0].name, CheckpointError, "GGUF file")
        if len(found) > 1:
            names = ", ".join(p.name for p in found)
            raise CheckpointError(f"{path}: holds several GGUF files ({names}); name one with gguf_file=")
    return None


def _download(repo_id: str, filename: str, revision: str | None) -> Path:
    """One GGUF file of a hub repo (or the cached copy), and nothing else from the repo."""
    if not filename.endswith(".gguf"):
        raise CheckpointError(f"{repo_id}: gguf_file={filename!r} is not a .gguf file")
    if repo_id.startswith((".", "/", "~")) or repo_id.count("/") > 1:
        raise CheckpointError(f"{repo_id}: no such folder (and not a Hugging Face repo id like 'org/name')")
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        return Path(hf_hub_download(repo_id=repo_id, filename=filename, revision=revision))
    except LocalEntryNotFoundError as exc:
        raise CheckpointError(
            f"{repo_id}/{filename}: not in the local Hugging Face cache and cannot be "
            f"downloaded (offline, or the hub is unreachable): {exc}"
        ) from None
    except (HfHubHTTPError, ValueError, OSError) as exc:
        raise CheckpointError(f"{repo_id}/{filename}: cannot download from the Hugging Face hub: {exc}") from None


def load_gguf_weights(
    model: ZooModel, g: GGUFCheckpoint, rules: list[GGUFRule], placed: set[str] = frozenset(), progress: bool = False
) -> None:
    """Dequantize every GGUF tensor into its zoo parameter, one tensor at a time; ``placed``:
    zoo parameters already loaded in a packed layout (zoo/hub/gguf/quantized.py)."""
    params = dict(model.named_parameters())
    for rule in rules:
        if rule.gguf not in g.tensors:
            raise CheckpointError(f"{g.path}: missing tensor {rule.gguf!r} (needed for zoo parameter {rule.zoo!r})")
    todo = [rule for rule in rules if rule.zoo not in placed]
    with contextlib.ExitStack() as stack, torch.no_grad():
        advance = _progress(stack, progress, len(todo), f"loading {g.path.name}")
        for rule in todo:
            advance()
            dest = params[rule.zoo]
            if g.shape(rule.gguf) != tuple(dest.shape):
                raise CheckpointError(
                    f"{g.path}: tensor {rule.gguf!r} has shape {list(g.shape(rule.gguf))}, which "
                    f"does not fit zoo parameter {rule.zoo!r} of shape {list(dest.shape)}"
                )
            value = g.tensor(rule.gguf)  # float32, PyTorch layout
            dest.copy_(rule.transform(value) if rule.transform else value)
    used = {rule.gguf for rule in rules} | IGNORED
    for name in g.tensors:
        if name not in used:
            raise CheckpointError(f"{g.path}: unexpected tensor {name!r} (no zoo parameter takes it)")


def _progress(stack: contextlib.ExitStack, enabled: bool, total: int, label: str) -> Callable[[], None]:
    """A transient progress bar's advance function: on stderr and only on a terminal, since a
    bar stopped on a pipe still writes a newline (into `zoo generate`'s text, or an error)."""
    from rich.console import Console

    console = Console(stderr=True)
    if not enabled or not console.is_terminal:
        return lambda: None
    from rich.progress import Progress

    bar = stack.enter_context(Progress(console=console, transient=True))
    task = bar.add_task(label, total=total)
    return lambda: bar.advance(task)


def from_gguf(
    path: Path,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device | None = None,
    name: str | None = None,
    progress: bool = False,
    dequantize: bool = False,
) -> ZooModel:
    """A ZooModel with the weights of one GGUF file: 4- and 8-bit matrices in zoo's packed
    int4 / int8 layouts (zoo/hub/gguf/quantized.py), or with ``dequantize`` every tensor as
    floats of ``dtype``. ``model.weights_layout`` says which."""
    g = GGUFCheckpoint(path)
    spec, config = spec_from_gguf(g, name=name)
    g.check_types()  # an unreadable type fails before any memory is allocated
    check_weights_fit(spec, dtype, device)
    target = torch.device(device) if device is not None else torch.device("cpu")
    model = build(spec, device="meta", dtype=dtype)
    rules = gguf_rules(
        g.architecture,
        [n for n, _ in model.named_parameters()],
        config["num_attention_heads"],
        config["num_key_value_heads"],
    )
    float_dtype = next(p.dtype for p in model.parameters())
    placed: set[str] = set()
    if not dequantize:
        placed = place_quantized(model, g, rules, float_dtype, target) | place_table(
            model, g, rules, float_dtype, target
        )
    materialize(model, target)
    if not isinstance(model.lm_head, QuantizedLinear):
        model.tie_weights()
    load_gguf_weights(model, g, rules, placed, progress=progress)
    init_buffers(model)
    model.hf_model_type = config["model_type"]
    model.weights_layout = describe(g, model)
    model.checkpoint = Path(path)
    del g  # the file's map: pages read while loading stop counting as resident
    rehome(model)  # the weights together, in huge pages (zoo.files.host_memory)
    return_freed_memory()
    return model.eval()
