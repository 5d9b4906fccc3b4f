"""A run's dtypes for a CPU path: set while a block runs, restored after it, also on an error."""

from __future__ import annotations

import pytest
import torch

from zoo.components.run_dtypes import RunDtypes


def test_a_block_sets_the_dtypes_and_leaves_them_as_they_were():
    chosen = RunDtypes()
    assert chosen.dtypes == frozenset()
    with chosen.during([torch.bfloat16]):
        assert chosen.dtypes == {torch.bfloat16}
        with chosen.during([torch.float16, torch.float32]):  # a run inside a run
            assert chosen.dtypes == {torch.float16, torch.float32}
        assert chosen.dtypes == {torch.bfloat16}
    assert chosen.dtypes == frozenset()


def test_an_error_in_the_block_restores_the_dtypes():
    chosen = RunDtypes()
    with pytest.raises(RuntimeError), chosen.during([torch.bfloat16]):
        raise RuntimeError("a phase failed")
    assert chosen.dtypes == frozenset()
