"""from_pretrained: a Hugging Face checkpoint (folder or repo id) -> a ZooModel with its weights.

The model is built on the meta device and materialised uninitialised (``init=False``); each
checkpoint tensor is then copied from a memory-mapped view straight into its parameter and
its file pages released, so peak memory is about one copy of the weights. Sharded
checkpoints are read through ``model.safetensors.index.json``. Only safetensors are read:
``pytorch_model.bin`` files are pickles and are refused. GGUF files go through
``zoo.hub.gguf.loading``.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch

from zoo.errors import CheckpointError
from zoo.files.host_memory import rehome
from zoo.files.safe_io import inside, load_json, read_text
from zoo.hub.config import checkpoint_family, spec_from_hf_config
from zoo.hub.config_input import read_hf_config
from zoo.hub.download import resolve_checkpoint
from zoo.hub.family import ZooShapes, ignored_tensor, tensor_rules
from zoo.hub.fits import check_weights_fit
from zoo.hub.gguf.loading import find_gguf, from_gguf
from zoo.hub.gguf.reader import GGUFCheckpoint
from zoo.hub.gguf.spec import spec_from_gguf
from zoo.hub.names import legacy_aliases
from zoo.hub.packed_formats import PackedFormat, packed_format
from zoo.hub.quantized_checkpoints import as_float_names, load_packed_layers
from zoo.hub.safetensors_io import SafetensorsFile
from zoo.model.build import ZooModel, build, init_buffers, persistent_buffers
from zoo.specs.model import ModelSpec

INDEX_FILE = "model.safetensors.index.json"
CHUNK_BYTES = 16 * 1024 * 1024


def checkpoint_files(folder: Path) -> dict[str, SafetensorsFile]:
    """Checkpoint tensor name -> the (header-parsed) safetensors file holding it."""
    index = folder / INDEX_FILE
    if index.exists():
        weight_map = read_weight_map(inside(folder, INDEX_FILE, CheckpointError, "index file"))
        files: dict[str, SafetensorsFile] = {}
        for shard in sorted(set(weight_map.values())):
            path = shard_path(folder, shard, index)
            if not path.exists():
                tensor = next(t for t, s in weight_map.items() if s == shard)
                raise CheckpointError(
                    f"{path}: missing shard (listed in {INDEX_FILE} for tensor {tensor!r}, among others)"
                )
            files[shard] = SafetensorsFile(inside(folder, shard, CheckpointError, "shard"))
        located: dict[str, SafetensorsFile] = {}
        for tensor, shard in weight_map.items():
            if tensor not in files[shard].tensors:
                raise CheckpointError(
                    f"{folder / shard}: tensor {tensor!r} is listed in {INDEX_FILE} but not in the shard"
                )
            located[tensor] = files[shard]
        return located
    shards = sorted(folder.glob("*.safetensors"))
    if not shards:
        pickles = sorted(p.name for p in folder.glob("*.bin")) + sorted(p.name for p in folder.glob("*.pt*"))
        hint = (
            f" (found {', '.join(pickles)}: pickle files are never loaded; convert them to safetensors)"
            if pickles
            else ""
        )
        raise CheckpointError(f"{folder}: no safetensors weights{hint}")
    located = {}
    for shard in shards:
        file = SafetensorsFile(inside(folder, shard.name, CheckpointError, "safetensors file"))
        for tensor in file.tensors:
            located[tensor] = file
    return located


def read_weight_map(index: Path) -> dict[str, str]:
    """The index's ``weight_map``: tensor name -> shard file name, both strings."""

    data = load_json(read_text(index, CheckpointError, "index file"), CheckpointError, str(index))
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict):
        raise CheckpointError(f"{index}: corrupt index file: expected an object with a weight_map object")
    for tensor, shard in weight_map.items():
        if not isinstance(shard, str) or not shard:
            raise CheckpointError(f"{index}: weight_map[{tensor!r}]: expected a shard file name, got {shard!r}"[:300])
    return weight_map


