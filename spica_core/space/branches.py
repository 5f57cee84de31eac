"""Search branches: one per deployment mode, with its viable backends, config pool and knobs.

Two stages, each with its own artifact:

1. :func:`legal_space` — per mode × backend, is the pair runnable (replay support, perf DB) and
   which parallel configs are legal (``enumeration``). No memory estimate yet.
   Rows: ``branches.parquet``; :meth:`LegalSpace.from_rows` rebuilds the same space from them.
2. :func:`kv_filter` — estimate KV per distinct (backend, shape), drop infeasible
   configs and empty backends / modes, prune dead knobs and build the :class:`Branch`
   objects the study uses. Rows: ``shapes.parquet``; :func:`records_from_rows` reads them back, so
   a resumed run builds its branches without a single memory estimate.

:func:`enumerate_branches` runs both.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from spica_core.config.knobs import COMPOSITE_PRESETS, INT_KNOBS
from spica_core.config.search_space import DisaggParallel, ParallelShape
from spica_core.config.model import SmartSearchConfig
from spica_core.space.enumeration import config_rejection, configs_from_shapes, sort_configs, strategies, worker_shapes
from spica_core.errors import NoViableParallelConfigError
from spica_core.space.facts import ModelFacts, SystemFacts, model_facts, system_facts
from spica_core.space.kv import ShapeKV, max_seq_len, no_viable_message, shape_kv
from spica_core.space.params import Param
from spica_core.config.pruning import branch_knob_choices
from spica_core.space.parallel import Mode, ParallelConfig, RoleConfig, Shape
from spica_core.space.precision import Precision, precision_problem, precisions

log = logging.getLogger(__name__)

TRTLLM_DISAGG_REASON = ("Dynamo replay cannot run TRT-LLM disaggregated (trtllm + disagg is unsupported); "
                        "use vllm or sglang for disagg")
NO_LEGAL_PIN_REASON = "no pinned parallel config is legal for this backend"


def config_json(config: ParallelConfig) -> str:
    """The canonical text of a config (YAML entry form, sorted keys): a join key across artifacts."""
    return json.dumps(config.to_dict(), sort_keys=True)


def config_strategy(config: ParallelConfig) -> str:
    """``tep`` for agg, ``tep+dep`` (prefill+decode) for disagg."""
    return "+".join(s.strategy for s in config.shapes)


def pinned_configs(config: SmartSearchConfig) -> tuple[ParallelConfig, ...]:
    """The user's ``parallel_configs`` as value objects (order kept, duplicates dropped)."""
    ss = config.search_space
    if not ss.parallel_configs:
        return ()
    mode: Mode = ss.deployment_mode[0]  # type: ignore[assignment]

    def role(p: ParallelShape) -> RoleConfig:
        return RoleConfig(Shape(p.tp, p.attention_dp, p.moe_tp, p.moe_ep, p.pp), p.replicas)

    out: list[ParallelConfig] = []
    for entry in ss.parallel_configs:
        if isinstance(entry, DisaggParallel):
            pc = ParallelConfig("disagg", prefill=role(entry.prefill), decode=role(entry.decode))
        else:
            pc = ParallelConfig(mode, agg=role(entry))
        if pc not in out:
            out.append(pc)
    return tuple(out)


# ---------------------------------------------------------------- stage 1: legality


@dataclass(frozen=True)
class Dropped:
    """A backend dropped from a mode (``backend`` set) or a whole mode skipped (``backend`` None)."""

    mode: str
    backend: str | None
    reason: str


@dataclass(frozen=True)
class BackendSpace:
    """One (mode, backend) before the KV filter."""

    mode: Mode
    backend: str
    version: str | None
    configs: tuple[ParallelConfig, ...]            # legal configs (derived) or legal pins
    shapes: tuple[Shape, ...]                      # distinct worker shapes the configs use
    dropped_reason: str | None = None              # set when the pair cannot run at all
    pin_reasons: Mapping[ParallelConfig, str] = field(default_factory=dict)  # pins: "" = legal
    precisions: tuple[Precision, ...] = ()         # the configured precisions this backend has perf data for


