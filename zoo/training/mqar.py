"""Multi-query associative recall (MQAR), as Zoology defines it, and a probe that trains on it.

Arora, Eyuboglu et al. 2023, "Zoology: Measuring and Improving Recall in Efficient Language
Models" (github.com/HazyResearch/zoology, ``zoology/data/associative_recall.py``, ``_mqar``):
the vocabulary is split in half, keys from [1, V/2) and values from [V/2, V); a sequence
opens with ``num_kv_pairs`` distinct key-value pairs, then each key is queried once, at a gap
drawn without replacement from a power law p(g) ∝ a·g^(a-1) over even offsets of the rest of
the sequence; the label at a query is its key's value, every other label -100; the remaining
slots are random tokens. The numpy draws follow Zoology's order with a seeded RandomState
(so the keys, values and gaps are Zoology's for a seed); the random filler uses a seeded
torch Generator where Zoology uses torch's global stream.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from zoo.errors import TrainingError
from zoo.model.build import ZooModel
from zoo.training.objectives import IGNORE


@dataclass(frozen=True)
class MQARSetting:
    vocab_size: int = 8192
    seq_len: int = 128
    num_kv_pairs: int = 8
    power_a: float = 0.01
    random_non_queries: bool = True

    def check(self) -> None:
        if self.seq_len % 2:
            raise TrainingError(f"seq_len: {self.seq_len} must be even (Zoology's MQAR)")
        if self.vocab_size <= self.seq_len:
            raise TrainingError(f"vocab_size: {self.vocab_size} must exceed seq_len={self.seq_len}")
        if self.num_kv_pairs * 4 > self.seq_len:
            raise TrainingError(f"num_kv_pairs: {self.num_kv_pairs} x 4 must be <= seq_len={self.seq_len}")


def mqar(setting: MQARSetting, num_examples: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs (N, T), labels (N, T)) of MQAR; labels are -100 except at each query, where
    the label is the value paired with the queried key."""
    setting.check()
    rng = np.random.RandomState(seed)
    V, T, pairs = setting.vocab_size, setting.seq_len, setting.num_kv_pairs
    context = 2 * pairs
    key_choices, value_choices = np.arange(1, V // 2), np.arange(V // 2, V)
    keys = np.stack([rng.choice(key_choices, replace=False, size=pairs) for _ in range(num_examples)])
    values = np.stack([rng.choice(value_choices, replace=False, size=pairs) for _ in range(num_examples)])
    kvs = np.zeros((num_examples, context), dtype=np.int64)
    kvs[:, 0::2], kvs[:, 1::2] = keys, values
    space = (T - context) // 2
    p = setting.power_a * np.arange(1, space + 1) ** (setting.power_a - 1)
    p = p / p.sum()
    gaps = np.stack([rng.choice(np.arange(space), replace=False, p=p, size=pairs) for _ in range(num_examples)])
    queries = np.zeros((num_examples, T - context + 1), dtype=np.int64)
    np.put_along_axis(queries, gaps * 2, keys, axis=1)
    examples = np.concatenate([kvs, queries], axis=1)  # (N, T + 1)
    labels = np.full((num_examples, T + 1), IGNORE, dtype=np.int64)
    np.put_along_axis(labels, gaps * 2 + context + 1, values, axis=1)
    inputs, targets = torch.tensor(examples[:, :-1]), torch.tensor(labels[:, 1:])  # (N, T) each
    if setting.random_non_queries:
        filler = torch.randint(V, inputs.shape, generator=torch.Generator().manual_seed(seed))
        inputs = torch.where(inputs == 0, filler, inputs)
    return inputs, targets


def recall_loss(model: ZooModel, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    logits = model(inputs)  # (B, T, V)
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE)


@torch.no_grad()
def recall_accuracy(model: ZooModel, inputs: torch.Tensor, labels: torch.Tensor, batch_size: int = 64) -> float:
    """Fraction of queries whose argmax prediction is the paired value (Zoology's metric)."""
    model.eval()
    correct = total = 0
    for start in range(0, inputs.shape[0], batch_size):
        x, y = inputs[start : start + batch_size], labels[start : start + batch_size]
        predicted = model(x).argmax(dim=-1)  # (B, T)
        asked = y != IGNORE
        correct += int((predicted[asked] == y[asked]).sum())
        total += int(asked.sum())
    return correct / max(total, 1)
