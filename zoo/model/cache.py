"""A static, preallocated cache laid out by what each token mixer declares.

Shapes are fixed at allocation and every write is in place (as gpt-fast does), so a decode
step has static shapes. The cache knows no mixer kind: each stateful module's tensors are
whatever its ``state_layout`` declared (``StateTensor.per``: per time slot, per sequence,
or per encoder token), and the module itself reads and writes them. ``reset`` calls every
module's ``reset_state`` (recurrent state is zeroed; time slots are masked by time).

The write position lives on the device (``position``, a (1,) tensor advanced in place), so
the time indices and positions of a decode step are computed inside the graph: a compiled
decode step sees the same guards every step and never recompiles. ``length`` is its host
mirror, kept by eager calls for bounds checks without a device sync.
"""

from __future__ import annotations

import torch

from zoo.errors import GenerationError
from zoo.model.build import ZooModel
from zoo.specs.state import LayerState, Memory


def _static_address(tensor: torch.Tensor) -> torch.Tensor:
    """On CUDA, tell torch.compile this tensor keeps its address between calls.

    A compiled decode step writes the cache (``index_copy_``) and the write position
    (``add_``) in place. Under ``mode="reduce-overhead"`` inductor records the step in a CUDA
    graph only if every input it mutates has a static address (parameters and buffers
    have one; these plain tensors do not unless marked), otherwise it logs "skipping
    cudagraphs due to mutated inputs" and runs without graphs. Marked tensors are read
    and written where they live, with no copy into graph-owned memory, so the host sees
    every write. ``guard=False``: a new cache (new addresses) re-records the graph instead
    of recompiling the step. On other devices nothing changes.
    """
    if tensor.device.type == "cuda":
        import torch._dynamo  # only here: importing the compiler stack costs a second

        torch._dynamo.mark_static_address(tensor, guard=False)
    return tensor


