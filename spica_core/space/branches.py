"""Search branches: one per deployment mode, with its viable backends, config pool and knobs.

Two stages, each with its own artifact:

1. :func:`legal_space` — per mode × backend × GPU type, is the triple runnable (replay support, perf DB)
   and which parallel configs are legal (``enumeration``). No memory estimate yet.
   Rows: ``branches.parquet``; :meth:`LegalSpace.from_rows` rebuilds the same space from them.
2. :func:`kv_filter` — estimate KV per distinct (GPU type, backend, precision, shape), drop infeasible
   configs (each role on its own GPU type, within ``gpu_inventory``) and empty backends / modes, prune dead
   knobs and build the :class:`Branch` objects the study uses. Rows: ``shapes.parquet``;
   :func:`records_from_rows` reads them back, so a resumed run builds its branches without a single memory
   estimate.

:func:`enumerate_branches` runs both.
"""
from __future__ import annotations

import itertools
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from spica_core.config.knobs import COMPOSITE_PRESETS, INT_KNOBS
from spica_core.config.search_space import DisaggParallel, ParallelShape, SearchSpace, roles_of, sku_field
from spica_core.config.model import SmartSearchConfig
from spica_core.space.enumeration import config_rejection, configs_from_shapes, sort_configs, strategies, worker_shapes
from spica_core.errors import ConfigError, Issue, NoViableParallelConfigError
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
    """A backend dropped from a mode (``backend`` set), on one GPU type or prefill+decode pair of types when
    ``hardware_sku`` is set, or a whole mode skipped (``backend`` None)."""

    mode: str
    backend: str | None
    reason: str
    hardware_sku: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "backend": self.backend, "hardware_sku": self.hardware_sku, "reason": self.reason}


@dataclass(frozen=True)
class BackendSpace:
    """One (mode, backend, GPU type) before the KV filter."""

    mode: Mode
    backend: str
    sku: str
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


def _pinned_space(mode: Mode, backend: str, sku: str, version: str | None, dropped: str | None,
                  reasons: Mapping[ParallelConfig, str], precs: tuple[Precision, ...]) -> BackendSpace:
    """A pinned (mode, backend, GPU type): every pin with its rejection reason ("" = legal), in pin order."""
    legal = tuple(pc for pc, reason in reasons.items() if not reason)
    if dropped is None and not legal:
        dropped = NO_LEGAL_PIN_REASON
    shapes = tuple(sorted({s for pc in legal for s in pc.shapes}, key=lambda s: (s.gpus, s.sort_key())))
    return BackendSpace(mode, backend, sku, version, legal, shapes, dropped, reasons, precs)


def config_precisions(config: SmartSearchConfig) -> tuple[Precision, ...]:
    """The precisions the config asks for (the checkpoint's own when quantization is unset)."""
    ss = config.search_space
    return precisions(ss.model_name, ss.quantization, ss.kv_cache_dtype)


def _runnable(config: SmartSearchConfig, backend: str, version: str | None, mode: str, system: SystemFacts
              ) -> tuple[tuple[Precision, ...], str | None]:
    """(the precisions this triple can run, why it cannot run at all or None)."""
    dropped = _pair_drop_reason(mode, backend, system)
    if dropped is not None or version is None:
        return (), dropped
    ss = config.search_space
    kept: list[Precision] = []
    problems: list[str] = []
    for p in config_precisions(config):
        problem = None if p.native else precision_problem(ss.model_name, system.name, backend, version,
                                                          p.quantization)
        if problem:
            problems.append(f"quantization {p.quantization}: {problem}")
        else:
            kept.append(p)
    return tuple(kept), (None if kept else "; ".join(dict.fromkeys(problems)))


