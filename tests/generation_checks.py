"""Checks that several test modules run on their own tiny models: the compiled decode step
against eager decoding, and left-padded batched decoding against each row alone; and the
single-thread fixture those modules share (import it to switch it on)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
import torch

from zoo.model.cache import KVCache
from zoo.model.generation import decode_step, left_pad, prefill


@pytest.fixture(autouse=True)
def _one_thread():
    """Tensors here are tiny: extra threads cost more than they save (5x the CPU time
    per case on a busy 2-core machine), so these tests run single-threaded."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


def check_compiled_decode(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    steps: int,
    *,
    max_len: int = 16,
    backend: str = "aot_eager",
    device: str = "cpu",
    compile_options: dict[str, object] | None = None,
) -> tuple[Callable[..., torch.Tensor], torch.Tensor, KVCache, KVCache]:
    """Prefill the left-padded ``prompts`` into two caches, then decode ``steps`` greedy tokens
    eagerly and through ``compile_decode_step``: the logits agree (1e-5) and the step never
    recompiles after the first. Returns the compiled step, the next token (B, 1) and the
    eager and compiled caches, for the caller's further checks. ``compile_options`` go to torch.compile."""
    import torch._dynamo

    from zoo.model.generation import compile_decode_step

    ids, mask = left_pad([list(p) for p in prompts])
    ids, mask = ids.to(device), mask.to(device)
    eager_cache, compiled_cache = KVCache(model, len(prompts), max_len), KVCache(model, len(prompts), max_len)
    eager = prefill(model, ids, eager_cache, attention_mask=mask)
    prefill(model, ids, compiled_cache, attention_mask=mask)
    torch._dynamo.reset()
    step = compile_decode_step(backend=backend, **(compile_options or {}))
    token = eager.argmax(-1, keepdim=True)  # (B, 1)
    for i in range(steps):
        eager = decode_step(model, token, eager_cache)
        with torch._dynamo.config.patch(error_on_recompile=i > 0):
            compiled = step(model, token, compiled_cache)
        torch.testing.assert_close(compiled, eager, atol=1e-5, rtol=1e-5)
        token = eager.argmax(-1, keepdim=True)
    return step, token, eager_cache, compiled_cache


def check_left_padded_decode(
    model: torch.nn.Module, vocab: int, lengths: Sequence[int] = (7, 2, 5), n_follow: int = 6
) -> tuple[list[list[int]], torch.Tensor]:
    """Random prompts of ``lengths`` (left-padded with token 3) prefilled together, then
    ``n_follow`` random tokens decoded per row: each row's logits equal those of its prompt
    and tokens run alone through the full forward. Returns the prompts and the followers
    (B, n_follow)."""
    prompts = [torch.randint(0, vocab, (n,)).tolist() for n in lengths]
    follow = torch.randint(0, vocab, (len(lengths), n_follow))
    ids, mask = left_pad(prompts, pad_token_id=3)
    cache = KVCache(model, batch_size=len(lengths), max_len=max(lengths) + n_follow)
    batched = [prefill(model, ids, cache, attention_mask=mask)]
    batched += [decode_step(model, follow[:, t : t + 1], cache) for t in range(n_follow)]
    batched_logits = torch.stack(batched, dim=1)  # (B, n_follow + 1, vocab)
    for row, prompt in enumerate(prompts):
        alone = torch.tensor([prompt + follow[row].tolist()])
        with torch.no_grad():
            full = model(alone)[0, len(prompt) - 1 :]  # (n_follow + 1, vocab)
        torch.testing.assert_close(batched_logits[row], full, atol=1e-5, rtol=1e-5)
    return prompts, follow
