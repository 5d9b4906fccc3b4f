"""What a sweep runs: a base model, fixed settings and axes, expanded into points with stable ids.

The same plan comes from ``zoo compare`` options (``--vary key=v1,v2``, ``--attention``),
from a TOML sweep file, or from Python. Keys are the spec's dotted fields (the public
contract of ``--set``), the harness's run options (``batch_size``, ``prompt_len``, ... of
``BenchConfig``), ``arch`` (the preset itself) or ``weights`` (checkpoints: each point's model
is read from its files and measured whole). Keys and kind names are checked when the
plan is made, so a typo fails at once; a combination of values that makes no valid model
fails only its own point, which becomes a failed row.

A point's id is a hash of everything that decides its result (base model, fixed settings,
the point's values, run options, depth), so ``--resume`` recognises finished points and a
changed plan never mistakes an old row for a new point.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from itertools import product
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

import zoo
from zoo.errors import BenchError, SpecError, allowed, did_you_mean
from zoo.files.safe_io import check_depth, read_text
from zoo.harness.context_lengths import parse_context, parse_contexts
from zoo.harness.run_config import BenchConfig, make_config
from zoo.harness.sweep.labels import label_of
from zoo.harness.sweep.parsing import parse_assignments, parse_vary, split_values
from zoo.specs.model import ModelSpec
from zoo.specs.registry import get_registry

ATTENTION_PRESETS = ("mha", "gqa", "mqa")  # --attention a,b is --vary attention.kind=a,b
ARCH_KEY = "arch"
WEIGHTS_KEY = "weights"  # an axis of checkpoints: each point's model is the checkpoint's own
MAX_POINTS = 1000  # points of one grid unless raised: each is a run of its own process
COMPONENT_FAMILIES = ("norm", "positional", "attention", "ffn", "block")


class SweepPoint(BaseModel):
    """One combination: the axis values, an id stable across processes, a readable label."""

    model_config = ConfigDict(frozen=True)

    index: int
    id: str
    label: str
    values: dict[str, Any]


class SweepPlan(BaseModel):
    """A base model, settings every point shares, and the axes whose product is the grid."""

    model_config = ConfigDict(extra="forbid")

    name: str = "sweep"
    arch: str | None = Field(None, description="preset name; or give spec")
    spec: dict[str, Any] | None = Field(None, description="a full spec (as ModelSpec.to_dict())")
    set: dict[str, Any] = Field(default_factory=dict, description="spec overrides every point shares")
    run: dict[str, Any] = Field(default_factory=dict, description="BenchConfig options every point shares")
    vary: dict[str, list[Any]] = Field(default_factory=dict, description="axes: key -> values; product in order")
    points: list[dict[str, Any]] = Field(default_factory=list, description="extra points beyond the grid")
    baseline: dict[str, Any] = Field(default_factory=dict, description="axis values of the reference row")
    depth: int | None = Field(2, ge=1, description="layers of the measured model; None = full depth")
    analysis_only: bool = False
    contexts: list[int] = Field(
        default_factory=list, description="context lengths for memory and decode tokens/s (4k = 4096)"
    )
    measure_up_to: int | None = Field(None, ge=1, description="contexts above this are predicted, not measured")
    max_points: int = Field(MAX_POINTS, ge=1, le=2**31 - 1, description="refuse a grid of more points than this")

    @field_validator("contexts", mode="before")
    @classmethod
    def _parse_contexts(cls, value: Any) -> Any:
        return parse_contexts(value, "contexts") if value else []

    @field_validator("measure_up_to", mode="before")
    @classmethod
    def _parse_limit(cls, value: Any) -> Any:
        return None if value is None else parse_context(value, "measure_up_to")

    def keys(self) -> list[str]:
        """Every key a point may set (axes first, then keys only extra points name)."""
        keys = list(self.vary)
        for extra in self.points:
            keys += [k for k in extra if k not in keys]
        return keys

    def size(self) -> int:
        """Points of the grid and the extra points, counted without building them."""
        return math.prod(len(v) if isinstance(v, list) else 1 for v in self.vary.values()) * bool(self.vary) + len(
            self.points
        )

    def check_size(self) -> None:
        """A grid past ``max_points`` is refused before one point is built (three axes of 1,000
        values are 10**9 points)."""
        if self.size() > self.max_points:
            shape = " x ".join(f"{len(v):,}" if isinstance(v, list) else "1" for v in self.vary.values()) or "0"
            raise BenchError(
                f"vary: the grid has {self.size():,} points (axes of {shape} values, {len(self.points):,} extra "
                "points); "
                f"allowed: at most {self.max_points:,} (raise it with --max-points or max_points)"
            )

    def expand(self) -> list[SweepPoint]:
        """The grid's points in order (first axis slowest), then the extra points."""
        self.check_size()
        combos: list[dict[str, Any]] = []
        if self.vary:
            axes = list(self.vary.items())
            combos = [dict(zip([k for k, _ in axes], values)) for values in product(*(v for _, v in axes))]
        combos += [dict(extra) for extra in self.points]
        points = [
            SweepPoint(index=i, id=self.point_id(values), label=label_of(values), values=values)
            for i, values in enumerate(combos)
        ]
        seen: dict[str, str] = {}
        for point in points:
            if point.id in seen:
                raise BenchError(
                    f"vary: the point {point.label!r} appears twice in the grid; each point must be unique"
                )
            seen[point.id] = point.label
        return points

    def point_id(self, values: Mapping[str, Any]) -> str:
        identity = {
            "base": self.arch if self.spec is None else self.spec,
            "set": self.set,
            "run": self.run,
            "values": dict(values),
            "depth": None if self.analysis_only else self.depth,
            "analysis_only": self.analysis_only,
        }
        if self.contexts:  # only then: ids of plans without contexts stay as they were
            identity["contexts"] = [self.contexts, None if self.analysis_only else self.measure_up_to]
        digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()
        return digest[:16]