def shard_path(folder: Path, shard: str, index: Path) -> Path:
    """A shard named by the index, refused unless it names a file inside the checkpoint folder
    (no absolute path, no ``..``). Judged on the name, not on where symlinks lead: the hub's
    cache links every file of a snapshot to a blob outside it."""
    parts = Path(shard).parts
    if not parts or Path(shard).is_absolute() or ".." in parts or "\\" in shard or "\0" in shard:
        raise CheckpointError(
            f"{index}: weight_map names {shard!r}, outside the checkpoint folder; shards must be files inside it"
        )
    return folder / shard


def load_weights(
    model: ZooModel, folder: Path, model_type: str, progress: bool = True, packed: PackedFormat | None = None
) -> None:
    """Copy every checkpoint tensor into the model's (materialised) parameters, checking all;
    an AWQ / GPTQ checkpoint's packed layers (``packed``) become int4 layers on the way."""
    located = checkpoint_files(folder)
    stored = legacy_aliases(located)  # current name -> the name the file uses
    located = {**located, **{name: located[old] for name, old in stored.items()}}
    # tied weights appear once, under embed.weight; persistent buffers are weights too
    params = {**dict(model.named_parameters()), **persistent_buffers(model)}
    family = checkpoint_family(model_type, str(folder / "config.json"))
    keys = as_float_names(located.keys()) if packed else located.keys()
    rules = tensor_rules(family, ZooShapes({n: p.shape for n, p in params.items()}, model.spec), keys)
    used: set[str] = set()
    if packed:
        with contextlib.ExitStack() as stack:
            for file in {id(f): f for f in located.values()}.values():
                stack.enter_context(file)
            rules, used, model.weights_layout = load_packed_layers(model, rules, located, packed)
    for rule in rules:
        for name in rule.hf:
            if name not in located:
                where = folder / INDEX_FILE if (folder / INDEX_FILE).exists() else folder
                raise CheckpointError(f"{where}: missing tensor {name!r} (needed for zoo parameter {rule.zoo[0]!r})")
    with contextlib.ExitStack() as stack, torch.no_grad():
        for file in {id(f): f for f in located.values()}.values():
            stack.enter_context(file)
        bar = _progress(stack, progress, len(rules), folder)
        for rule in rules:
            sources = [located[n].view(stored.get(n, n)) for n in rule.hf]
            dests = [params[n] for n in rule.zoo]
            for dest, view in rule.load(dests, sources):
                if dest.shape != view.shape:
                    name = rule.hf[0]
                    raise CheckpointError(
                        f"{located[name].path}: tensor {name!r} has shape "
                        f"{list(located[name].tensors[stored.get(name, name)].shape)}, "
                        f"which does not fit zoo parameter {rule.zoo[0]!r} of shape {list(params[rule.zoo[0]].shape)}"
                    )
                release = lambda names=rule.hf: [located[n].release(stored.get(n, n)) for n in names]
                _copy_in_chunks(dest, view, release)
            del sources
            used.update(rule.hf)
            used.update(stored[n] for n in rule.hf if n in stored)
            if bar is not None:
                bar[0].advance(bar[1])
    tied_head = {"lm_head.weight"} if model.spec.tie_embeddings else set()
    for name in sorted(located):
        if name not in used and name not in tied_head and not ignored_tensor(family, name):
            raise CheckpointError(f"{located[name].path}: unexpected tensor {name!r} (no zoo parameter takes it)")