@dataclass(frozen=True)
class LegalSpace:
    """Stage 1's result: the facts and every (mode, backend, GPU type) space."""

    config: SmartSearchConfig
    model: ModelFacts
    systems: Mapping[str, SystemFacts]     # GPU type → its facts, in the config's order
    max_seq_len: int
    pins: tuple[ParallelConfig, ...]
    spaces: tuple[BackendSpace, ...]

    def rows(self) -> list[dict[str, Any]]:
        """``branches.parquet``: one row per (mode, backend, GPU type, config); a dropped triple has one row
        without config."""
        out: list[dict[str, Any]] = []
        for sp in self.spaces:
            base = {"mode": sp.mode, "backend": sp.backend, "hardware_sku": sp.sku, "backend_version": sp.version}
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
        systems = {sku: system_facts(sku) for sku in ss.skus}
        pins = pinned_configs(config)
        by_triple: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
        for row in rows:
            by_triple.setdefault((row["mode"], row["backend"], row["hardware_sku"]), []).append(row)
        spaces: list[BackendSpace] = []
        for mode, backend, sku in _triples(config):
            triple = by_triple[(mode, backend, sku)]
            version = triple[0]["backend_version"]
            precs, dropped = _runnable(config, backend, version, mode, systems[sku])
            if pins:
                reasons = {ParallelConfig.from_dict(mode, json.loads(r["parallel_config"])): r["reason"]  # type: ignore[arg-type]
                           for r in triple}
                spaces.append(_pinned_space(mode, backend, sku, version, dropped, reasons, precs))  # type: ignore[arg-type]
                continue
            if dropped is not None:
                spaces.append(BackendSpace(mode, backend, sku, version, (), (), dropped))  # type: ignore[arg-type]
                continue
            configs = tuple(ParallelConfig.from_dict(mode, json.loads(r["parallel_config"]))  # type: ignore[arg-type]
                            for r in triple if r["parallel_config"] is not None)
            reason = None if configs else triple[0]["reason"]
            shapes = tuple(worker_shapes(model.is_moe, ss.gpu_budget, backend))
            spaces.append(BackendSpace(mode, backend, sku, version, configs, shapes, reason, {}, precs))  # type: ignore[arg-type]
        return cls(config, model, systems, max_seq_len(ss.model_name, ss.context_length), pins, tuple(spaces))


def _triples(config: SmartSearchConfig) -> list[tuple[str, str, str]]:
    """Every (mode, backend, GPU type) the config may deploy, in its order."""
    ss = config.search_space
    return [(mode, backend, sku) for mode in ss.deployment_mode for backend in ss.backend
            for sku in dict.fromkeys(s for skus in ss.role_skus(mode).values() for s in skus)]


def legal_space(config: SmartSearchConfig) -> LegalSpace:
    """Stage 1: facts, replay and perf-DB viability, legal configs per (mode, backend).

    Raises UnknownModelError / UnknownSystemError, and NoViableParallelConfigError for a pinned config that
    breaks the enumeration rules on every backend (before any memory estimate or replay).
    """
    ss = config.search_space
    model = model_facts(ss.model_name)
    systems = {sku: system_facts(sku) for sku in ss.skus}
    seq = max_seq_len(ss.model_name, ss.context_length)
    pins = pinned_configs(config)
    spaces: list[BackendSpace] = []
    for mode, backend, sku in _triples(config):
        version = systems[sku].backend_versions.get(backend)
        precs, dropped = _runnable(config, backend, version, mode, systems[sku])
        if pins:
            reasons = {pc: (dropped or config_rejection(pc, model.is_moe, backend, ss.gpu_budget,
                                                        ss.min_gpu_budget) or "") for pc in pins}
            spaces.append(_pinned_space(mode, backend, sku, version, dropped, reasons, precs))  # type: ignore[arg-type]
            continue
        if dropped is not None:
            spaces.append(BackendSpace(mode, backend, sku, version, (), (), dropped))  # type: ignore[arg-type]
            continue
        shapes_l = worker_shapes(model.is_moe, ss.gpu_budget, backend)
        configs = configs_from_shapes(mode, shapes_l, ss.gpu_budget, ss.min_gpu_budget)  # type: ignore[arg-type]
        if not configs:
            dropped = (f"no legal {mode} parallel config within gpu_budget {ss.gpu_budget}"
                       + (f" and min_gpu_budget {ss.min_gpu_budget}" if ss.min_gpu_budget else ""))
        spaces.append(BackendSpace(mode, backend, sku, version, tuple(configs), tuple(shapes_l), dropped, {}, precs))  # type: ignore[arg-type]
    space = LegalSpace(config, model, systems, seq, pins, tuple(spaces))
    for pc in pins:
        if all(sp.pin_reasons.get(pc) for sp in space.spaces):
            raise NoViableParallelConfigError(_pin_error(pc, space.spaces))
    return space


