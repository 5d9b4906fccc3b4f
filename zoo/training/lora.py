"""LoRA (Hu et al. 2021): low-rank adapters beside frozen linear layers, saved as safetensors.

A targeted ``nn.Linear`` W becomes ``LoraLinear``: ``y = x W^T + b + (alpha / r) * B A dropout(x)``
with A (r, in) initialised as PEFT does (Kaiming-uniform, a=sqrt(5)) and B (out, r) zeros, so
an adapted model starts exactly at the base model's outputs. Every base parameter is frozen:
only A and B take gradients and optimizer state, which is what makes a LoRA step cheap in
memory (and what ``zoo.analysis.training.training_memory(..., adapt=)`` counts).

Targets are zoo's own projection names without ``_proj``: q, k, v, o (attention), gate, up,
down (FFN); a target may also be a full child name (``in_proj`` of a Mamba mixer). Adapters
are written as ``adapters.safetensors`` (tensor names as in the model's state dict) plus
``adapter_config.json`` (r, alpha, dropout, targets), and read back with every name and
shape checked against the model before a byte is copied.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    ValidationError,
)
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from zoo.errors import TrainingError
from zoo.files.atomic import atomic_path, write_text_atomic

ADAPTERS_FILE = "adapters.safetensors"
CONFIG_FILE = "adapter_config.json"


class LoraConfig(BaseModel):
    """Rank, scale (``alpha / r``), dropout on the adapter's input, and the targeted layers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    r: PositiveInt = 16
    alpha: PositiveFloat | None = Field(None, description="scale numerator; default r (scale 1)")
    dropout: NonNegativeFloat = Field(0.0, lt=1.0)
    targets: tuple[str, ...] = ("q", "v")

    @property
    def scale(self) -> float:
        return (self.alpha if self.alpha is not None else self.r) / self.r


def parse_lora(text: str) -> LoraConfig:
    """``r=16,alpha=32,dropout=0.05,targets=q,v``: a bare item after ``targets=`` is one more target."""
    fields: dict[str, object] = {}
    key = None
    for item in (s.strip() for s in text.split(",") if s.strip()):
        name, eq, value = item.partition("=")
        if eq:
            key = name.strip()
            fields[key] = [value.strip()] if key == "targets" else value.strip()
        elif key == "targets":
            fields["targets"].append(name)  # type: ignore[union-attr]
        else:
            raise TrainingError(f"--lora: {item!r} is not KEY=VALUE; e.g. r=16,alpha=32,dropout=0.05,targets=q,v")
    try:
        return LoraConfig.model_validate(fields)
    except ValidationError as error:
        first = error.errors()[0]
        raise TrainingError(
            f"--lora: {'.'.join(map(str, first['loc']))}: {first['msg']} (allowed keys: r, alpha, dropout, targets)"
        ) from None


class LoraLinear(nn.Module):
    """A frozen linear layer plus a trainable low-rank update."""

    def __init__(self, base: nn.Linear, config: LoraConfig) -> None:
        super().__init__()
        self.base, self.scale = base, config.scale
        base.requires_grad_(False)
        weight = base.weight
        self.lora_A = nn.Parameter(torch.empty(config.r, base.in_features, device=weight.device, dtype=weight.dtype))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, config.r, device=weight.device, dtype=weight.dtype))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.dropout = nn.Dropout(config.dropout) if config.dropout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        update = self.dropout(x) @ self.lora_A.T @ self.lora_B.T  # (..., in) -> (..., r) -> (..., out)
        return self.base(x) + self.scale * update  # (..., out)


def _matches(child_name: str, targets: tuple[str, ...]) -> str | None:
    for target in targets:
        if child_name in (target, f"{target}_proj"):
            return target
    return None


def apply_lora(model: nn.Module, config: LoraConfig) -> list[str]:
    """Freeze ``model`` and wrap each targeted linear layer, in place; the wrapped modules'
    names. A target that names no linear layer is a TrainingError listing the names there are."""
    model.requires_grad_(False)
    found: list[tuple[nn.Module, str, nn.Linear, str]] = []
    names: set[str] = set()
    for prefix, parent in model.named_modules():
        for child_name, child in parent.named_children():
            if isinstance(child, nn.Linear) and not any(child.children()):  # plain products, as zoo.quant
                names.add(child_name.removesuffix("_proj"))
                target = _matches(child_name, config.targets)
                if target is not None:
                    found.append((parent, child_name, child, f"{prefix}.{child_name}".lstrip(".")))
    missing = set(config.targets) - {_matches(child, config.targets) for _, child, _, _ in found}
    if missing:
        raise TrainingError(
            f"--lora targets: {', '.join(sorted(missing))} name no linear layer of this model; "
            f"allowed: {', '.join(sorted(names))}"
        )
    for parent, child_name, linear, _ in found:
        setattr(parent, child_name, LoraLinear(linear, config))
    return [name for _, _, _, name in found]


def adapter_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The adapters' tensors by state-dict name (``...q_proj.lora_A``)."""
    return {name: p.detach().contiguous() for name, p in model.named_parameters() if ".lora_" in name}


def save_adapters(model: nn.Module, config: LoraConfig, out: str | Path) -> Path:
    """``adapters.safetensors`` and ``adapter_config.json`` under ``out``; the folder."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    with atomic_path(folder / ADAPTERS_FILE) as tmp:
        save_file(adapter_state(model), str(tmp), metadata={"format": "pt"})
    write_text_atomic(folder / CONFIG_FILE, config.model_dump_json(indent=2) + "\n")
    return folder


def load_adapters(model: nn.Module, folder: str | Path) -> LoraConfig:
    """Wrap ``model`` as the saved config says and copy the saved adapters in; names, shapes
    and dtypes are checked from the file's header before any tensor is read."""
    folder = Path(folder)
    config_path, tensors_path = folder / CONFIG_FILE, folder / ADAPTERS_FILE
    if not config_path.is_file() or not tensors_path.is_file():
        raise TrainingError(f"adapters: {folder} needs {CONFIG_FILE} and {ADAPTERS_FILE}")
    try:
        config = LoraConfig.model_validate(json.loads(config_path.read_text()))
    except (ValueError, ValidationError) as error:
        raise TrainingError(f"adapters: {config_path} is not a LoRA config: {error}") from None
    apply_lora(model, config)
    expected = dict(model.named_parameters())
    expected = {name: p for name, p in expected.items() if ".lora_" in name}
    with safe_open(str(tensors_path), framework="pt") as handle:
        keys = set(handle.keys())
        if keys != set(expected):
            extra, lacking = sorted(keys - set(expected)), sorted(set(expected) - keys)
            raise TrainingError(
                f"adapters: {tensors_path} does not fit this model; unexpected {extra[:3]}, missing {lacking[:3]}"
            )
        for name, param in expected.items():
            shape = tuple(handle.get_slice(name).get_shape())
            if shape != tuple(param.shape):
                raise TrainingError(
                    f"adapters: {name} in {tensors_path} is {shape}; the model needs {tuple(param.shape)}"
                )
        with torch.no_grad():
            for name, param in expected.items():
                param.copy_(handle.get_tensor(name))
    return config


def trainable_count(model: nn.Module) -> int:
    return sum(p.numel() for p in {id(p): p for p in model.parameters() if p.requires_grad}.values())
