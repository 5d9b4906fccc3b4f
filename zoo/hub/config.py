"""Hugging Face config.json -> ModelSpec, through the checkpoint family of its ``model_type``.

Every family is a ``zoo.hub.family.CheckpointFamily`` in the registry (the built-in ones of
``zoo.hub.families`` and those plugins register alike); ``checkpoint_family`` is the one
way to reach one. Every key of a config is either mapped into the spec by the family, or
neutral by the rule of ``zoo/hub/config_keys.py`` (it cannot change the forward pass: names,
token ids, dropout, training and generation options), or checked to hold the one value zoo
computes; anything else is a ``CheckpointError`` naming the key, so no field that changes
the computation is ever dropped silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from zoo.errors import CheckpointError, SpecError, allowed, did_you_mean
from zoo.files.safe_io import inside, load_json, read_text
from zoo.hub.config_input import check_value_types, read_hf_config
from zoo.hub.config_keys import BASE_CHECKS
from zoo.hub.config_reader import ConfigReader
from zoo.hub.family import CheckpointFamily
from zoo.hub.packed_formats import packed_format
from zoo.specs.model import ModelSpec
from zoo.specs.registry import get_registry


def checkpoint_families() -> dict[str, CheckpointFamily]:
    """model_type -> its checkpoint family, built-in and plugin ones, in registration order."""

    return {model_type: entry.family for model_type, entry in get_registry().checkpoint_formats.items()}


def supported_model_types() -> list[str]:
    """Every model_type zoo reads."""
    return sorted(checkpoint_families())


def checkpoint_family(model_type: Any, source: str = "config") -> CheckpointFamily:
    """The checkpoint family registered for ``model_type``; an unknown one is a CheckpointError
    naming ``source`` and listing the model types zoo reads."""
    families = checkpoint_families()
    family = families.get(model_type) if isinstance(model_type, str) else None
    if family is None:
        types = sorted(families)
        raise CheckpointError(
            f"{source}: model_type: {model_type!r} is not supported{did_you_mean(str(model_type), types)}; "
            f"allowed: {allowed(types)}"
        )
    return family


def _refuse_quantized(data: Mapping[str, Any], reader: ConfigReader, source: str) -> None:
    """A quantization_config the family did not read itself (as gpt_oss reads mxfp4), nor the
    loader's AWQ / GPTQ packing (zoo/hub/packed_formats.py) for every family, is refused."""
    quantization = data.get("quantization_config")
    if quantization is not None and "quantization_config" not in reader.used:
        if packed_format(data, source) is not None:  # read by the loader, for every family
            reader.used.add("quantization_config")
            return
        raise CheckpointError(
            f"{source}: quantization_config: quantized checkpoints ({quantization.get('quant_method')}) "
            f"are not supported for model_type {data.get('model_type')!r}; allowed: unquantized safetensors"
        )


def spec_from_hf_config(config: str | Path | Mapping[str, Any], name: str | None = None) -> ModelSpec:
    """The ModelSpec computing what transformers computes for this config.json."""
    data, source = read_hf_config(config)
    check_value_types(data, source)
    model_type = data.get("model_type")
    family = checkpoint_family(model_type, source)
    reader = ConfigReader(data, source)
    try:
        spec = family.read_config(reader)
    except (TypeError, ValueError, ArithmeticError, AttributeError, KeyError) as exc:  # a shape no check above foresaw
        _refuse_quantized(data, reader, source)
        raise CheckpointError(f"{source}: malformed config ({type(exc).__name__}: {str(exc)[:200]})") from None
    except CheckpointError:
        _refuse_quantized(data, reader, source)
        raise
    _refuse_quantized(data, reader, source)
    for key, (inert, why) in BASE_CHECKS.items():  # unless the family read it (t5, bart: encoder-decoders)
        if key not in reader.used:
            reader.expect(key, inert, why)
    reader.check_all_used()
    spec["name"] = name or data.get("_name_or_path") or f"hf-{model_type}"
    spec["source"] = source if not isinstance(config, Mapping) else f"hf config ({model_type})"
    try:
        return ModelSpec.model_validate(spec)
    except SpecError as exc:
        raise CheckpointError(f"{source}: the config maps to an invalid spec: {exc}") from None


def eos_token_ids(folder: Path) -> list[int]:
    """End-of-sequence ids from generation_config.json, else config.json (an id or a list);
    a file that is not JSON, or an id that is not a non-negative integer, is a CheckpointError."""

    for name in ("generation_config.json", "config.json"):
        path = Path(folder) / name
        if not path.exists():
            continue
        real = inside(folder, name, CheckpointError, name)
        data = load_json(read_text(real, CheckpointError, name), CheckpointError, str(path))
        if not isinstance(data, dict):
            raise CheckpointError(f"{path}: expected a JSON object")
        value = data.get("eos_token_id")
        if value is None:
            continue
        ids = value if isinstance(value, list) else [value]
        if not ids or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in ids):
            raise CheckpointError(f"{path}: eos_token_id: expected a token id or a list of them, got {value!r}"[:300])
        return list(ids)
    return []