# ---- checking keys before anything runs ------------------------------------------------------
def check_plan(plan: SweepPlan) -> None:
    """Unknown keys, unknown kinds, unknown presets and empty grids fail here, before any run."""

    registry = get_registry()
    check_name(plan.name)
    if plan.arch is not None and plan.spec is not None:
        raise BenchError("give exactly one base model: an architecture (arch) or a spec")
    if plan.arch is None and plan.spec is None and not _every_point_names_a_model(plan):
        raise BenchError(
            "give a base model: an architecture (arch), a spec, or an axis of them (--vary arch=A,B or --weights A,B)"
        )
    _check_checkpoint_axis(plan)
    for key, values in plan.vary.items():
        if not isinstance(values, list) or not values:
            raise BenchError(f"vary.{key}: the grid is empty; give a list of at least one value")
    plan.check_size()
    if not plan.vary and not plan.points:
        raise BenchError("the grid is empty: give at least one axis (--vary KEY=V1,V2 or --attention) or point")
    archs = [plan.arch] if plan.arch else []
    archs += [v for v in plan.vary.get(ARCH_KEY, [])] + [p[ARCH_KEY] for p in plan.points if ARCH_KEY in p]
    for name in archs:
        if not isinstance(name, str) or name not in registry.architectures:
            raise SpecError(
                f"arch: unknown architecture {name!r}{did_you_mean(str(name), registry.architectures)}; see `zoo list`"
            )
    bases = [ModelSpec.model_validate(plan.spec)] if plan.spec else []

    bases += [zoo.spec(name) for name in dict.fromkeys(archs)]
    kinds: dict[str, set[str]] = {f: {getattr(b, f).kind for b in bases} for f in COMPONENT_FAMILIES}
    assigned = [plan.set, *({k: v} for k, vs in plan.vary.items() for v in vs), *plan.points]
    for mapping in assigned:
        for key, value in mapping.items():
            family, _, option = key.partition(".")
            if family in COMPONENT_FAMILIES and option == "kind":
                kinds[family].add(_checked_kind(registry, family, value, key))
            elif family in COMPONENT_FAMILIES and not option and isinstance(value, Mapping) and "kind" in value:
                kinds[family].add(_checked_kind(registry, family, value["kind"], f"{key}.kind"))
            elif family in COMPONENT_FAMILIES and not option and isinstance(value, str):  # attention=gqa
                kinds[family].add(_checked_kind(registry, family, value, key))
    run_fields, spec_fields = set(BenchConfig.model_fields) - {"weights"}, set(ModelSpec.model_fields)
    for mapping, where in [(plan.set, "set"), (plan.run, "run"), (plan.baseline, "baseline")]:
        for key in mapping:
            _check_key(
                key, where, kinds, registry, run_fields if where == "run" else spec_fields if where == "set" else None
            )
    for key in plan.keys():
        _check_key(key, "vary", kinds, registry, None)
    _check_run_values(plan, run_fields)
    unknown_baseline = set(plan.baseline) - set(plan.keys())
    if unknown_baseline:
        key = sorted(unknown_baseline)[0]
        raise BenchError(
            f"baseline: {key} is not an axis of this sweep{did_you_mean(key, plan.keys())}; allowed: "
            f"{allowed(plan.keys())}"
        )