def _pair_drop_reason(mode: str, backend: str, system: SystemFacts) -> str | None:
    """Why a (mode, backend) pair cannot run at all (replay support, perf DB), or None."""
    if backend == "trtllm" and mode == "disagg":
        return TRTLLM_DISAGG_REASON
    if backend not in system.backend_versions:
        have = ", ".join(system.backend_versions) or "none"
        return (f"aiconfigurator-core has no perf database for {backend} on {system.name} "
                f"(backends with data: {have})")
    return None


def _pinned_space(mode: Mode, backend: str, version: str | None, dropped: str | None,
                 reasons: Mapping[ParallelConfig, str], precs: tuple[Precision, ...]) -> BackendSpace:
    """A pinned (mode, backend): every pin with its rejection reason ("" = legal), in pin order."""
    legal = tuple(pc for pc, reason in reasons.items() if not reason)
    if dropped is None and not legal:
        dropped = NO_LEGAL_PIN_REASON
    shapes = tuple(sorted({s for pc in legal for s in pc.shapes}, key=lambda s: (s.gpus, s.sort_key())))
    return BackendSpace(mode, backend, version, legal, shapes, dropped, reasons, precs)


def config_precisions(config: SmartSearchConfig) -> tuple[Precision, ...]:
    """The precisions the config asks for (the checkpoint's own when quantization is unset)."""
    ss = config.search_space
    return precisions(ss.model_name, ss.quantization, ss.kv_cache_dtype)


def _runnable(config: SmartSearchConfig, backend: str, version: str | None, mode: str, system: SystemFacts
              ) -> tuple[tuple[Precision, ...], str | None]:
    """(the precisions this pair can run, why the pair cannot run at all or None)."""
    dropped = _pair_drop_reason(mode, backend, system)
    if dropped is not None or version is None:
        return (), dropped
    ss = config.search_space
    kept: list[Precision] = []
    problems: list[str] = []
    for p in config_precisions(config):
        problem = None if p.native else precision_problem(ss.model_name, ss.hardware_sku, backend, version,
                                                          p.quantization)
        if problem:
            problems.append(f"quantization {p.quantization}: {problem}")
        else:
            kept.append(p)
    return tuple(kept), (None if kept else "; ".join(dict.fromkeys(problems)))


@dataclass(frozen=True)
class LegalSpace:
    """Stage 1's result: the facts and every (mode, backend) space."""

    config: SmartSearchConfig
    model: ModelFacts
    system: SystemFacts
    max_seq_len: int
    pins: tuple[ParallelConfig, ...]
    spaces: tuple[BackendSpace, ...]

    def rows(self) -> list[dict[str, Any]]:
        """``branches.parquet``: one row per (mode, backend, config); a dropped pair has one row without config."""
        out: list[dict[str, Any]] = []
        for sp in self.spaces:
            base = {"mode": sp.mode, "backend": sp.backend, "backend_version": sp.version}
            if sp.dropped_reason is not None and not sp.pin_reasons:
                out.append({**base, "parallel_config": None, "label": None, "strategy": None, "used_gpus": None,
                            "pinned": bool(self.pins), "supported": False, "reason": sp.dropped_reason})
                continue
            listed = self.pins if self.pins else sp.configs
            for pc in listed:
                reason = sp.pin_reasons.get(pc, "") if self.pins else ""
                out.append({**base, "parallel_config": config_json(pc), "label": pc.label(),
                            "strategy": config_strategy(pc), "used_gpus": pc.used_gpus, "pinned": bool(self.pins),
                            "supported": not reason, "reason": reason})
        return out

    @classmethod
    def from_rows(cls, config: SmartSearchConfig, rows: Sequence[Mapping[str, Any]]) -> LegalSpace:
        """The space :meth:`rows` was written from, without enumerating again.

        Facts are cached reads. The one thing the rows do not list, a derived pair's worker shapes,
        comes from the pure shape rules (no aiconfigurator-core call).
        """
        ss = config.search_space
        model = model_facts(ss.model_name)
        system = system_facts(ss.hardware_sku)
        pins = pinned_configs(config)
        by_pair: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
        for row in rows:
            by_pair.setdefault((row["mode"], row["backend"]), []).append(row)
        spaces: list[BackendSpace] = []
        for mode in ss.deployment_mode:
            for backend in ss.backend:
                pair = by_pair[(mode, backend)]
                version = pair[0]["backend_version"]
                precs, dropped = _runnable(config, backend, version, mode, system)
                if pins:
                    reasons = {ParallelConfig.from_dict(mode, json.loads(r["parallel_config"])): r["reason"]  # type: ignore[arg-type]
                               for r in pair}
                    spaces.append(_pinned_space(mode, backend, version, dropped, reasons, precs))  # type: ignore[arg-type]
                    continue
                if dropped is not None:
                    spaces.append(BackendSpace(mode, backend, version, (), (), dropped))  # type: ignore[arg-type]
                    continue
                configs = tuple(ParallelConfig.from_dict(mode, json.loads(r["parallel_config"]))  # type: ignore[arg-type]
                                for r in pair if r["parallel_config"] is not None)
                reason = None if configs else pair[0]["reason"]
                shapes = tuple(worker_shapes(model.is_moe, ss.gpu_budget, backend))
                spaces.append(BackendSpace(mode, backend, version, configs, shapes, reason, {}, precs))  # type: ignore[arg-type]
        return cls(config, model, system, max_seq_len(ss.model_name, ss.context_length), pins, tuple(spaces))


