"""The plugin interface: four hooks, each handed a `register` callback.

Built-in components and third-party plugins register through exactly these hooks; a plugin
is a module (or object) with functions marked `@zoo.hookimpl`.
"""

from __future__ import annotations

from collections.abc import Callable

import pluggy

PROJECT = "zoo"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def zoo_register_components(register: Callable[..., None]) -> None:
    """Register component kinds.

    Call ``register(slot, kind, factory, options=OptionsModel, module=ModuleClass)`` once
    per kind, where slot is one of zoo.specs.registry_entries.SLOTS. ``module`` is the class
    the factory builds: it must subclass the slot's base in zoo.parts (Norm, Positional,
    TokenMixer, CrossMixer, FeedForward, Block, Embedding, Head), implement its abstract
    members and declare its capabilities as bool ClassVars, checked here, at registration.
    ``override=True`` replaces an existing kind of that slot on purpose; otherwise a clash
    is an error naming both plugins.
    """


@hookspec
def zoo_register_architectures(register: Callable[..., None]) -> None:
    """Register named architectures: ``register(name, spec_or_factory)``.

    The second argument is a ModelSpec, a dict in ModelSpec form, or a function of no
    arguments returning either (called lazily, so registering stays cheap).
    """


@hookspec
def zoo_register_checkpoint_formats(register: Callable[..., None]) -> None:
    """Register Hugging Face checkpoint families: ``register(family, override=False)``.

    ``family`` is a module or object with the members of ``zoo.hub.family.CheckpointFamily``
    (``MODEL_TYPE``, ``ARCHITECTURE``, ``IGNORED``, ``read_config``, ``write_config``,
    ``tensor_rules``), checked here. ``from_pretrained``, ``ModelSpec.from_hf_config`` and
    ``save_pretrained`` then handle its ``model_type``. A model_type zoo supports itself is
    taken over only with ``override=True``; two plugins registering one clash as kinds do.
    """


@hookspec
def zoo_register_spec_readers(register: Callable[..., None]) -> None:
    """Register readers of config formats into a ModelSpec: ``register(fmt, reader)``.

    ``reader(config, name=None) -> ModelSpec``; ``ModelSpec.from_hf_config`` asks for the
    ``"hf_config"`` reader (the built-in checkpoint families register it), so the spec layer
    names no checkpoint format. ``override=True`` replaces a registered format on purpose.
    """