def _every_point_names_a_model(plan: SweepPlan) -> bool:
    """Every point has its own model: an arch or weights axis, or each extra point names one."""
    axes = not plan.vary or ARCH_KEY in plan.vary or WEIGHTS_KEY in plan.vary
    return axes and all(ARCH_KEY in p or WEIGHTS_KEY in p for p in plan.points) and bool(plan.vary or plan.points)


def _check_checkpoint_axis(plan: SweepPlan) -> None:
    """A checkpoint's spec is its own: spec overrides, or an arch, beside a weights axis mean nothing."""
    from zoo.specs.model import ModelSpec

    spec_keys = [k for k in [*plan.set, *plan.keys()] if k.split(".")[0] in ModelSpec.model_fields or k == ARCH_KEY]
    if WEIGHTS_KEY in plan.keys() and (spec_keys or plan.arch is not None or plan.spec is not None):
        what = spec_keys[0] if spec_keys else "arch" if plan.arch is not None else "spec"
        raise BenchError(
            f"{what}: a checkpoint's model is read from its files; vary weights alone, or with run "
            "options (batch_size, dtype, ...), not with an arch, a spec or spec fields"
        )


def _check_run_values(plan: SweepPlan, run_fields: set[str]) -> None:
    """Run options (shared ``[run]`` and each axis or point value of one) as BenchConfig takes
    them, so ``prompt_len = "many"`` fails before any point runs, not in every row."""

    def check(values: Mapping[str, Any], where: str) -> None:
        try:
            make_config(**{**plan.run, **values})
        except BenchError as exc:
            raise BenchError(f"{where}: {exc}") from None

    check({}, "run")
    for key, values in plan.vary.items():
        if key in run_fields:
            for value in values:
                check({key: value}, f"vary.{key}")
    for index, point in enumerate(plan.points):
        check({k: v for k, v in point.items() if k in run_fields}, f"points[{index}]")


def check_name(name: str) -> None:
    """A sweep's name is a file stem inside --results-dir: no folders, no hidden files."""
    if not name or name.startswith(".") or any(c in name for c in "/\\\0") or name != name.strip():
        raise BenchError(
            f"name: {name!r} is not a file name; use letters, digits, '.', '-' and '_' "
            "(no '/', no leading '.'): results are written inside --results-dir"
        )


def _checked_kind(registry: Any, family: str, kind: Any, key: str) -> str:
    if not isinstance(kind, str) or kind not in registry.kinds(family):
        raise SpecError(
            f"{key}: unknown kind {kind!r}{did_you_mean(str(kind), registry.kinds(family))}; allowed: "
            f"{allowed(registry.kinds(family))}"
        )
    return kind


def _check_key(key: str, where: str, kinds: Mapping[str, set[str]], registry: Any, only: set[str] | None) -> None:
    run_fields = set(BenchConfig.model_fields) - {"weights"}
    spec_fields = set(ModelSpec.model_fields)
    head, _, rest = key.partition(".")
    choices = sorted(only if only is not None else run_fields | spec_fields | {ARCH_KEY, WEIGHTS_KEY})
    if only is None and key in (ARCH_KEY, WEIGHTS_KEY):
        return
    if head not in choices or (head in run_fields and rest) or (head == ARCH_KEY and rest):
        raise SpecError(
            f"{where}: unknown key {key!r}{did_you_mean(head, choices)}; allowed: spec fields and run options: "
            f"{', '.join(choices)}"
        )
    if head in COMPONENT_FAMILIES and rest:
        option = rest.split(".")[0]
        options: set[str] = {"kind"}
        for kind in kinds[head]:
            options |= set(registry.component(head, kind).options.model_fields)
        if option not in options:
            raise SpecError(
                f"{where}: unknown key {key!r}: no {head} kind in this sweep ({', '.join(sorted(kinds[head]))}) has "
                f"option {option!r}{did_you_mean(option, options)}; allowed: {allowed(options)}"
            )
    elif rest and head not in ("layers",):
        raise SpecError(f"{where}: unknown key {key!r}: {head} has no fields; set it as a whole ({head}=VALUE)")


