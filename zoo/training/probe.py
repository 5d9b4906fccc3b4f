"""The MQAR probe: train each variant from scratch for a fixed step budget, report recall
beside the exact state/KV bytes per sequence that each variant keeps (zoo.cache_bytes)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import torch

from zoo.analysis.counts import cache_bytes, count_params
from zoo.model.build import build
from zoo.specs.model import ModelSpec
from zoo.training.config import TrainConfig
from zoo.training.mqar import MQARSetting, mqar, recall_accuracy, recall_loss
from zoo.training.optim import make_optimizer


@dataclass
class ProbeResult:
    variant: str
    attention: str
    params: int
    state_bytes_per_sequence: int  # the cache at seq_len: K/V slots in bf16 plus recurrent state in float32
    num_kv_pairs: int
    seq_len: int
    steps: int
    final_loss: float
    accuracy: float
    seconds: float

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def probe_variant(
    name: str,
    spec: ModelSpec,
    setting: MQARSetting,
    config: TrainConfig,
    steps: int,
    n_train: int = 20_000,
    n_test: int = 1_000,
) -> ProbeResult:
    """Train ``spec`` from scratch (seed ``config.seed``) for ``steps`` AdamW steps on MQAR."""
    start = time.perf_counter()
    train_x, train_y = mqar(setting, n_train, config.seed)
    test_x, test_y = mqar(setting, n_test, config.seed + 10)  # Zoology's test seed offset
    torch.manual_seed(config.seed)
    model = build(spec, seed=config.seed)
    optimizer = make_optimizer([p for p in model.parameters()], config)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=config.lr, total_steps=steps, pct_start=0.1)
    order = torch.Generator().manual_seed(config.seed)
    loss = torch.tensor(float("nan"))
    model.train()
    for _ in range(steps):
        index = torch.randint(n_train, (config.batch_size,), generator=order)
        optimizer.zero_grad(set_to_none=True)
        loss = recall_loss(model, train_x[index], train_y[index])
        loss.backward()
        if config.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        schedule.step()
    accuracy = recall_accuracy(model, test_x, test_y)
    state = cache_bytes(spec, batch_size=1, context_len=setting.seq_len).total
    return ProbeResult(
        name,
        spec.attention.kind,
        count_params(spec).total,
        state,
        setting.num_kv_pairs,
        setting.seq_len,
        steps,
        float(loss.detach()),
        accuracy,
        time.perf_counter() - start,
    )