def _copy_in_chunks(dest: torch.Tensor, view: torch.Tensor, release) -> None:  # type: ignore[no-untyped-def]
    """Copy a large tensor block by block, dropping the file pages read after each block, so
    a big embedding never sits in memory twice (once mapped, once copied)."""
    rows = dest.shape[0] if dest.dim() else 1
    row_bytes = max(dest.numel() * dest.element_size() // max(rows, 1), 1)
    step = max(CHUNK_BYTES // row_bytes, 1)
    if dest.dim() == 0 or step >= rows:
        dest.copy_(view)
    else:
        for start in range(0, rows, step):
            dest[start : start + step].copy_(view[start : start + step])
            release()
    release()


def _progress(stack: contextlib.ExitStack, enabled: bool, total: int, folder: Path):  # type: ignore[no-untyped-def]
    if not enabled:
        return None
    from rich.console import Console
    from rich.progress import Progress

    # on stderr, and only on a terminal: a bar on stdout, even stopped, leaves a blank line in piped text
    console = Console(stderr=True)
    bar = stack.enter_context(Progress(console=console, transient=True, disable=not console.is_terminal))
    return bar, bar.add_task(f"loading {folder.name}", total=total)


def from_pretrained(
    repo_or_dir: str | Path,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device | None = None,
    *,
    revision: str | None = None,
    progress: bool = True,
    gguf_file: str | None = None,
    dequantize: bool = False,
) -> ZooModel:
    """A ZooModel with a Hugging Face checkpoint's weights (a local folder or a hub repo id),
    or a GGUF file's (a ``.gguf`` path, a folder holding one, or a repo id with ``gguf_file``).
    A GGUF's 4- and 8-bit matrices stay packed (int4 / int8 layers) unless ``dequantize``.

    ``dtype`` defaults to float32, ``device`` to the CPU. The spec is ``model.spec`` and the
    checkpoint's family ``model.hf_model_type`` (``save_pretrained`` writes it back).
    """

    gguf_path = find_gguf(repo_or_dir, gguf_file, revision)
    if gguf_path is not None:
        return from_gguf(gguf_path, dtype=dtype, device=device, progress=progress, dequantize=dequantize)
    folder = resolve_checkpoint(repo_or_dir, revision=revision)
    config, _ = read_hf_config(folder / "config.json")
    spec = spec_from_hf_config(folder / "config.json", name=str(repo_or_dir))
    check_weights_fit(spec, dtype, device)
    model = build(spec, device=device, dtype=dtype, init=False)
    rehome(model, keep_values=False)  # CPU weights loaded into arenas of huge pages (zoo.files.host_memory)
    model_type = str(config["model_type"])
    load_weights(
        model, folder, model_type, progress=progress, packed=packed_format(config, str(folder / "config.json"))
    )
    model.tie_weights()
    init_buffers(model)
    model.hf_model_type = model_type
    model.checkpoint = folder
    return model.eval()


def keeps_packed(
    repo_or_dir: str | Path, *, gguf_file: str | None = None, revision: str | None = None, dequantize: bool = False
) -> bool:
    """Whether ``from_pretrained`` holds this checkpoint in packed int4 / int8 layers (a GGUF
    with 4- to 8-bit matrices, not ``dequantize``d), read from the header alone: such a run
    computes in bfloat16 by default, the activations the int kernels are fast with."""
    from zoo.hub.gguf.loading import find_gguf
    from zoo.hub.gguf.quantized import holds_packed
    from zoo.hub.gguf.reader import GGUFCheckpoint

    gguf_path = None if dequantize else find_gguf(repo_or_dir, gguf_file, revision)
    return gguf_path is not None and holds_packed(GGUFCheckpoint(gguf_path))


def checkpoint_spec(repo_or_dir: str | Path, *, revision: str | None = None, gguf_file: str | None = None) -> ModelSpec:
    """The spec of the model a checkpoint holds, read from its config.json (or GGUF metadata)
    without loading a weight: callers that choose what to do by the model (``zoo bench
    --weights`` picks its family's benchmark) decide before paying for the load. The name is
    the one ``from_pretrained`` gives, so both agree."""

    gguf_path = find_gguf(repo_or_dir, gguf_file, revision)
    if gguf_path is not None:
        return spec_from_gguf(GGUFCheckpoint(gguf_path))[0]
    folder = resolve_checkpoint(repo_or_dir, revision=revision)
    return spec_from_hf_config(folder / "config.json", name=str(repo_or_dir))
