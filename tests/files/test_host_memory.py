"""zoo.files.host_memory.rehome: weights copied into huge-page arenas, values, ties and saving kept."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import zoo
from tests.conftest import tiny_spec
from zoo.files import host_memory


def _storages(model: torch.nn.Module) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}


def test_weights_land_in_one_aligned_arena_with_their_values_and_ties() -> None:
    model = zoo.build(tiny_spec("qwen3-0.6b"), dtype="float32", seed=0)  # tied embeddings
    weight = model.layers[0].attention.q_proj.weight
    weight.data = weight.data.t().contiguous().t()  # column-major: (out, in) with strides (1, out)
    before = {name: t.clone() for name, t in model.state_dict().items()}
    host_memory.rehome(model)
    assert model.lm_head.weight is model.embed.weight  # still one tensor
    strided = model.layers[0].attention.q_proj.weight
    assert strided.stride() == (1, strided.shape[0])  # copied alone, its strides kept
    assert len(_storages(model) - {strided.untyped_storage().data_ptr()}) == 1  # the rest: one arena
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, before[name]), name
        assert tensor.data_ptr() % host_memory.ALIGN == 0


def test_a_large_model_takes_several_arenas_each_starting_on_a_huge_page(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host_memory, "ARENA_BYTES", 1 << 16)
    model = torch.nn.Sequential(*[torch.nn.Linear(128, 128) for _ in range(6)])  # 64 KiB weights each
    host_memory.rehome(model)
    weights = [layer.weight for layer in model]
    assert len({w.untyped_storage().data_ptr() for w in weights}) == 6
    assert all(w.data_ptr() % host_memory.HUGE_PAGE == 0 for w in weights)  # each opens its arena


def test_a_rehomed_model_saves_and_loads(tmp_path: Path) -> None:
    model = zoo.build(tiny_spec("qwen3-0.6b"), dtype="float32", seed=1)
    out = zoo.save_pretrained(model, tmp_path / "m")
    again = zoo.from_pretrained(out)
    for (name, a), b in zip(model.state_dict().items(), again.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