def _pin_error(pc: ParallelConfig, spaces: Sequence[BackendSpace], kv: Mapping[str, str] | None = None) -> str:
    several = len({sp.sku for sp in spaces}) > 1
    parts = [f"{sp.backend}{f' on {sp.sku}' if several else ''}: "
             f"{(kv or {}).get(sp.backend) or sp.pin_reasons.get(pc) or sp.dropped_reason}" for sp in spaces]
    parts = list(dict.fromkeys(parts))
    return (f"pinned parallel config {config_json(pc)} is legal for no backend — " + "; ".join(parts)
            + ". Fix or remove the entry (see `spica space` with parallel_configs: [] for legal ones).")


# ---------------------------------------------------------------- stage 2: KV filter and branches


@dataclass(frozen=True, order=True)
class Variant:
    """A backend at a precision on GPU types: what a parallel config runs on (KV feasibility depends on all).

    ``hardware`` is each role's GPU type as its selection field: ``(("hardware_sku", "h200_sxm"),)`` for agg,
    ``(("prefill_hardware_sku", …), ("decode_hardware_sku", …))`` for disagg.
    """

    backend: str
    precision: Precision
    hardware: tuple[tuple[str, str], ...]

    def fields(self) -> dict[str, str]:
        """The variant as the selection's knob values."""
        return {"backend": self.backend, **self.precision.fields(), **dict(self.hardware)}

    @property
    def skus(self) -> tuple[str, ...]:
        return tuple(sku for _, sku in self.hardware)


# The knobs a Variant is made of: chosen together with the parallel config, never on their own.
SKU_KNOBS: tuple[str, ...] = ("hardware_sku", "prefill_hardware_sku", "decode_hardware_sku")
VARIANT_KNOBS: tuple[str, ...] = ("backend", "quantization", "kv_cache_dtype", *SKU_KNOBS)


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
        """Every variant some config runs on, backend-major, each knob in its configured order."""
        present = {v for vs in self.supported.values() for v in vs}
        return tuple(sorted(present, key=lambda v: tuple(self.knob_choices[k].index(value)
                                                         for k, value in v.fields().items())))

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
            mine = [v for v in self.variants if v.backend == b]
            out[b] = {"num_configs": len(cfgs), "strategies": strategies(cfgs), "engine_sizes": engine_sizes(cfgs),
                      "precisions": list(dict.fromkeys(v.precision.label() for v in mine)),
                      "hardware": list(dict.fromkeys("+".join(v.skus) for v in mine))}
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
    systems: Mapping[str, SystemFacts]
    max_seq_len: int
    legal: LegalSpace

    def branch(self, mode: str) -> Branch:
        for b in self.branches:
            if b.mode == mode:
                return b
        raise KeyError(f"no {mode} branch (dropped: {[d for d in self.dropped if d.mode == mode]})")

    def shape_rows(self) -> list[dict[str, Any]]:
        return [r.row() for r in self.shape_records]


ShapeKey = tuple[str, str, Precision, Shape]   # (GPU type, backend, precision, worker shape)


def estimate_shapes(space: LegalSpace) -> dict[ShapeKey, ShapeKV]:
    """The KV estimate of every distinct (GPU type, backend, precision, shape) of a runnable triple."""
    ss = space.config.search_space
    records: dict[ShapeKey, ShapeKV] = {}
    for sp in space.spaces:
        if sp.dropped_reason is not None:
            continue
        for precision in sp.precisions:
            for shape in sp.shapes:
                if (sp.sku, sp.backend, precision, shape) not in records:
                    records[(sp.sku, sp.backend, precision, shape)] = shape_kv(
                        ss.model_name, sp.sku, sp.backend, shape, space.max_seq_len, precision)
    return records


def ordered_records(records: Mapping[ShapeKey, ShapeKV], ss: SearchSpace) -> list[ShapeKV]:
    """Records in a stable order: the configured GPU type and backend orders, then engine size, shape key and
    precision."""
    return sorted(records.values(), key=lambda r: (ss.skus.index(r.hardware_sku), ss.backend.index(r.backend),
                                                   r.shape.gpus, r.shape.sort_key(), r.precision))


def records_from_rows(rows: Sequence[Mapping[str, Any]]) -> dict[ShapeKey, ShapeKV]:
    """The KV records ``shapes.parquet`` holds, keyed like :func:`estimate_shapes`."""
    return {(r.hardware_sku, r.backend, r.precision, r.shape): r for r in map(ShapeKV.from_row, rows)}


