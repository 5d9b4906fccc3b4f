"""Prefill, decode step and generation over a static KV cache.

``prefill`` and ``decode_step`` are separate so the harness can time each phase; the decode
step has static shapes (the cache's write position is a device tensor) and compiles whole
with ``torch.compile(fullgraph=True)`` without recompiling between steps. ``stream`` yields
one token per row per step (the CLI prints them as they come); ``generate`` collects them.

The module is ``zoo.model.generation``, not ``zoo.generate``: ``zoo.generate`` is the public
function, and a submodule of that name would replace it on the package once imported.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import nn

from zoo.errors import GenerationError
from zoo.files.host_memory import freed_after
from zoo.model.build import ZooModel
from zoo.model.cache import KVCache
from zoo.model.compiled import CompiledGraph
from zoo.model.sampling import SamplingSettings, check_seed, sample
from zoo.specs.interfaces import ChoosesKernel
from zoo.specs.state import Memory

DecodeStep = Callable[[nn.Module, torch.Tensor, KVCache], torch.Tensor]
Prefill = Callable[..., torch.Tensor]  # (model, input_ids, cache, attention_mask=None, memory=None) -> (B, vocab)


def _context_length(model: nn.Module) -> int | None:
    spec = getattr(model, "spec", None)
    return getattr(spec, "max_seq_len", None)


def check_generates(model: nn.Module) -> None:
    """Token-by-token generation needs causal self-attention and a head giving logits."""
    if isinstance(model, ZooModel) and not model.can_generate:
        raise GenerationError(
            f"model: {model.spec.name or 'this model'} cannot generate (bidirectional attention or a head without "
            "logits: an encoder); run model(input_ids, attention_mask=...) for its outputs"
        )


def _check_ids(name: str, ids: torch.Tensor, cache: KVCache) -> None:
    if ids.dim() != 2 or ids.dtype in (torch.bool,) or ids.dtype.is_floating_point or ids.dtype.is_complex:
        raise GenerationError(f"{name}: expected integer token ids of shape (B, T), got {ids.dtype} {tuple(ids.shape)}")
    if ids.shape[0] != cache.batch_size:
        raise GenerationError(f"{name}: batch of {ids.shape[0]} rows but the cache holds batch_size={cache.batch_size}")


def check_left_padded(attention_mask: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """The mask as bool (B, T), after checking it is 0s then 1s with a real last token per row."""
    if tuple(attention_mask.shape) != tuple(shape):
        raise GenerationError(
            f"attention_mask: shape {tuple(attention_mask.shape)} must equal input_ids' {tuple(shape)}"
        )
    if not bool(((attention_mask == 0) | (attention_mask == 1)).all()):
        raise GenerationError("attention_mask: values must be 0 (padding) or 1 (token)")
    mask = attention_mask.bool()
    if not bool(mask[:, -1].all()) or not bool((mask[:, 1:] >= mask[:, :-1]).all()):
        raise GenerationError(
            "attention_mask: prompts must be left-padded (0s then 1s, last column all 1s); "
            "use zoo.model.generation.left_pad to build a batch"
        )
    return mask


def _check_prefill(model: nn.Module, input_ids: torch.Tensor, cache: KVCache) -> None:
    """Host-side checks of a prefill: shapes, dtypes and lengths only (no device sync)."""
    check_generates(model)
    _check_ids("input_ids", input_ids, cache)
    context = _context_length(model)
    if context is not None and cache.length + input_ids.shape[1] > context:
        raise GenerationError(
            f"input_ids: {cache.length} cached + {input_ids.shape[1]} new tokens exceed the model's "
            f"context max_seq_len={context}"
        )


# no_grad rather than inference_mode: compiling a step that writes the cache in place
# fails under inference_mode ("Cannot set version_counter for inference tensor").
@torch.no_grad()
def prefill(
    model: nn.Module,
    input_ids: torch.Tensor,
    cache: KVCache,
    attention_mask: torch.Tensor | None = None,
    memory: Memory | None = None,
) -> torch.Tensor:
    """Run the prompt (B, T) through the model, filling the cache; last logits (B, vocab).

    ``attention_mask`` (B, T), 1 for tokens and 0 for padding, marks a left-padded batch:
    positions count only real tokens and no query attends to a pad. Padding is only
    allowed in the first chunk written to a cache. ``memory``: an encoder-decoder's
    encoder output (``model.encode``), whose cross K/V the cache keeps for later steps.
    Without a mask nothing here waits for the device (the mask's checks do).
    """
    _check_prefill(model, input_ids, cache)
    if attention_mask is not None:
        mask = check_left_padded(attention_mask, input_ids.shape)
        if not bool(mask.all()):
            if cache.length != 0:
                raise GenerationError("attention_mask: padding is only allowed in the first prefill of an empty cache")
            cache.set_padding(mask)
    extra = {} if memory is None else {"memory": memory}
    return model(input_ids, cache=cache, last_only=True, **extra)[:, -1]  # (B, vocab)


class _KernelsResolved:
    """Resolves a model's kernels (``ChoosesKernel``) the first time a compiled function meets
    the model: dynamo cannot build a C++ extension while it traces, so a graph runs the kernels
    that eager code resolved (and of those only the ones whose calls are custom ops)."""

    def __init__(self) -> None:
        self.models: weakref.WeakSet[nn.Module] = weakref.WeakSet()

    def __call__(self, model: nn.Module, device: torch.device) -> None:
        if model not in self.models:
            for module in model.modules():
                if isinstance(module, ChoosesKernel):
                    module.resolve_kernel(device)
            self.models.add(model)


def _prefill_graph(model: nn.Module, input_ids: torch.Tensor, cache: KVCache) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids, cache=cache, last_only=True)[:, -1]  # (B, vocab)


def _decode_graph(model: nn.Module, token: torch.Tensor, cache: KVCache) -> torch.Tensor:
    with torch.no_grad():
        return model(token, cache=cache)[:, -1]  # (B, vocab)


def compile_prefill(**compile_options: Any) -> Prefill:
    """``prefill`` of unpadded prompts compiled whole, one static-shape graph per prompt shape.

    An eager prefill is a few hundred small operator calls whatever the prompt's length, a
    fixed host cost that on a GPU outweighs the work of a short prompt; compiled (under
    ``mode="reduce-overhead"``: replayed as one CUDA graph) that cost goes. The checks and
    the cache's bounds bookkeeping run eagerly outside the graph, as in
    ``compile_decode_step``; inside it attention reads the whole cache, masked by time.
    ``dynamic=False``: a harness prefills one prompt length, and a graph specialised to it
    is the fast one (each new length compiles anew). A left-padded batch (``attention_mask``)
    or an encoder's ``memory`` runs the eager ``prefill``. The mixers' kernels are resolved
    before the first trace, so the graph calls those that can sit in one (``_KernelsResolved``).
    Options go to ``torch.compile``.
    """
    compiled = CompiledGraph(_prefill_graph, dynamic=False, **compile_options)
    resolved, shapes = _KernelsResolved(), set[torch.Size]()

    def run(
        model: nn.Module,
        input_ids: torch.Tensor,
        cache: KVCache,
        attention_mask: torch.Tensor | None = None,
        memory: Memory | None = None,
    ) -> torch.Tensor:
        if attention_mask is not None or memory is not None:
            return prefill(model, input_ids, cache, attention_mask, memory)
        _check_prefill(model, input_ids, cache)
        cache.reserve(input_ids.shape[1])
        resolved(model, input_ids.device)
        logits = compiled(model, input_ids, cache)
        fresh, _ = input_ids.shape not in shapes, shapes.add(input_ids.shape)
        return freed_after(logits) if fresh else logits  # a new graph: the compiler's temporaries back

    return run


@torch.no_grad()
def decode_step(model: nn.Module, token: torch.Tensor, cache: KVCache) -> torch.Tensor:
    """One token per row (B, 1) through the model; logits (B, vocab).

    Static shapes: the time slot and positions come from the cache's device-side write
    position, so this compiles once (``compile_decode_step``: the same call as a graph). Under
    compilation the host-side bounds check is skipped; ``compile_decode_step`` does it
    outside the graph.
    """
    return _decode_graph(model, token, cache)  # (B, vocab)


def compile_decode_step(**compile_options: Any) -> DecodeStep:
    """``decode_step`` compiled whole (fullgraph), with the cache bounds check kept eager, and
    the mixers' kernels resolved before the first trace: the graph calls zoo's C++ CPU steps
    as custom ops, as the eager step does (``zoo.components.cpu_ops``).

    Each model gets a graph of its own, bound to it at its first step, and dynamo's guards on
    the model's modules and parameters are skipped
    (``torch.compiler.skip_guard_on_all_nn_modules_unsafe``): a decode step re-checked some ten
    thousand of them before every token: 1.04-1.15x the decode speed of a SmolLM2-135M GGUF at one
    thread (``python bench/compile_guards.py``). So a model must not change shape or dtype
    between the steps of one compiled step function (make a new one after ``model.to(...)``);
    the cache and the token are still guarded. Options go to ``torch.compile`` (e.g.
    ``mode="reduce-overhead"``, ``backend=...``); with a ``mode`` (which torch.compile does not
    take beside ``options``) the guards stay.
    """
    if "mode" not in compile_options:
        options = {"guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe}
        compile_options = {**compile_options, "options": {**options, **compile_options.get("options", {})}}
    graphs: weakref.WeakKeyDictionary[nn.Module, CompiledGraph] = weakref.WeakKeyDictionary()
    resolved = _KernelsResolved()

    def step(model: nn.Module, token: torch.Tensor, cache: KVCache) -> torch.Tensor:
        cache.reserve(token.shape[1])
        resolved(model, token.device)
        if model not in graphs:
            graphs[model] = CompiledGraph(_decode_graph, **compile_options)
            return freed_after(graphs[model](model, token, cache))  # compiled here: its temporaries back
        return graphs[model](model, token, cache)

    return step


def left_pad(prompts: Sequence[Sequence[int]], pad_token_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts of different lengths as left-padded ids (B, T) and attention mask (B, T)."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise GenerationError("input_ids: every prompt needs at least one token")
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.as_tensor(list(prompt), dtype=torch.long)
        mask[row, width - len(prompt) :] = 1
    return ids, mask


def _eos_ids(eos_token_id: int | Sequence[int] | None) -> list[int]:
    if eos_token_id is None:
        return []
    return [int(eos_token_id)] if isinstance(eos_token_id, int) else [int(i) for i in eos_token_id]


def _prepare_ids(
    input_ids: torch.Tensor | Sequence[Sequence[int]], attention_mask: torch.Tensor | None, pad_token_id: int
) -> tuple[torch.Tensor, torch.Tensor | None]:
    if isinstance(input_ids, torch.Tensor):
        ids = input_ids[None] if input_ids.dim() == 1 else input_ids
        if attention_mask is not None and attention_mask.dim() == 1:
            attention_mask = attention_mask[None]
        return ids, attention_mask
    if attention_mask is not None:
        raise GenerationError("attention_mask: give it only with a tensor of ids; lists of prompts are padded here")
    return left_pad(input_ids, pad_token_id)


def stream(
    model: nn.Module,
    input_ids: torch.Tensor | Sequence[Sequence[int]],
    max_new_tokens: int = 32,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    eos_token_id: int | Sequence[int] | None = None,
    attention_mask: torch.Tensor | None = None,
    pad_token_id: int | None = None,
) -> Iterator[torch.Tensor]:
    """Yield the next token of every row (B,), one step at a time; arguments as ``generate``.

    Rows that produced an end-of-sequence token yield ``pad_token_id`` afterwards; the
    iterator stops when every row has finished or after ``max_new_tokens`` steps.
    Arguments are checked here, when ``stream`` is called, not at the first step.
    """
    settings = SamplingSettings(temperature, top_k, top_p)
    check_seed(seed)
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise GenerationError(f"max_new_tokens: must be an integer >= 0, got {max_new_tokens!r}")
    eos = _eos_ids(eos_token_id)
    pad = pad_token_id if pad_token_id is not None else (eos[0] if eos else 0)
    ids, mask = _prepare_ids(input_ids, attention_mask, pad)
    device = next(model.parameters()).device
    ids = ids.to(device)
    mask = mask.to(device) if mask is not None else None
    B, T = ids.shape
    context = _context_length(model)
    if context is not None and T + max_new_tokens > context:
        raise GenerationError(
            f"input_ids: a prompt of {T} tokens plus max_new_tokens={max_new_tokens} exceeds the model's "
            f"context max_seq_len={context}"
        )
    vocab = getattr(getattr(model, "spec", None), "vocab_size", None)
    if vocab is not None and ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
        raise GenerationError(f"input_ids: token ids must be in [0, {vocab}), got [{int(ids.min())}, {int(ids.max())}]")
    generator = torch.Generator(device=device).manual_seed(seed) if seed is not None else None
    return _steps(model, ids, mask, max_new_tokens, settings, generator, eos, pad)


def _is_seq2seq(model: nn.Module) -> bool:
    return isinstance(model, ZooModel) and model.encoder is not None


def _start(
    model: nn.Module, ids: torch.Tensor, mask: torch.Tensor | None, max_new_tokens: int
) -> tuple[KVCache, torch.Tensor]:
    """The cache and the first logits (B, vocab): the prompt prefilled, or for an
    encoder-decoder the prompt encoded and the decoder start token prefilled with it."""
    B, T = ids.shape
    if not _is_seq2seq(model):
        cache = KVCache(model, B, T + max_new_tokens)
        return cache, prefill(model, ids, cache, mask)
    assert isinstance(model, ZooModel)
    memory = model.encode(ids, mask)  # (B, S, d): cross K/V are computed from it once
    cache = KVCache(model, B, 1 + max_new_tokens, memory_len=T)
    return cache, prefill(model, decoder_start(model, B, ids.device), cache, memory=memory)


def decoder_start(model: ZooModel, batch_size: int, device: torch.device) -> torch.Tensor:
    """The decoder's first input (B, 1): the spec's ``decoder_start_token_id``."""
    start = model.spec.decoder_start_token_id
    if start is None:
        raise GenerationError("decoder_start_token_id: an encoder-decoder spec needs it to start decoding")
    return torch.full((batch_size, 1), start, dtype=torch.long, device=device)


def _steps(
    model: nn.Module,
    ids: torch.Tensor,
    mask: torch.Tensor | None,
    max_new_tokens: int,
    settings: SamplingSettings,
    generator: torch.Generator | None,
    eos: list[int],
    pad: int,
) -> Iterator[torch.Tensor]:
    if max_new_tokens == 0:
        return
    B = ids.shape[0]
    eos_tensor = torch.tensor(eos, dtype=torch.long, device=ids.device)
    finished = torch.zeros(B, dtype=torch.bool, device=ids.device)  # (B,)
    cache, logits = _start(model, ids, mask, max_new_tokens)  # (B, vocab)
    for step in range(max_new_tokens):
        with torch.no_grad():
            token = sample(logits, settings, generator)  # (B,)
            token = torch.where(finished, torch.full_like(token, pad), token)
        yield token
        if eos:
            finished = finished | torch.isin(token, eos_tensor)
            if bool(finished.all()):
                return
        if step + 1 < max_new_tokens:
            logits = decode_step(model, token[:, None], cache)


def generate(
    model: nn.Module,
    input_ids: torch.Tensor | Sequence[Sequence[int]],
    max_new_tokens: int = 32,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    eos_token_id: int | Sequence[int] | None = None,
    attention_mask: torch.Tensor | None = None,
    pad_token_id: int | None = None,
) -> torch.Tensor:
    """The prompts followed by their continuations: ids (B, T + n), n <= max_new_tokens.

    ``input_ids`` is (B, T) or (T,) with an optional left-padding ``attention_mask``, or a
    list of token lists of different lengths (left-padded here). ``temperature=0`` is
    greedy; otherwise ``top_k``/``top_p`` filter and ``seed`` makes the draw repeatable.
    Rows that emit ``eos_token_id`` (an id or a list of ids) are padded with
    ``pad_token_id`` (default: the first eos id, else 0) until every row has finished.
    An encoder-decoder encodes ``input_ids`` (any padding, marked by the mask) and returns
    the decoder's ids instead: the start token then the new ones (B, 1 + n), as
    transformers' ``generate`` does.
    """
    eos = _eos_ids(eos_token_id)
    pad = pad_token_id if pad_token_id is not None else (eos[0] if eos else 0)
    ids, mask = _prepare_ids(input_ids, attention_mask, pad)
    ids = ids.to(next(model.parameters()).device)
    new = list(stream(model, ids, max_new_tokens, temperature, top_k, top_p, seed, eos_token_id, mask, pad_token_id))
    prefix = decoder_start(model, ids.shape[0], ids.device) if _is_seq2seq(model) else ids  # type: ignore[arg-type]
    if not new:
        return prefix.clone()
    return torch.cat((prefix, torch.stack(new, dim=1)), dim=1)  # (B, T + n)
