"""The Hugging Face ``bert`` checkpoint family: BertModel (pooler head) and BertForMaskedLM
(masked-LM head), by ``architectures``."""

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

MODEL_TYPE = "bert"
ARCHITECTURE = "BertModel"  # with a masked-LM head, write_config names BertForMaskedLM
IGNORED = BERT_IGNORED
LAYOUT = BertLayout(
    root="bert",
    head="cls.predictions",
    dense="transform.dense",
    norm="transform.LayerNorm",
    base_architecture=ARCHITECTURE,
    masked_architecture="BertForMaskedLM",
    position_offset=False,
)


def read_config(r: ConfigReader) -> dict[str, Any]:
    """The spec dict of a bert config.json."""
    return read_bert_like(r, LAYOUT)


def write_config(spec: ModelSpec) -> dict[str, Any]:
    """The bert config.json computing what ``spec`` computes."""
    return write_bert_like(spec, MODEL_TYPE, LAYOUT)


def tensor_rules(zoo_names: Collection[str], hf_keys: Collection[str]) -> tuple[list[Rule], list[tuple[str, str]]]:
    """Renames only: BertModel's names, or BertForMaskedLM's under ``bert.``."""
    return [], bert_renames(zoo_names, hf_keys, LAYOUT)