def over_inventory(config: ParallelConfig, skus: Sequence[str], inventory: Mapping[str, int] | None
                   ) -> dict[str, int]:
    """The GPU types a config on ``skus`` (one per role) needs more of than ``gpu_inventory`` has: type → GPUs."""
    need: dict[str, int] = {}
    for rc, sku in zip(config.roles.values(), skus):
        need[sku] = need.get(sku, 0) + rc.gpus
    return {sku: n for sku, n in need.items() if n > (inventory or {}).get(sku, n)}


def _hardware_combos(config: SmartSearchConfig, mode: str) -> list[tuple[tuple[str, str], ...]]:
    """Every assignment of GPU types to the mode's roles, as a Variant's ``hardware``."""
    role_skus = config.search_space.role_skus(mode)
    roles = roles_of(mode)
    return [tuple((sku_field(mode, r), sku) for r, sku in zip(roles, combo))
            for combo in itertools.product(*(role_skus[r] for r in roles))]


def kv_filter(space: LegalSpace, records: Mapping[ShapeKey, ShapeKV] | None = None) -> BranchSet:
    """Stage 2: KV-filter every legal config, each role on its GPU type and within ``gpu_inventory``; drop empty
    backends and modes, build the branches.

    ``records`` (from :func:`estimate_shapes`, or read back with :func:`records_from_rows`) may be passed
    to avoid estimating again. Raises NoViableParallelConfigError when a pin is feasible for no backend
    or no mode survives, ConfigError (naming ``gpu_inventory``) when only the inventory stood in the way.
    """
    config = space.config
    ss = config.search_space
    if records is None:
        records = estimate_shapes(space)
    inventory = ss.gpu_inventory

    dropped: list[Dropped] = []
    warnings: list[str] = []
    branches: list[Branch] = []
    pin_kv_reasons: dict[ParallelConfig, dict[str, str]] = {pc: {} for pc in space.pins}
    inventory_misses: list[str] = []
    for mode in ss.deployment_mode:
        per_backend: dict[str, dict[ParallelConfig, list[Variant]]] = {}
        for backend in ss.backend:
            by_sku = {sp.sku: sp for sp in space.spaces if sp.mode == mode and sp.backend == backend}
            for sp in by_sku.values():
                if sp.dropped_reason is not None:
                    dropped.append(Dropped(mode, backend, sp.dropped_reason, sp.sku))
            kept: dict[ParallelConfig, list[Variant]] = {}
            reasons: list[str] = []
            for hardware in _hardware_combos(config, mode):
                skus = tuple(sku for _, sku in hardware)
                label = "+".join(skus)
                if any(by_sku[sku].dropped_reason is not None for sku in skus):
                    continue
                versions = {by_sku[sku].version for sku in skus}
                if len(versions) > 1:
                    why = (f"aiconfigurator-core's {backend} data on {' and '.join(skus)} are of different engine "
                           f"versions ({', '.join(sorted(str(v) for v in versions))}); one deployment runs one")
                    dropped.append(Dropped(mode, backend, why, label))
                    reasons.append(f"{label}: {why}")
                    continue
                first = by_sku[skus[0]]
                precs = [p for p in first.precisions if all(p in by_sku[sku].precisions for sku in skus)]
                found = False
                for precision in precs:
                    tag = f" at {precision.label()}" if len(precs) > 1 else ""
                    for pc in first.configs:
                        kv = [(role, records[(sku, backend, precision, rc.shape)])
                              for (role, rc), sku in zip(pc.roles.items(), skus)]
                        bad = [(role, r) for role, r in kv if not r.feasible]
                        over = over_inventory(pc, skus, inventory) if not bad else {}
                        if not bad and not over:
                            kept.setdefault(pc, []).append(Variant(backend, precision, hardware))
                            found = True
                        elif over:
                            inventory_misses.append(f"{mode} {pc.label()} on {label} needs "
                                                    + ", ".join(f"{n} × {sku}" for sku, n in over.items()))
                        if (bad or over) and pc in pin_kv_reasons:
                            where = f" on {label}" if len(ss.skus) > 1 else ""
                            whys = [f"{role} {r.shape.strategy.upper()}{r.shape.gpus} not KV-feasible{tag}{where} "
                                    f"({r.reason})" for role, r in bad]
                            if over:
                                whys.append(f"over gpu_inventory{where}: needs "
                                            + ", ".join(f"{n} × {sku}" for sku, n in over.items()))
                            pin_kv_reasons[pc][backend] = "; ".join(filter(None, (pin_kv_reasons[pc].get(backend),
                                                                                  *whys)))
                if not found:
                    if space.pins:
                        why = "no pinned parallel config is KV-feasible for this backend"
                    else:
                        shapes = [records[(sku, backend, p, s)] for sku in dict.fromkeys(skus) for p in precs
                                  for s in first.shapes]
                        why = no_viable_message(ss.model_name, label, ss.gpu_budget, mode, backend, shapes,
                                                ss.min_gpu_budget, inventory)
                    reasons.append(why)
                    if len(ss.skus) > 1:
                        dropped.append(Dropped(mode, backend, why, label))
            if not kept:
                if by_sku and all(sp.dropped_reason is not None for sp in by_sku.values()):
                    continue  # recorded per GPU type above
                dropped.append(Dropped(mode, backend, "; ".join(dict.fromkeys(reasons))))
                continue
            pool_order = next(sp.configs for sp in by_sku.values() if sp.dropped_reason is None)
            per_backend[backend] = {pc: kept[pc] for pc in pool_order if pc in kept}
        viable = [b for b in ss.backend if b in per_backend]
        if not viable:
            why = "; ".join(f"{d.backend}{f' on {d.hardware_sku}' if d.hardware_sku else ''}: {d.reason}"
                            for d in dropped if d.mode == mode)
            msg = f"deployment mode {mode} skipped: no viable backend ({why})"
            warnings.append(msg)
            log.warning(msg)
            dropped.append(Dropped(mode, None, "no viable backend"))
            continue
        pool = sort_configs(c for b in viable for c in per_backend[b])
        supported = {c: tuple(v for b in viable for v in per_backend[b].get(c, ())) for c in pool}
        knobs, ranges = branch_knob_choices(config, mode, viable)
        present = [v for vs in supported.values() for v in vs]
        precs = sorted({v.precision for v in present}, key=config_precisions(config).index)
        hardware = {name: [s for s in knobs.pop(name) if any((name, s) in v.hardware for v in present)]
                    for name in (sku_field(mode, r) for r in roles_of(mode))}   # the configured types still run
        knobs = {"backend": knobs.pop("backend"),
                 "quantization": list(dict.fromkeys(p.quantization for p in precs)),
                 "kv_cache_dtype": list(dict.fromkeys(p.kv_cache_dtype for p in precs)), **hardware, **knobs}
        branches.append(Branch(mode, tuple(viable), tuple(pool), supported, knobs, ranges,  # type: ignore[arg-type]
                               ss.gpu_budget, pinned=bool(space.pins)))

    if inventory_misses and not branches:
        raise ConfigError("config", [Issue("search_space.gpu_inventory", "holds no deployment the search could try: "
                                           + "; ".join(dict.fromkeys(inventory_misses[:6]))
                                           + ("; …" if len(inventory_misses) > 6 else "")
                                           + ". Raise the inventory or allow another GPU type", inventory, True)])
    for pc in space.pins:
        legal_somewhere = any(pc in b.supported for b in branches)
        if not legal_somewhere:
            raise NoViableParallelConfigError(_pin_error(pc, space.spaces, pin_kv_reasons[pc]))
    if not branches:
        why = "; ".join(f"{d.mode}/{d.backend}{f' on {d.hardware_sku}' if d.hardware_sku else ''}: {d.reason}"
                        for d in dropped if d.backend is not None)
        raise NoViableParallelConfigError(f"no deployment mode is viable for {ss.model_name} on {ss.gpu_budget} × "
                                          f"{' or '.join(ss.skus)}: {why}")
    shape_records = tuple(ordered_records(records, ss))
    return BranchSet(tuple(branches), tuple(dropped), tuple(warnings), shape_records,
                     space.model, space.systems, space.max_seq_len, space)


def enumerate_branches(config: SmartSearchConfig) -> BranchSet:
    """End to end: legality, KV filter, branches."""
    return kv_filter(legal_space(config))


__all__ = [
    "Branch", "BranchSet", "BackendSpace", "Variant", "VARIANT_KNOBS", "ShapeKey", "over_inventory",
    "config_precisions", "LegalSpace", "Dropped", "legal_space", "kv_filter", "estimate_shapes",
    "ordered_records", "records_from_rows",
    "enumerate_branches", "pinned_configs", "config_json", "config_strategy",
    "engine_sizes", "TRTLLM_DISAGG_REASON", "NO_LEGAL_PIN_REASON",
]
