"""from_pretrained against transformers: logits, cached greedy decoding, hub cache layout."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

import zoo
from tests.hub.conftest import FAMILIES, VOCAB
from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, prefill

PROMPT_LEN, NEW_TOKENS = 12, 32


def _prompt(batch: int = 2) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, PROMPT_LEN), generator=torch.Generator().manual_seed(1))


def zoo_greedy(model: torch.nn.Module, ids: torch.Tensor, new_tokens: int) -> torch.Tensor:
    cache = KVCache(model, batch_size=ids.shape[0], max_len=ids.shape[1] + new_tokens)
    token = prefill(model, ids, cache).argmax(-1, keepdim=True)  # (B, 1)
    out = [token]
    for _ in range(new_tokens - 1):
        token = decode_step(model, token, cache).argmax(-1, keepdim=True)
        out.append(token)
    return torch.cat(out, dim=1)  # (B, new_tokens)


@pytest.mark.parametrize("family", FAMILIES)
def test_logits_and_greedy_decoding_match_transformers(family: str, hf_checkpoints) -> None:  # type: ignore[no-untyped-def]
    hf_model, folder = hf_checkpoints[family]
    model = zoo.from_pretrained(folder, dtype="float32", progress=False)
    assert model.hf_model_type == family
    ids = torch.randint(0, VOCAB, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = hf_model(ids).logits
        got = model(ids)
    assert (got - expected).abs().max().item() < 1e-4

    prompt = _prompt()
    with torch.no_grad():
        reference = hf_model.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS,
            do_sample=False,
            pad_token_id=0,
        )[:, PROMPT_LEN:]
    assert torch.equal(zoo_greedy(model, prompt, NEW_TOKENS), reference)


def _hub_cache(hf_home: Path, repo_id: str, folder: Path) -> None:
    """The layout huggingface_hub writes: blobs/, snapshots/<commit>/ links, refs/main."""
    repo = hf_home / "hub" / f"models--{repo_id.replace('/', '--')}"
    commit = "0123456789abcdef0123456789abcdef01234567"
    snapshot = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for i, file in enumerate(sorted(folder.iterdir())):
        blob = repo / "blobs" / f"blob{i:04d}"
        shutil.copyfile(file, blob)
        (snapshot / file.name).symlink_to(Path("..") / ".." / "blobs" / blob.name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)


@pytest.mark.parametrize("family", FAMILIES)
def test_loads_by_repo_id_from_offline_hub_cache(family: str, hf_checkpoints, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import huggingface_hub.constants as hub_constants

    hf_model, folder = hf_checkpoints[family]
    _hub_cache(tmp_path, f"tiny-org/{family}", folder)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)  # read at import by huggingface_hub
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    model = zoo.from_pretrained(f"tiny-org/{family}", progress=False)
    ids = _prompt()
    with torch.no_grad():
        assert (model(ids) - hf_model(ids).logits).abs().max().item() < 1e-4


def test_offline_repo_not_in_cache_is_checkpoint_error(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import huggingface_hub.constants as hub_constants

    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(zoo.errors.CheckpointError, match="tiny-org/absent"):
        zoo.from_pretrained("tiny-org/absent", progress=False)


def test_bfloat16_load_casts_every_parameter(hf_checkpoints) -> None:  # type: ignore[no-untyped-def]
    _, folder = hf_checkpoints["qwen3"]
    model = zoo.from_pretrained(folder, dtype="bfloat16", progress=False)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert model.lm_head.weight is model.embed.weight  # tied, file without lm_head


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_loads_straight_onto_the_gpu_in_bfloat16(hf_checkpoints) -> None:  # type: ignore[no-untyped-def]
    hf_model, folder = hf_checkpoints["llama"]
    model = zoo.from_pretrained(folder, dtype="bfloat16", device="cuda", progress=False)
    assert {p.device.type for p in model.parameters()} == {"cuda"}
    reference = hf_model.to(device="cuda", dtype=torch.bfloat16)
    ids = _prompt().cuda()
    with torch.no_grad():
        assert (model(ids).float() - reference(ids).logits.float()).abs().max().item() < 0.1
    hf_model.to(device="cpu", dtype=torch.float32)