class KVCache:
    """Per-module state tensors plus the bookkeeping shared by all of them.

    ``layers[i]`` holds the tensors of ``model.stateful_modules()[i]``. ``position`` (1,) is
    the next time slot to write (device tensor, the source of truth); ``length`` mirrors it
    on the host. ``key_valid`` (B, max_len), when set, marks padding slots (left-padded
    batches) that no query may attend to, and ``pad_count`` (B,) how many pads each row
    starts with, so that a token's position is its time minus its row's pads.
    ``memory_valid`` (B, memory_len) marks the encoder tokens cross-attention may read.
    None of these are part of the cache bytes, which are exactly the declared tensors.
    """

    def __init__(
        self,
        model: ZooModel,
        batch_size: int,
        max_len: int,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
        memory_len: int = 0,
    ) -> None:
        if batch_size < 1 or max_len < 1 or memory_len < 0:
            raise GenerationError(
                f"cache: batch_size={batch_size} and max_len={max_len} must both be >= 1 "
                f"(and memory_len={memory_len} >= 0)"
            )
        reference = next(model.parameters())
        dtype = dtype or reference.dtype
        device = torch.device(device) if device is not None else reference.device
        self.batch_size = batch_size
        self.max_len = max_len
        self.memory_len = memory_len
        self.dtype = dtype
        self.device = device
        self.modules = [module for _, module in model.stateful_modules()]
        self.layers: list[dict[str, torch.Tensor]] = [
            {name: torch.zeros(t.shape, dtype=t.dtype or dtype, device=device) for name, t in layout.items()}
            for layout in model.state_layout(batch_size, max_len, memory_len)
        ]
        self.memory_valid: torch.Tensor | None = None
        self.position = torch.zeros(1, dtype=torch.long, device=device)  # (1,)
        self.pad_count = torch.zeros(batch_size, dtype=torch.long, device=device)  # (B,)
        self.key_valid: torch.Tensor | None = None
        self.length = 0
        for layer in self.layers:
            for tensor in layer.values():
                _static_address(tensor)
        _static_address(self.position)
        _static_address(self.pad_count)

    @property
    def nbytes(self) -> int:
        """Bytes held by the layers' declared cache tensors."""
        return sum(t.numel() * t.element_size() for layer in self.layers for t in layer.values())

    def reserve(self, n_tokens: int) -> None:
        """Host-side bounds check and bookkeeping for the next ``n_tokens`` slots.

        ``advance`` calls it in eager mode; a compiled decode step skips it (a Python int
        that changes every step would be a guard that recompiles), so a caller compiling
        the step calls it outside the graph, as ``compile_decode_step`` does.
        """
        if self.length + n_tokens > self.max_len:
            raise GenerationError(
                f"cache: {self.length} + {n_tokens} tokens exceed the cache's max_len={self.max_len}; "
                "allocate a larger cache"
            )
        self.length += n_tokens

    def advance(self, n_tokens: int) -> torch.Tensor:
        """Claim the next ``n_tokens`` time slots; returns their indices (T,) on the device."""
        if not torch.compiler.is_compiling():
            self.reserve(n_tokens)
        time = self.position + torch.arange(n_tokens, device=self.position.device)  # (T,)
        self.position.add_(n_tokens)
        return time

    def positions(self, time: torch.Tensor) -> torch.Tensor:
        """Positions (B, T) of tokens at cache times (T,): time minus the row's left pads.

        Padding tokens themselves get position 0 (their outputs are never used).
        """
        return (time[None, :] - self.pad_count[:, None]).clamp(min=0)  # (B, T)

    def set_padding(self, attention_mask: torch.Tensor) -> None:
        """Record a left-padded prompt's mask (B, T), written at the start of an empty cache.

        Slots after the prompt are valid: every token decoded later is real.
        """
        B, T = attention_mask.shape
        valid = torch.ones(self.batch_size, self.max_len, dtype=torch.bool, device=self.device)  # (B, max_len)
        valid[:, :T] = attention_mask.to(device=self.device, dtype=torch.bool)
        self.key_valid = _static_address(valid)
        self.pad_count.copy_(T - valid[:, :T].sum(dim=1))

    def set_memory(self, memory: Memory) -> None:
        """Record which of the ``memory_len`` memory slots hold encoder tokens (B, memory_len).

        Called when the encoder output is passed with this cache (the prefill); slots past
        the encoder's length and its padding stay invisible to every later decode step.
        """
        B, S = memory.hidden.shape[:2]
        if S > self.memory_len or B != self.batch_size:
            raise GenerationError(
                f"memory: {B} rows of {S} encoder tokens do not fit a cache of batch_size={self.batch_size} "
                f"and memory_len={self.memory_len}"
            )
        valid = torch.zeros(self.batch_size, self.memory_len, dtype=torch.bool, device=self.device)  # (B, M)
        valid[:, :S] = True if memory.valid is None else memory.valid.to(device=self.device, dtype=torch.bool)
        self.memory_valid = _static_address(valid)

    def layer(self, index: int, time: torch.Tensor, claimed: bool = True) -> LayerState:
        """Stateful module ``index``'s view. An eager call whose slots were ``claimed`` by
        ``advance`` also gets the filled length, so a layer may read only the slots written
        so far; a compiled step gets None and stays static-shaped. ``token_valid`` (B, T)
        is set while the call writes padding slots (a left-padded first chunk)."""
        filled = None if torch.compiler.is_compiling() or not claimed else self.length
        token_valid = None if self.key_valid is None else self.key_valid[:, time]  # (B, T)
        return LayerState(
            self.layers[index], time, self.key_valid, self.max_len, filled, token_valid, self.memory_valid
        )

    def reset(self) -> None:
        """Forget what was written: every module resets its state (recurrent state is
        zeroed), and stale time slots are masked by time until overwritten."""
        self.length = 0
        self.position.zero_()
        self.pad_count.zero_()
        self.key_valid = None
        self.memory_valid = None
        for module, tensors in zip(self.modules, self.layers, strict=True):
            module.reset_state(tensors)
