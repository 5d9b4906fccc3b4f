"""Error types of zoo.

Every error a user can cause by bad input is one of these, with the offending field, file or
tensor named in the message and what is allowed. The CLI turns any `ZooError` into one line
on stderr and exit status 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class ZooError(Exception):
    """Base of every error zoo raises on purpose."""


class SpecError(ZooError):
    """A model spec (or an override of one) is invalid: the message names the field path."""


class PluginError(ZooError):
    """A plugin could not be loaded, or registered something that conflicts."""


class PluginConflictError(PluginError):
    """Two plugins register the same kind or architecture and neither (or both) override."""


class PluginWarning(UserWarning):
    """A plugin failed to load and was skipped (reported once per process)."""


class CheckpointError(ZooError):
    """A checkpoint or config file is missing, corrupt or does not match the model."""


class GenerationError(ZooError):
    """Bad arguments to prefill, decode or generate (prompt too long, bad sampling values)."""


class BenchError(ZooError):
    """A benchmark or sweep cannot run as asked (no such device, bad grid, ...)."""


class TrainingError(ZooError):
    """A training run cannot run as asked (no objective for the head, text too short, bad resume)."""


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """' (did you mean 'x'?)' when a close match exists, else ''."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def allowed(choices: Iterable[str]) -> str:
    """A sorted, comma separated list for 'allowed: ...' messages."""
    return ", ".join(sorted(choices))