def legal_space(config: SmartSearchConfig) -> LegalSpace:
    """Stage 1: facts, replay and perf-DB viability, legal configs per (mode, backend).

    Raises UnknownModelError / UnknownSystemError, and NoViableParallelConfigError for a pinned config that
    breaks the enumeration rules on every backend (before any memory estimate or replay).
    """
    ss = config.search_space
    model = model_facts(ss.model_name)
    system = system_facts(ss.hardware_sku)
    seq = max_seq_len(ss.model_name, ss.context_length)
    pins = pinned_configs(config)
    spaces: list[BackendSpace] = []
    for mode in ss.deployment_mode:
        for backend in ss.backend:
            version = system.backend_versions.get(backend)
            precs, dropped = _runnable(config, backend, version, mode, system)
            if pins:
                reasons = {pc: (dropped or config_rejection(pc, model.is_moe, backend, ss.gpu_budget,
                                                            ss.min_gpu_budget) or "") for pc in pins}
                spaces.append(_pinned_space(mode, backend, version, dropped, reasons, precs))  # type: ignore[arg-type]
                continue
            if dropped is not None:
                spaces.append(BackendSpace(mode, backend, version, (), (), dropped))  # type: ignore[arg-type]
                continue
            shapes_l = worker_shapes(model.is_moe, ss.gpu_budget, backend)
            configs = configs_from_shapes(mode, shapes_l, ss.gpu_budget, ss.min_gpu_budget)  # type: ignore[arg-type]
            if not configs:
                dropped = (f"no legal {mode} parallel config within gpu_budget {ss.gpu_budget}"
                           + (f" and min_gpu_budget {ss.min_gpu_budget}" if ss.min_gpu_budget else ""))
            spaces.append(BackendSpace(mode, backend, version, tuple(configs), tuple(shapes_l), dropped, {}, precs))  # type: ignore[arg-type]
    space = LegalSpace(config, model, system, seq, pins, tuple(spaces))
    for pc in pins:
        if all(sp.pin_reasons.get(pc) for sp in space.spaces):
            raise NoViableParallelConfigError(_pin_error(pc, space.spaces))
    return space


def _pin_error(pc: ParallelConfig, spaces: Sequence[BackendSpace], kv: Mapping[str, str] | None = None) -> str:
    parts = [f"{sp.backend}: {(kv or {}).get(sp.backend) or sp.pin_reasons.get(pc) or sp.dropped_reason}"
             for sp in spaces]
    return (f"pinned parallel config {config_json(pc)} is legal for no backend — " + "; ".join(parts)
            + ". Fix or remove the entry (see `spica space` with parallel_configs: [] for legal ones).")


