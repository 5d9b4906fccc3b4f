"""Every built-in preset with a Hugging Face family saves as that family, encoders and
encoder-decoders included (a config reader spelling out what an encoder inherits, or what
its role implies, used to make t5-small, bart-base, bert-base-uncased and modernbert-base
unsaveable when built from their presets)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import zoo
from zoo.hub.save import matching_config
from zoo.specs.registry import BUILTIN_PLUGINS, get_registry

NO_FAMILY = {"transformer-base"}  # Vaswani et al.'s model: sinusoidal, post-norm; no transformers class


BUILTIN = sorted(name for name, entry in get_registry().architectures.items() if entry.plugin in BUILTIN_PLUGINS)


@pytest.mark.parametrize("preset", BUILTIN)
def test_every_preset_finds_the_family_that_computes_it(preset: str) -> None:
    spec = zoo.spec(preset)
    if preset in NO_FAMILY:
        with pytest.raises(zoo.errors.CheckpointError, match="cannot be written"):
            matching_config(spec, None)
    else:
        assert matching_config(spec, None)["model_type"]


ENCODER_PRESETS = {  # preset -> the overrides that shrink it, structure kept
    "t5-small": {"encoder.n_layers": 1},
    "bart-base": {"encoder.n_layers": 1},
    "bert-base-uncased": {},
    "modernbert-base": {},
    "electra-base-discriminator": {},
    "deberta-v3-base": {},
}


@pytest.mark.parametrize("preset", sorted(ENCODER_PRESETS))
def test_a_built_encoder_preset_saves_and_transformers_reads_every_tensor(preset: str, tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    spec = zoo.spec(preset).override({"n_layers": 1, "vocab_size": 128, **ENCODER_PRESETS[preset]})
    model = zoo.build(spec, seed=0).eval()
    zoo.save_pretrained(model, tmp_path)
    again = zoo.from_pretrained(tmp_path, progress=False).eval()
    ids = torch.randint(1, 128, (2, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        if model.encoder is not None:  # an encoder-decoder: the decoder reads the encoder's output
            assert torch.equal(again(ids, memory=again.encode(ids)), model(ids, memory=model.encode(ids)))
        else:
            assert torch.equal(again(ids), model(ids))
    config = transformers.AutoConfig.from_pretrained(tmp_path)
    hf_class = getattr(transformers, config.architectures[0])
    _, info = hf_class.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
