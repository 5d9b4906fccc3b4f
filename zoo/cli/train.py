"""`zoo train`: train a small variant from scratch for a token budget; held-out loss, curve, checkpoint."""

from __future__ import annotations

import argparse

from zoo.cli.common import add_spec_arguments, load_spec
from zoo.errors import TrainingError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("train", help="train a variant (from scratch, or fine-tune --weights) on a text")
    add_spec_arguments(p)
    p.add_argument(
        "--weights",
        metavar="CHECKPOINT",
        help="fine-tune this checkpoint (a Hugging Face folder or "
        "repo id, or a GGUF file) instead of training --arch/--spec from scratch",
    )
    p.add_argument(
        "--lora",
        metavar="r=16,targets=q,v",
        help="train LoRA adapters only (keys: r, alpha, dropout, "
        "targets among q,k,v,o,gate,up,down); writes adapters.safetensors and adapter_config.json",
    )
    p.add_argument(
        "--qat",
        choices=["int8", "int4"],
        help="quantization-aware training: fake-quantized weights (zoo.quant's maths, straight-through gradient)",
    )
    p.add_argument(
        "--ptq",
        choices=["int8", "int4"],
        help="also report the held-out loss with the trained weights "
        "quantized after training: run once with --qat X and once with --ptq X to compare on one budget",
    )
    p.add_argument("--qat-group-size", type=int, help="int4 group size of --qat/--ptq (default: zoo.quant's, 32)")
    p.add_argument("--text", required=True, metavar="FILE", help="training text; its last 10%% is held out")
    p.add_argument("--tokens", type=int, required=True, help="training tokens (the step count is tokens / batch)")
    p.add_argument("--tokenizer", metavar="tokenizer.json", help="a tokenizers file (default: UTF-8 bytes)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--optimizer", default="adamw", choices=["adamw", "sgd", "adafactor"])
    p.add_argument("--precision", default="float32", choices=["float32", "bf16-mixed"])
    p.add_argument("--checkpointing", action="store_true", help="recompute each block in backward")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    p.add_argument("--out", metavar="DIR", help="loss.jsonl, loss.png, result.json and checkpoint.safetensors")
    p.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    p.add_argument("--checkpoint-every", type=int, default=0, metavar="STEPS")
    p.set_defaults(func=run)


def _spec_and_tune(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """The spec trained and how (loaded weights, LoRA, QAT)."""
    from zoo.hub.loading import from_pretrained
    from zoo.training.lora import parse_lora
    from zoo.training.run import FineTune

    lora = parse_lora(args.lora) if args.lora else None
    if args.weights is None:
        return load_spec(args), FineTune(None, lora, args.qat, args.qat_group_size, args.ptq)
    if args.arch or args.spec_file or args.hf_config or args.overrides:
        raise TrainingError("--weights: the checkpoint gives the model; drop --arch/--spec/--hf-config/--set")
    model = from_pretrained(args.weights, dtype="float32", progress=False)
    return model.spec, FineTune(model, lora, args.qat, args.qat_group_size, args.ptq)


def run(args: argparse.Namespace) -> int:
    import torch

    from zoo.training.config import TrainConfig
    from zoo.training.run import train_variant

    if args.resume and not args.out:
        raise TrainingError("--resume: needs --out DIR holding the checkpoint")
    if args.threads:
        torch.set_num_threads(args.threads)
    spec, tune = _spec_and_tune(args)
    config = TrainConfig(
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        lr=args.lr,
        optimizer=args.optimizer,
        precision=args.precision,
        checkpointing=args.checkpointing,
        compile=args.compile,
    )
    result = train_variant(
        spec,
        args.text,
        args.tokens,
        args.seed,
        config=config,
        tokenizer=args.tokenizer,
        out=args.out,
        resume=args.resume,
        checkpoint_every=args.checkpoint_every,
        tune=tune,
    )
    print(
        f"tokenizer: {result.tokenizer}  steps: {result.steps}  tokens: {result.tokens:,}  "
        f"trainable parameters: {result.trainable_params:,}"
    )
    print(
        f"held-out loss: {result.held_out_loss:.4f}  perplexity: {result.perplexity:.2f}  "
        f"train tokens/s: {result.tokens_per_s:,.0f}"
        + (f"  (weights fake-quantized to {tune.qat})" if tune.qat else "")
    )
    if result.held_out_loss_ptq is not None:
        print(f"held-out loss with {tune.ptq} weights (post-training quantization): {result.held_out_loss_ptq:.4f}")
    print(
        f"step memory: measured {result.step_memory_measured / 2**20:.2f} MiB (CPU: weights, grads, optimizer "
        f"state + saved activations), analysed {result.step_memory_analysed / 2**20:.2f} MiB"
    )
    if args.out:
        extra = ", adapters.safetensors, adapter_config.json" if tune.lora else ""
        print(f"wrote {args.out}/loss.jsonl, loss.png, result.json, checkpoint.safetensors{extra}")
    return 0