# ---------------------------------------------------------------- stage 2: KV filter and branches


@dataclass(frozen=True, order=True)
class Variant:
    """A backend at a precision: what a parallel config runs on (KV feasibility depends on both)."""

    backend: str
    precision: Precision


# The knobs a Variant is made of: chosen together with the parallel config, never on their own.
VARIANT_KNOBS: tuple[str, ...] = ("backend", "quantization", "kv_cache_dtype")


@dataclass(frozen=True)
class Branch:
    """One deployment mode's search space: what the study of that mode may try."""

    mode: Mode
    backends: tuple[str, ...]                                  # viable, in configured order
    pool: tuple[ParallelConfig, ...]                           # union over variants, deterministic order
    supported: Mapping[ParallelConfig, tuple[Variant, ...]]    # the variants each config is KV-feasible on
    knob_choices: Mapping[str, list[Any]]                      # includes the VARIANT_KNOBS; after pruning
    float_ranges: Mapping[str, tuple[float, float]]            # ranged kv_load_ratio
    gpu_budget: int
    pinned: bool = False

    @property
    def is_strict_pin(self) -> bool:
        """One config: no parallel dimensions and no projection."""
        return len(self.pool) == 1

    @property
    def supported_backends(self) -> dict[ParallelConfig, tuple[str, ...]]:
        """The backends each config runs on at some precision."""
        return {c: tuple(dict.fromkeys(v.backend for v in vs)) for c, vs in self.supported.items()}

    @property
    def variants(self) -> tuple[Variant, ...]:
        """Every (backend, precision) some config runs on, backend-major in configured order."""
        present = {v for vs in self.supported.values() for v in vs}
        return tuple(sorted(present, key=lambda v: (self.backends.index(v.backend),
                                                    self.knob_choices["quantization"].index(v.precision.quantization),
                                                    self.knob_choices["kv_cache_dtype"].index(v.precision.kv_cache_dtype))))

    def runs(self, variant: Variant, config: ParallelConfig) -> bool:
        return variant in self.supported.get(config, ())

    def configs_for(self, backend: str) -> tuple[ParallelConfig, ...]:
        """The configs a backend can run (at some precision), in pool order."""
        return tuple(c for c in self.pool if any(v.backend == backend for v in self.supported[c]))

    def configs_on(self, variant: Variant) -> tuple[ParallelConfig, ...]:
        """The configs a variant can run, in pool order."""
        return tuple(c for c in self.pool if variant in self.supported[c])

    def knob_params(self) -> list[Param]:
        """Rows for the knobs: one Param per knob with more than one distinct choice."""
        params: list[Param] = []
        for name, choices in self.knob_choices.items():
            if len(choices) <= 1:
                continue
            if name in VARIANT_KNOBS:
                params.append(Param(name, "categorical", tuple(choices), default=choices[0]))
            elif name in COMPOSITE_PRESETS and any(isinstance(c, dict) for c in choices):
                params.append(Param(name, "categorical", tuple(str(i) for i in range(len(choices))),
                                    entries=tuple(choices)))
            elif all(isinstance(c, str) for c in choices):
                params.append(Param(name, "categorical", tuple(choices)))
            else:
                params.append(Param(name, "discrete", tuple(sorted(float(c) for c in choices)),
                                    is_int=name in INT_KNOBS))
        for name, (lo, hi) in self.float_ranges.items():
            params.append(Param(name, "float", bounds=(lo, hi), default=(lo + hi) / 2))
        return params

    def constants(self) -> dict[str, Any]:
        """Knobs with a single choice: not study dimensions, injected into every sample."""
        return {k: v[0] for k, v in self.knob_choices.items() if len(v) == 1}

    def summary(self) -> dict[str, Any]:
        """Counts and strategies per backend (what ``spica space`` prints)."""
        out: dict[str, Any] = {}
        for b in self.backends:
            cfgs = self.configs_for(b)
            precs = [v.precision.label() for v in self.variants if v.backend == b]
            out[b] = {"num_configs": len(cfgs), "strategies": strategies(cfgs), "engine_sizes": engine_sizes(cfgs),
                      "precisions": precs}
        return out


