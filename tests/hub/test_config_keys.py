"""Configs from the wild: keys that cannot change the forward pass are accepted, keys that can
stay errors. The rule is tested against transformers' own PretrainedConfig base class."""

from __future__ import annotations

import pytest

from tests.hub.test_config import QWEN3_0_6B
from zoo.errors import CheckpointError
from zoo.hub.config import spec_from_hf_config
from zoo.hub.config_keys import BASE_CHECKS, NEUTRAL_KEYS, is_neutral

transformers = pytest.importorskip("transformers")

# Keys a family reads itself (mapped into the spec), besides the base class's.
FAMILY_READS = {"tie_word_embeddings", "quantization_config"}
# transformers 4.x saved these base-class attributes in every config.json (configuration_utils.py,
# PretrainedConfig.__init__ and its generation defaults); transformers 5 no longer writes them.
TRANSFORMERS_4_BASE = {
    "return_dict",
    "output_hidden_states",
    "output_attentions",
    "torchscript",
    "torch_dtype",
    "use_bfloat16",
    "tf_legacy_loss",
    "pruned_heads",
    "tie_word_embeddings",
    "chunk_size_feed_forward",
    "is_encoder_decoder",
    "is_decoder",
    "cross_attention_hidden_size",
    "add_cross_attention",
    "tie_encoder_decoder",
    "max_length",
    "min_length",
    "do_sample",
    "early_stopping",
    "num_beams",
    "num_beam_groups",
    "diversity_penalty",
    "temperature",
    "top_k",
    "top_p",
    "typical_p",
    "repetition_penalty",
    "length_penalty",
    "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size",
    "bad_words_ids",
    "num_return_sequences",
    "output_scores",
    "return_dict_in_generate",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "remove_invalid_values",
    "exponential_decay_length_penalty",
    "suppress_tokens",
    "begin_suppress_tokens",
    "architectures",
    "finetuning_task",
    "id2label",
    "label2id",
    "tokenizer_class",
    "prefix",
    "bos_token_id",
    "pad_token_id",
    "eos_token_id",
    "sep_token_id",
    "decoder_start_token_id",
    "task_specific_params",
    "problem_type",
    "_name_or_path",
    "transformers_version",
    "gradient_checkpointing",
    "model_type",
}


def _classified(key: str) -> bool:
    return is_neutral(key) or key in BASE_CHECKS or key in FAMILY_READS


def test_every_key_of_the_installed_base_class_is_classified():
    keys = set(transformers.PretrainedConfig().to_dict())
    keys |= set(transformers.PretrainedConfig(gradient_checkpointing=True, use_bfloat16=True).to_dict())
    assert keys, "PretrainedConfig().to_dict() is empty"
    assert sorted(k for k in keys if not _classified(k)) == []


def test_every_transformers_4_base_key_is_classified():
    assert sorted(k for k in TRANSFORMERS_4_BASE if not _classified(k)) == []


def test_neutral_and_checked_keys_do_not_overlap():
    assert not NEUTRAL_KEYS & set(BASE_CHECKS) and not NEUTRAL_KEYS & FAMILY_READS


def test_a_config_with_every_base_key_at_its_default_loads():
    defaults = transformers.PretrainedConfig().to_dict()
    extras = {k: v for k, v in defaults.items() if k not in ("model_type", "architectures", "dtype")}
    wild = {
        **extras,
        "unk_token_id": 0,
        "gradient_checkpointing": True,
        "torchscript": False,
        "use_bfloat16": True,
        "_name_or_path": "/home/me/ckpt",
        "hidden_dropout": 0.1,
        "summary_first_dropout": 0.1,
        "num_beams": 4,
        "pruned_heads": {},
        "is_encoder_decoder": False,
        "add_cross_attention": False,
    }
    spec = spec_from_hf_config({**QWEN3_0_6B, **wild})
    assert spec.d_model == 1024 and spec.name == "/home/me/ckpt"


@pytest.mark.parametrize(
    "key,value,message",
    [
        ("is_encoder_decoder", True, "not an encoder-decoder"),
        ("add_cross_attention", True, "cross-attention"),
        ("pruned_heads", {"0": [1]}, "pruned attention heads"),
        ("cross_attention_hidden_size", 512, "cross-attention"),
        ("attn_logit_softcapping", 50.0, "unknown config key"),
        ("hidden_size_per_head_scale", 2, "unknown config key"),
    ],
)
def test_keys_that_change_the_computation_stay_errors(key, value, message):
    with pytest.raises(CheckpointError, match=f"{key}: .*{message}"):
        spec_from_hf_config({**QWEN3_0_6B, key: value})