# ---- TOML sweep files --------------------------------------------------------------------------
def load_plan(path: str | Path, max_points: int | None = None) -> SweepPlan:
    """A SweepPlan from a TOML file (format in docs/architecture.md, example bench/sweeps/);
    ``max_points`` replaces the file's bound on the grid's size."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib

    path = Path(path)
    text = read_text(path, BenchError, "sweep file")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BenchError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:
        raise BenchError(f"{path}: not valid TOML: nested too deep") from None
    check_depth(data, BenchError, str(path))
    data.setdefault("name", path.stem)
    if max_points is not None:
        data["max_points"] = max_points
    if isinstance(data.get("depth"), str):
        if data["depth"] != "full":
            raise BenchError(f'{path}: depth: expected a number of layers or "full", got {data["depth"]!r}')
        data["depth"] = None
    spec_file = data.pop("spec_file", None)
    if spec_file is not None:
        data["spec"] = ModelSpec.from_file(path.parent / spec_file).to_dict()
    try:
        plan = SweepPlan.model_validate(data)
    except BenchError as exc:  # a field's own check (contexts = ["4x"])
        raise BenchError(f"{path}: {exc}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise BenchError(
            f"{path}: {where}: {first['msg']}; allowed keys: {allowed(SweepPlan.model_fields)} (and spec_file)"
        ) from None
    try:
        check_plan(plan)
    except (BenchError, SpecError) as exc:
        raise type(exc)(f"{path}: {exc}") from None
    return plan


def plan_from_options(
    arch: str | None = None,
    spec: Any = None,
    vary: Mapping[str, Sequence[Any]] | Iterable[str] = (),
    attention: Sequence[str] | str | None = None,
    set: Mapping[str, Any] | Iterable[str] = (),
    baseline: Mapping[str, Any] | Iterable[str] | str = (),
    **fields: Any,
) -> SweepPlan:
    """A checked plan from compare-style arguments (what `zoo compare` and zoo.compare take);
    keywords that are no SweepPlan field are run options (repeats=3, batch_size=4)."""

    axes = dict(vary) if isinstance(vary, Mapping) else parse_vary(vary)
    axes = {k: list(v) if isinstance(v, (list, tuple)) else [v] for k, v in axes.items()}
    if attention is not None:
        kinds = split_values(attention) if isinstance(attention, str) else list(attention)
        if "attention.kind" in axes:
            raise BenchError("--attention is --vary attention.kind=...; give one of them")
        axes = {"attention.kind": [k for k in kinds if k], **axes}
        if not axes["attention.kind"]:
            raise BenchError(f"--attention: the grid is empty; give kinds, e.g. {','.join(ATTENTION_PRESETS)}")
    fixed = dict(set) if isinstance(set, Mapping) else parse_assignments(set, "--set")
    if isinstance(baseline, str):
        baseline = [baseline]
    reference = dict(baseline) if isinstance(baseline, Mapping) else parse_assignments(baseline, "--baseline")
    spec_dict = None
    if spec is not None:
        spec_dict = (spec if isinstance(spec, ModelSpec) else ModelSpec.model_validate(spec)).to_dict()
    plan_fields = {k: v for k, v in fields.items() if k in SweepPlan.model_fields}
    run = {**plan_fields.pop("run", {}), **{k: v for k, v in fields.items() if k not in SweepPlan.model_fields}}

    try:
        plan = SweepPlan(arch=arch, spec=spec_dict, vary=axes, set=fixed, baseline=reference, run=run, **plan_fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise BenchError(f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from None
    check_plan(plan)
    return plan