def engine_sizes(configs: Sequence[ParallelConfig]) -> dict[str, list[int]]:
    """Distinct GPUs per engine, per role."""
    sizes: dict[str, set[int]] = {}
    for c in configs:
        for role, rc in c.roles.items():
            sizes.setdefault(role, set()).add(rc.shape.gpus)
    return {role: sorted(v) for role, v in sizes.items()}


@dataclass(frozen=True)
class BranchSet:
    """Stage 2's result: the branches, what was dropped and why, and the KV record of every shape."""

    branches: tuple[Branch, ...]
    dropped: tuple[Dropped, ...]
    warnings: tuple[str, ...]
    shape_records: tuple[ShapeKV, ...]
    model: ModelFacts
    system: SystemFacts
    max_seq_len: int
    legal: LegalSpace

    def branch(self, mode: str) -> Branch:
        for b in self.branches:
            if b.mode == mode:
                return b
        raise KeyError(f"no {mode} branch (dropped: {[d for d in self.dropped if d.mode == mode]})")

    def shape_rows(self) -> list[dict[str, Any]]:
        return [r.row() for r in self.shape_records]


ShapeKey = tuple[str, Precision, Shape]   # (backend, precision, worker shape)


def estimate_shapes(space: LegalSpace) -> dict[ShapeKey, ShapeKV]:
    """The KV estimate of every distinct (backend, precision, shape) of a runnable (mode, backend) pair."""
    ss = space.config.search_space
    records: dict[ShapeKey, ShapeKV] = {}
    for sp in space.spaces:
        if sp.dropped_reason is not None:
            continue
        for precision in sp.precisions:
            for shape in sp.shapes:
                if (sp.backend, precision, shape) not in records:
                    records[(sp.backend, precision, shape)] = shape_kv(ss.model_name, ss.hardware_sku, sp.backend,
                                                                       shape, space.max_seq_len, precision)
    return records


def ordered_records(records: Mapping[ShapeKey, ShapeKV], backend_order: Sequence[str]) -> list[ShapeKV]:
    """Records in a stable order: configured backend order, then engine size, shape key and precision."""
    return sorted(records.values(),
                  key=lambda r: (list(backend_order).index(r.backend), r.shape.gpus, r.shape.sort_key(), r.precision))


def records_from_rows(rows: Sequence[Mapping[str, Any]]) -> dict[ShapeKey, ShapeKV]:
    """The KV records ``shapes.parquet`` holds, keyed like :func:`estimate_shapes`."""
    return {(r.backend, r.precision, r.shape): r for r in map(ShapeKV.from_row, rows)}


