"""The dtypes a run takes one of zoo's CPU paths in, for as long as its phases run.

A harness run on the CPU decides from the host probe which dtypes take zoo's row kernel
(``row_product.measured_faster``) and which several-row products run widened to float32
(``widened.widened_products``), and turns each on around its phases only
(``zoo.harness.run.host_paths``): outside a run, and in a run inside it, the paths are as
they were before. One ``RunDtypes`` per path holds that set.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import torch


class RunDtypes:
    """A set of dtypes (``dtypes``, read on every eager product: a plain attribute, no method
    call), empty until a block takes it (``during``)."""

    def __init__(self) -> None:
        self.dtypes: frozenset[torch.dtype] = frozenset()

    @contextlib.contextmanager
    def during(self, dtypes: Iterable[torch.dtype]) -> Iterator[None]:
        """The set is ``dtypes`` while the block runs, then what it was before."""
        previous, self.dtypes = self.dtypes, frozenset(dtypes)
        try:
            yield
        finally:
            self.dtypes = previous
