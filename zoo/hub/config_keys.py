"""Which config.json keys zoo may accept without reading them: the rule, and its key lists.

Configs from the wild carry more than any family's own fields: everything transformers'
``PretrainedConfig`` base class saves (generation defaults, TensorFlow and TorchScript flags,
token ids, label maps), training leftovers, hub provenance. The rule:

    A key is accepted unread only if it cannot change the logits of a forward pass over
    the checkpoint's weights. A key that can, and that zoo does not implement, is an error.

Keys that cannot change the forward pass fall into four groups (``NEUTRAL_KEYS``):
- identity and provenance: names, paths, versions, hashes, label maps, task names;
- token ids (``*_token_id``, also matched by suffix): the tokenizer's and ``generate``'s
  business, never the forward's;
- run-time and training switches: dtypes (zoo takes the dtype from the call), output
  selection, caching, TorchScript/TensorFlow flags, gradient checkpointing, initialisation
  ranges, dropouts (identity at inference; also matched by name) and feed-forward chunking
  (the same result computed in pieces);
- generation defaults (beams, sampling, lengths, penalties): ``zoo generate`` has its own.

Base-class keys that *can* change the computation are checked to hold the value that makes
them inert (``BASE_CHECKS``: no encoder-decoder, no cross-attention, no pruned heads); any
other value is a ``CheckpointError``. Each family's own keys are read (mapped into the spec)
or checked by its checkpoint family (``zoo/hub/families/``); whatever is left is an error naming the key.
"""

from __future__ import annotations

from typing import Any

IDENTITY_KEYS = frozenset(
    {
        "_name_or_path",
        "name_or_path",
        "_commit_hash",
        "transformers_version",
        "architectures",
        "model_type",
        "auto_map",
        "tokenizer_class",
        "finetuning_task",
        "prefix",
        "task_specific_params",
        "problem_type",
        "id2label",
        "label2id",
        "num_labels",
        "summary_activation",
        "summary_first_dropout",
        "summary_proj_to_labels",
        "summary_type",
        "summary_use_proj",
    }
)
TOKEN_ID_KEYS = frozenset(
    {
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "unk_token_id",
        "sep_token_id",
        "cls_token_id",
        "mask_token_id",
        "decoder_start_token_id",
        "forced_bos_token_id",
        "forced_eos_token_id",
    }
)
RUNTIME_KEYS = frozenset(
    {
        "dtype",
        "torch_dtype",
        "use_bfloat16",
        "torchscript",
        "tf_legacy_loss",
        "gradient_checkpointing",
        "use_cache",
        "return_dict",
        "use_return_dict",
        "output_attentions",
        "output_hidden_states",
        "_attn_implementation",
        "_attn_implementation_internal",
        "_attn_implementation_autoset",
        "attn_implementation",
        "cache_implementation",
        "initializer_range",
        "initializer_factor",
        "chunk_size_feed_forward",
        "attention_dropout",
        "hidden_dropout_prob",
        "attention_probs_dropout_prob",
        "resid_pdrop",
        "embd_pdrop",
        "attn_pdrop",
        "reorder_and_upcast_attn",
        "output_router_logits",
        "router_aux_loss_coef",
        "router_jitter_noise",
        "pretraining_tp",
        "_sliding_window_pattern",
        "sliding_window_pattern",
        "max_window_layers",
        "n_ctx",
    }
)
GENERATION_KEYS = frozenset(
    {
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
        "remove_invalid_values",
        "exponential_decay_length_penalty",
        "suppress_tokens",
        "begin_suppress_tokens",
    }
)
NEUTRAL_KEYS = IDENTITY_KEYS | TOKEN_ID_KEYS | RUNTIME_KEYS | GENERATION_KEYS

# Base-class keys that would change the computation, with the values that leave it alone.
BASE_CHECKS: dict[str, tuple[tuple[Any, ...], str]] = {
    "is_encoder_decoder": ((None, False), "not an encoder-decoder family"),
    "is_decoder": ((None, False, True), "a decoder-only causal LM is causal either way"),
    "add_cross_attention": ((None, False), "this family has no cross-attention"),
    "cross_attention_hidden_size": ((None,), "this family has no cross-attention"),
    "tie_encoder_decoder": ((None, False), "not an encoder-decoder family"),
    "pruned_heads": ((None, {}), "pruned attention heads are not supported"),
}


def is_neutral(key: str) -> bool:
    """True when ``key`` cannot change the forward pass (the rule in the module doc)."""
    return key in NEUTRAL_KEYS or key.endswith("_token_id") or key.endswith("_dropout") or key.endswith("_pdrop")
