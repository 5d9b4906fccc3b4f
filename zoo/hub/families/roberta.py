"""The Hugging Face ``roberta`` checkpoint family: RobertaModel (pooler head) and RobertaForMaskedLM
(masked-LM head), by ``architectures``; real tokens are numbered from ``pad_token_id + 1``."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from zoo.hub.bert_like import (
    BERT_IGNORED,
    BertLayout,
    bert_renames,
    read_bert_like,
    write_bert_like,
)
from zoo.hub.config_reader import ConfigReader
from zoo.hub.names import Rule
from zoo.specs.model import ModelSpec

MODEL_TYPE = "roberta"
ARCHITECTURE = "RobertaModel"  # with a masked-LM head, write_config names RobertaForMaskedLM
IGNORED = BERT_IGNORED
LAYOUT = BertLayout(
    root="roberta",
    head="lm_head",
    dense="dense",
    norm="layer_norm",
    base_architecture=ARCHITECTURE,
    masked_architecture="RobertaForMaskedLM",
    position_offset=True,
)


def read_config(r: ConfigReader) -> dict[str, Any]:
    """The spec dict of a roberta config.json."""
    return read_bert_like(r, LAYOUT)


def write_config(spec: ModelSpec) -> dict[str, Any]:
    """The roberta config.json computing what ``spec`` computes."""
    return write_bert_like(spec, MODEL_TYPE, LAYOUT)


def tensor_rules(zoo_names: Collection[str], hf_keys: Collection[str]) -> tuple[list[Rule], list[tuple[str, str]]]:
    """Renames only: RobertaModel's names, or RobertaForMaskedLM's under ``roberta.``."""
    return [], bert_renames(zoo_names, hf_keys, LAYOUT)
