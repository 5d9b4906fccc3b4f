"""Training objectives, one per topology: causal-LM, masked-LM (BERT) and teacher-forced seq2seq.

Which one applies is decided by the model's structure (an encoder stack, causal self-mixers),
never by a kind name. Each objective turns a block of token ids into a batch and a batch into
a loss that matches transformers' own loss for the same weights and batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from zoo.errors import TrainingError
from zoo.model.build import ZooModel
from zoo.training.config import TrainConfig

IGNORE = -100  # label of positions that carry no loss (transformers' convention)


@dataclass
class Batch:
    """Model inputs and labels; ``decoder_input_ids`` only for encoder-decoders."""

    input_ids: torch.Tensor  # (B, T)
    labels: torch.Tensor  # (B, T)
    decoder_input_ids: torch.Tensor | None = None  # (B, T)
    extra: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        """Tokens the step processes (encoder and decoder tokens both count)."""
        n = self.input_ids.numel()
        return n + (0 if self.decoder_input_ids is None else self.decoder_input_ids.numel())

    def to(self, device: torch.device) -> Batch:
        """The batch on ``device`` (batches are drawn on the CPU, from a CPU generator)."""
        moved = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in vars(self).items()}
        moved["extra"] = {k: v.to(device) for k, v in self.extra.items()}
        return Batch(**moved)


class Objective:
    """Base: ``rows_len`` token ids per row in, a Batch out; logits and labels to a loss."""

    name: str = ""

    def rows_len(self, seq_len: int) -> int:
        return seq_len

    def batch(self, tokens: torch.Tensor, generator: torch.Generator | None = None) -> Batch:
        raise NotImplementedError

    def logits(self, model: ZooModel, batch: Batch) -> torch.Tensor:
        return model(batch.input_ids)  # (B, T, V)

    def loss(self, model: ZooModel, batch: Batch) -> torch.Tensor:
        logits = self.logits(model, batch)  # (B, T, V)
        return F.cross_entropy(logits.flatten(0, 1).float(), batch.labels.flatten(), ignore_index=IGNORE)


class CausalLM(Objective):
    """Next-token prediction: position t predicts t+1 (transformers shifts the same way)."""

    name = "causal-lm"

    def batch(self, tokens: torch.Tensor, generator: torch.Generator | None = None) -> Batch:
        labels = torch.full_like(tokens, IGNORE)  # (B, T)
        labels[:, :-1] = tokens[:, 1:]
        return Batch(tokens, labels)


class MaskedLM(Objective):
    """BERT's masked LM: 15% of positions predicted; of those 80% [MASK], 10% random, 10% kept."""

    name = "masked-lm"

    def __init__(self, vocab_size: int, probability: float, mask_token_id: int) -> None:
        self.vocab_size, self.probability, self.mask_token_id = vocab_size, probability, mask_token_id

    def batch(self, tokens: torch.Tensor, generator: torch.Generator | None = None) -> Batch:
        def draw(p: float) -> torch.Tensor:
            return torch.rand(tokens.shape, generator=generator, device=tokens.device) < p  # (B, T)

        chosen = draw(self.probability)
        labels = tokens.masked_fill(~chosen, IGNORE)  # (B, T)
        masked = chosen & draw(0.8)
        randomised = chosen & ~masked & draw(0.5)
        random_ids = torch.randint(self.vocab_size, tokens.shape, generator=generator, device=tokens.device)
        inputs = tokens.masked_fill(masked, self.mask_token_id)
        inputs = torch.where(randomised, random_ids, inputs)  # (B, T)
        return Batch(inputs, labels)


class Seq2Seq(Objective):
    """Teacher forcing: the first half of a row is the source, the second the target; the
    decoder reads the target shifted right behind the start token (T5, BART)."""

    name = "seq2seq"

    def __init__(self, start_token_id: int) -> None:
        self.start_token_id = start_token_id

    def rows_len(self, seq_len: int) -> int:
        return 2 * seq_len

    def batch(self, tokens: torch.Tensor, generator: torch.Generator | None = None) -> Batch:
        T = tokens.shape[1] // 2
        source, target = tokens[:, :T], tokens[:, T : 2 * T]  # (B, T) each
        start = torch.full_like(target[:, :1], self.start_token_id)
        return Batch(source, target, decoder_input_ids=torch.cat((start, target[:, :-1]), dim=1))

    def logits(self, model: ZooModel, batch: Batch) -> torch.Tensor:
        assert batch.decoder_input_ids is not None
        return model(batch.decoder_input_ids, memory=model.encode(batch.input_ids))  # (B, T, V)


def objective_for(model: ZooModel, config: TrainConfig) -> Objective:
    """The objective the model's topology calls for; its head must give logits."""
    if not model.head_gives_logits:
        raise TrainingError(
            f"head: {model.spec.head.kind!r} gives hidden states, not token scores; training needs a head "
            "with logits (causal_lm or masked_lm)"
        )
    if model.encoder is not None:
        return Seq2Seq(model.spec.decoder_start_token_id or 0)
    if model.causal:
        return CausalLM()
    vocab = model.spec.vocab_size
    mask_id = config.mask_token_id if config.mask_token_id is not None else vocab - 1
    if mask_id >= vocab:
        raise TrainingError(f"mask_token_id: {mask_id} is outside the vocabulary; allowed: 0..{vocab - 1}")
    return MaskedLM(vocab, config.mlm_probability, mask_id)
