"""Training: the loss goes down, seeded runs are bit-identical, one step equals a plain loop,
MoE balancing loss, checkpoint resume, the train CLI."""

from __future__ import annotations

import copy

import torch

import zoo
from zoo.training.config import TrainConfig
from zoo.training.moe_aux import load_balancing_loss
from zoo.training.objectives import CausalLM, MaskedLM, Seq2Seq, objective_for
from zoo.training.run import train_variant
from zoo.training.step import Trainer

TINY = {
    "n_layers": 2,
    "d_model": 32,
    "attention.n_heads": 4,
    "attention.n_kv_heads": 2,
    "attention.head_dim": 8,
    "ffn.hidden": 64,
    "vocab_size": 256,
    "max_seq_len": 64,
}


def tiny_llama() -> zoo.ModelSpec:
    return zoo.spec("llama-3.2-1b").override(TINY)


def _batch(trainer: Trainer, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    rows = torch.randint(trainer.model.spec.vocab_size, (4, trainer.objective.rows_len(16)), generator=g)
    return trainer.objective.batch(rows, g)


def test_loss_goes_down_and_seeded_steps_are_bit_identical() -> None:
    def run() -> tuple[list[float], dict[str, torch.Tensor]]:
        trainer = Trainer(zoo.build(tiny_llama(), seed=3), TrainConfig(lr=1e-2))
        batch = _batch(trainer)
        losses = [trainer.step(batch).loss for _ in range(8)]
        return losses, trainer.model.state_dict()

    losses, weights = run()
    again, weights_again = run()
    assert losses[-1] < losses[0] - 0.5
    assert losses == again
    assert all(torch.equal(weights[k], weights_again[k]) for k in weights)


def test_one_adamw_step_equals_a_plain_pytorch_loop() -> None:
    model = zoo.build(tiny_llama(), seed=1)
    reference = copy.deepcopy(model)
    config = TrainConfig(lr=1e-3, weight_decay=0.1, grad_clip=None)
    trainer = Trainer(model, config)
    batch = _batch(trainer)
    trainer.step(batch)
    # the plain loop, written out: shifted cross entropy, AdamW, decay on matrices only
    logits = reference(batch.input_ids)
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), batch.input_ids[:, 1:].flatten())
    loss.backward()
    params = list({id(p): p for p in reference.parameters()}.values())
    optimizer = torch.optim.AdamW(
        [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ],
        lr=1e-3,
        betas=(0.9, 0.95),
    )
    optimizer.step()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-7, msg=name)


def test_objectives_follow_the_topology() -> None:
    config = TrainConfig()
    assert isinstance(objective_for(zoo.build(tiny_llama(), device="meta"), config), CausalLM)
    bert = zoo.spec("bert-base-uncased").override(
        {
            "n_layers": 1,
            "d_model": 32,
            "attention.n_heads": 2,
            "attention.head_dim": 16,
            "ffn.hidden": 64,
            "head.kind": "masked_lm",
        }
    )
    assert isinstance(objective_for(zoo.build(bert, device="meta"), config), MaskedLM)
    assert isinstance(objective_for(zoo.build("t5-small", device="meta"), config), Seq2Seq)


def test_bert_masking_is_15_percent_80_10_10() -> None:
    objective = MaskedLM(vocab_size=1000, probability=0.15, mask_token_id=999)
    tokens = torch.randint(0, 998, (64, 512), generator=torch.Generator().manual_seed(0))
    batch = objective.batch(tokens, torch.Generator().manual_seed(1))
    chosen = batch.labels != -100
    assert abs(chosen.float().mean().item() - 0.15) < 0.005
    assert torch.equal(batch.labels[chosen], tokens[chosen])
    masked = (batch.input_ids == 999) & chosen
    kept = (batch.input_ids == tokens) & chosen
    assert abs(masked.sum().item() / chosen.sum().item() - 0.8) < 0.01
    assert abs(kept.sum().item() / chosen.sum().item() - 0.1) < 0.01  # plus random draws that hit the same id
    assert torch.equal(batch.input_ids[~chosen], tokens[~chosen])


def test_balancing_loss_is_one_when_routing_is_uniform() -> None:
    # Switch: E * sum f_e P_e = 1 when every expert gets the same share and probability
    logits = torch.zeros(8, 4)
    logits[torch.arange(8), torch.arange(8) % 4] = 1.0
    assert abs(load_balancing_loss(logits, 4, 1).item() - 1.0) < 1e-6


def test_moe_step_adds_the_balancing_loss() -> None:
    spec = tiny_llama().override({"ffn.kind": "moe", "ffn.n_experts": 4, "ffn.top_k": 2, "ffn.hidden": 32})
    trainer = Trainer(zoo.build(spec, seed=0), TrainConfig())
    result = trainer.step(_batch(trainer))
    assert result.aux_loss is not None and result.aux_loss >= 1.0 - 1e-4


def test_run_resumes_to_the_same_weights(tmp_path) -> None:
    text = tmp_path / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 200)
    config = TrainConfig(batch_size=2, seq_len=16)
    whole = train_variant(tiny_llama(), text, 2 * 32 * 4, seed=0, config=config, out=tmp_path / "whole")
    train_variant(tiny_llama(), text, 2 * 32 * 2, seed=0, config=config, out=tmp_path / "part")
    resumed = train_variant(tiny_llama(), text, 2 * 32 * 4, seed=0, config=config, out=tmp_path / "part", resume=True)
    assert resumed.curve == whole.curve
    assert resumed.held_out_loss == whole.held_out_loss
    assert (tmp_path / "whole" / "loss.png").is_file() and (tmp_path / "whole" / "loss.jsonl").is_file()


def test_train_cli(tmp_path, capsys) -> None:
    from zoo.cli import main

    text = tmp_path / "text.txt"
    text.write_text("hello world " * 300)
    sets = [a for k, v in TINY.items() for a in ("--set", f"{k}={v}")]
    assert (
        main(
            [
                "train",
                "--arch",
                "llama-3.2-1b",
                *sets,
                "--text",
                str(text),
                "--tokens",
                "512",
                "--batch-size",
                "2",
                "--seq-len",
                "16",
                "--out",
                str(tmp_path / "o"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "tokenizer: bytes" in out and "held-out loss" in out
    assert main(["train", "--arch", "llama-3.2-1b", "--text", str(tmp_path / "none"), "--tokens", "8"]) == 2
