"""Named architectures: the spec a registered name stands for (a preset of zoo.archs or one a
plugin registered), validated, its plugin named in every error."""

from __future__ import annotations

from zoo.errors import PluginError, SpecError
from zoo.specs.model import ModelSpec
from zoo.specs.registry import get_registry


def preset(name: str) -> ModelSpec:
    """The ModelSpec registered under ``name`` (built-in or from a plugin)."""
    entry = get_registry().architecture(name)
    source = entry.source
    where = f"architecture {name!r} of plugin {entry.plugin!r}"
    if callable(source) and not isinstance(source, ModelSpec):
        try:
            source = source()
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # the plugin's bug: one error naming it, never a traceback
            message = " ".join(str(exc).split())[:300]
            raise PluginError(f"{where}: its factory raised {type(exc).__name__}: {message}") from None
    try:
        spec = ModelSpec.model_validate(source)
    except SpecError as exc:
        raise PluginError(f"{where} is not a valid spec: {exc}") from None
    return spec if spec.name else spec.override({"name": name})
