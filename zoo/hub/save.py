"""save_pretrained: a ZooModel -> safetensors + an HF-style config.json transformers can load.

The config is written for one Hugging Face checkpoint family (the one the model was loaded
from, or the first registered one whose config reproduces the spec exactly); it is read back through
``spec_from_hf_config`` and must give the same per-layer components, so what is saved
always means what the model computes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from zoo.components.fused import unfused_parameters
from zoo.errors import CheckpointError
from zoo.files.atomic import write_text_atomic
from zoo.hub.config import checkpoint_families, checkpoint_family, spec_from_hf_config
from zoo.hub.family import ZooShapes, tensor_rules
from zoo.hub.safetensors_io import write_safetensors
from zoo.hub.text import tokenizer_files
from zoo.model.build import ZooModel, persistent_buffers
from zoo.quant.linear import QuantizedLinear
from zoo.specs.model import ModelSpec


def hf_config_from_spec(spec: ModelSpec, model_type: str) -> dict[str, Any]:
    """The config.json of ``model_type`` that computes what ``spec`` computes (its
    ``architectures`` the family's, unless the family wrote its own: a masked-LM head's)."""
    family = checkpoint_family(model_type, "model_type")
    return {"architectures": [family.ARCHITECTURE], **family.write_config(spec)}


def _same_computation(a: ModelSpec, b: ModelSpec) -> bool:
    """Whether two specs build the same model: the same top-level fields and, layer by layer,
    the same resolved parts; an encoder-decoder's encoders compared the same way, resolved
    (a config reader may spell out what the encoder inherits, or its role implies)."""
    if (a.encoder is None) != (b.encoder is None):
        return False
    if a.encoder is not None and not _same_computation(a.encoder_spec(), b.encoder_spec()):
        return False
    top = (
        "vocab_size",
        "d_model",
        "n_layers",
        "max_seq_len",
        "tie_embeddings",
        "embedding",
        "head",
        "final_norm",
        "cross_attention",
    )
    if any(getattr(a, k) != getattr(b, k) for k in top) or a.resolved_embedding_scale != b.resolved_embedding_scale:
        return False
    fams = ("norm", "positional", "attention", "ffn", "block")
    return all(
        getattr(la, f).to_dict() == getattr(lb, f).to_dict()
        for la, lb in zip(a.layer_specs(), b.layer_specs())
        for f in fams
    )


def matching_config(spec: ModelSpec, model_type: str | None) -> dict[str, Any]:
    """The HF config for the given family, or the first family that reproduces the spec.

    A family whose config cannot describe the spec says so with a CheckpointError; any other
    exception is a bug in that family's writer and propagates."""
    if model_type:
        checkpoint_family(model_type, f"spec {spec.name!r}")  # an unknown one is an error, not a miss
    for candidate in [model_type] if model_type else list(checkpoint_families()):
        try:
            config = hf_config_from_spec(spec, candidate)
            if _same_computation(spec, spec_from_hf_config(config)):
                return config
        except CheckpointError:  # this family's config cannot describe the spec
            continue
    which = f"a {model_type} config" if model_type else "any supported Hugging Face family"
    raise CheckpointError(f"spec {spec.name!r}: cannot be written as {which} that computes the same model")


def save_pretrained(model: ZooModel, out_dir: str | Path, model_type: str | None = None) -> Path:
    """Write ``model.safetensors`` and ``config.json`` (files replaced whole) into ``out_dir``;
    a model loaded from a GGUF also gets the file's tokenizer, chat template and bos/eos ids."""

    if any(isinstance(m, QuantizedLinear) for m in model.modules()):
        raise CheckpointError(
            "save_pretrained: the model holds packed int4/int8 layers (a GGUF loaded quantized); "
            "load it with dequantize=True to write safetensors"
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = matching_config(model.spec, model_type or model.hf_model_type)
    params = {**unfused_parameters(model), **persistent_buffers(model)}  # zoo.fuse_projections undone
    first = next(iter(params.values()))
    config["dtype"] = str(first.dtype).removeprefix("torch.")
    tensors: dict[str, torch.Tensor] = {}
    family = checkpoint_family(config["model_type"], "model_type")
    for rule in tensor_rules(family, ZooShapes({n: p.shape for n, p in params.items()}, model.spec), ()):
        with torch.no_grad():
            for name, tensor in zip(rule.hf, rule.save([params[n] for n in rule.zoo])):
                tensors[name] = tensor
    text = tokenizer_files(model.checkpoint) if model.checkpoint is not None else {}
    if "generation_config.json" in text:  # the GGUF's ids, also where transformers' config has them
        config.update({k: v for k, v in json.loads(text["generation_config.json"]).items()})
    write_safetensors(tensors, out / "model.safetensors", metadata={"format": "pt"})
    write_text_atomic(out / "config.json", json.dumps(config, indent=2) + "\n")
    for name, content in text.items():
        write_text_atomic(out / name, content)
    return out
