"""Training tokens/s of zoo and of transformers' LlamaForCausalLM on the same weights and batch.

A tiny llama-shaped model (default 4 layers, d_model 256) is made with transformers, saved
with ``save_pretrained`` and loaded into zoo, so both train the same weights. Each round
times ``--steps`` full steps (forward, causal-LM loss, backward, AdamW step; float32, the
same learning rate) of one model, then of the other (A, B, A, B, ...), so both see the same
load on a shared machine; one process, ``--threads 1`` by default. Reported: the best and
median round in tokens/s (wall), tokens per CPU-second (process time, which other
processes do not inflate), and the speed ratio to transformers per round (median). Both start from the same
weights; the losses after the first step are printed to show they train the same thing.

Run: python bench/train_vs_transformers.py [--layers 4] [--d-model 256] [--batch-size 8] [--seq-len 128]
     [--rounds 5] [--steps 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable

import torch
import transformers

import zoo
from zoo.training.config import TrainConfig
from zoo.training.step import Trainer


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3, help="training steps per round")
    parser.add_argument("--threads", type=int, default=1)
    return parser.parse_args()


def _models(args: argparse.Namespace) -> tuple[torch.nn.Module, zoo.ZooModel]:
    config = transformers.LlamaConfig(
        vocab_size=args.vocab,
        hidden_size=args.d_model,
        intermediate_size=4 * args.d_model,
        num_hidden_layers=args.layers,
        num_attention_heads=args.d_model // 64,
        num_key_value_heads=max(1, args.d_model // 128),
        max_position_embeddings=args.seq_len,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    reference = transformers.LlamaForCausalLM(config)
    with tempfile.TemporaryDirectory() as folder:
        reference.save_pretrained(folder, safe_serialization=True)
        ours = zoo.from_pretrained(folder, progress=False)
    return reference.train(), ours


def _hf_step(model: torch.nn.Module, ids: torch.Tensor) -> Callable[[], float]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.0, foreach=False)

    def step() -> float:
        optimizer.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=False)
        optimizer.step()
        return float(loss.detach())

    return step


def _zoo_step(model: zoo.ZooModel, ids: torch.Tensor) -> Callable[[], float]:
    trainer = Trainer(model, TrainConfig(lr=1e-3, betas=(0.9, 0.95), weight_decay=0.0, grad_clip=1.0))
    batch = trainer.objective.batch(ids)
    return lambda: trainer.step(batch).loss


def main() -> None:
    args = _parse()
    torch.set_num_threads(args.threads)
    reference, ours = _models(args)
    ids = torch.randint(0, args.vocab, (args.batch_size, args.seq_len), generator=torch.Generator().manual_seed(0))
    steps = {"transformers": _hf_step(reference, ids), "zoo": _zoo_step(ours, ids)}
    first = {name: step() for name, step in steps.items()}  # warm-up, and the loss both start from
    rounds: dict[str, list[tuple[float, float]]] = {name: [] for name in steps}
    for _ in range(args.rounds):
        for name, step in steps.items():
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in range(args.steps):
                step()
            rounds[name].append((time.perf_counter() - wall, time.process_time() - cpu))
    tokens = args.batch_size * args.seq_len * args.steps
    params = sum(p.numel() for p in reference.parameters())
    print(
        f"training step (forward, loss, backward, AdamW), llama-shaped: {args.layers} layers, d_model {args.d_model}, "
        f"vocab {args.vocab}, {params / 1e6:.1f}M parameters; batch {args.batch_size} x {args.seq_len}, float32, "
        f"{args.threads} thread(s), {args.rounds} interleaved rounds of {args.steps} steps\n"
    )
    print("| model | first-step loss | best tok/s | median tok/s | tok per CPU-s (best) | speed vs transformers |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, times in rounds.items():
        walls, cpus = [w for w, _ in times], [c for _, c in times]
        # per-round ratio (same round, same load), median over rounds
        ratio = statistics.median(h[1] / c for h, c in zip(rounds["transformers"], cpus, strict=True))
        print(
            f"| {name} | {first[name]:.5f} | {tokens / min(walls):,.0f} | "
            f"{statistics.median(tokens / w for w in walls):,.0f}"
            f" | {tokens / min(cpus):,.0f} | {ratio:.2f}x (CPU time, median of rounds) |"
        )


if __name__ == "__main__":
    main()