def kv_filter(space: LegalSpace, records: Mapping[ShapeKey, ShapeKV] | None = None) -> BranchSet:
    """Stage 2: KV-filter every legal config, drop empty backends and modes, build the branches.

    ``records`` (from :func:`estimate_shapes`, or read back with :func:`records_from_rows`) may be passed
    to avoid estimating again. Raises NoViableParallelConfigError when a pin is feasible for no backend
    or no mode survives.
    """
    config = space.config
    ss = config.search_space
    if records is None:
        records = estimate_shapes(space)

    dropped: list[Dropped] = []
    warnings: list[str] = []
    branches: list[Branch] = []
    pin_kv_reasons: dict[ParallelConfig, dict[str, str]] = {pc: {} for pc in space.pins}
    for mode in ss.deployment_mode:
        per_backend: dict[str, dict[ParallelConfig, list[Variant]]] = {}
        for sp in (s for s in space.spaces if s.mode == mode):
            if sp.dropped_reason is not None:
                dropped.append(Dropped(mode, sp.backend, sp.dropped_reason))
                continue
            kept: dict[ParallelConfig, list[Variant]] = {}
            for precision in sp.precisions:
                kv = {s: records[(sp.backend, precision, s)] for s in sp.shapes}
                tag = f" at {precision.label()}" if len(sp.precisions) > 1 else ""
                for pc in sp.configs:
                    bad = [(role, kv[rc.shape]) for role, rc in pc.roles.items() if not kv[rc.shape].feasible]
                    if not bad:
                        kept.setdefault(pc, []).append(Variant(sp.backend, precision))
                    elif pc in pin_kv_reasons:
                        why = "; ".join(f"{role} {r.shape.strategy.upper()}{r.shape.gpus} not KV-feasible{tag} "
                                        f"({r.reason})" for role, r in bad)
                        pin_kv_reasons[pc][sp.backend] = "; ".join(filter(None, (pin_kv_reasons[pc].get(sp.backend),
                                                                                 why)))
            if not kept:
                if space.pins:
                    reason = "no pinned parallel config is KV-feasible for this backend"
                else:
                    shapes = [records[(sp.backend, p, s)] for p in sp.precisions for s in sp.shapes]
                    reason = no_viable_message(ss.model_name, ss.hardware_sku, ss.gpu_budget, mode, sp.backend,
                                               shapes, ss.min_gpu_budget)
                dropped.append(Dropped(mode, sp.backend, reason))
                continue
            per_backend[sp.backend] = {pc: kept[pc] for pc in sp.configs if pc in kept}
        viable = [b for b in ss.backend if b in per_backend]
        if not viable:
            why = "; ".join(f"{d.backend}: {d.reason}" for d in dropped if d.mode == mode)
            msg = f"deployment mode {mode} skipped: no viable backend ({why})"
            warnings.append(msg)
            log.warning(msg)
            dropped.append(Dropped(mode, None, "no viable backend"))
            continue
        pool = sort_configs(c for b in viable for c in per_backend[b])
        supported = {c: tuple(v for b in viable for v in per_backend[b].get(c, ())) for c in pool}
        knobs, ranges = branch_knob_choices(config, mode, viable)
        present = sorted({v.precision for vs in supported.values() for v in vs}, key=config_precisions(config).index)
        knobs = {"backend": knobs.pop("backend"),
                 "quantization": list(dict.fromkeys(p.quantization for p in present)),
                 "kv_cache_dtype": list(dict.fromkeys(p.kv_cache_dtype for p in present)), **knobs}
        branches.append(Branch(mode, tuple(viable), tuple(pool), supported, knobs, ranges,  # type: ignore[arg-type]
                               ss.gpu_budget, pinned=bool(space.pins)))

    for pc in space.pins:
        legal_somewhere = any(pc in b.supported for b in branches)
        if not legal_somewhere:
            raise NoViableParallelConfigError(_pin_error(pc, space.spaces, pin_kv_reasons[pc]))
    if not branches:
        why = "; ".join(f"{d.mode}/{d.backend}: {d.reason}" for d in dropped if d.backend is not None)
        raise NoViableParallelConfigError(f"no deployment mode is viable for {ss.model_name} on {ss.gpu_budget} × "
                                          f"{ss.hardware_sku}: {why}")
    shape_records = tuple(ordered_records(records, ss.backend))
    return BranchSet(tuple(branches), tuple(dropped), tuple(warnings), shape_records,
                     space.model, space.system, space.max_seq_len, space)


def enumerate_branches(config: SmartSearchConfig) -> BranchSet:
    """End to end: legality, KV filter, branches."""
    return kv_filter(legal_space(config))


__all__ = [
    "Branch", "BranchSet", "BackendSpace", "Variant", "VARIANT_KNOBS", "ShapeKey", "config_precisions", "LegalSpace", "Dropped", "legal_space", "kv_filter", "estimate_shapes",
    "ordered_records", "records_from_rows",
    "enumerate_branches", "pinned_configs", "config_json", "config_strategy",
    "engine_sizes", "TRTLLM_DISAGG_REASON", "NO_LEGAL_PIN_REASON",
]
