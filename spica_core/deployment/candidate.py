"""The candidate every stage speaks: one deployment to replay, as a frozen typed value.

A :class:`Candidate` holds mode, backend and version, the parallel config, the precision, per-role
engine knobs, the router, the planner and its load predictor. Its wire format, for the replay's inputs and for
every file, is the flat unrolled sample: ``to_sample()`` writes exactly the keys
that apply (irrelevant knobs are absent, never sentinels) and ``from_sample()`` reads them back.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from functools import partial
from typing import Any, TypeVar

from spica_core.config.knobs import decode_composite, predictor_fields
from spica_core.config.search_space import SearchSpace, roles_of, sku_field
from spica_core.config.policies import PolicyEntry
from spica_core.errors import SpicaError
from spica_core.space.parallel import Mode, ParallelConfig
from spica_core.space.precision import Precision, precision_of

T = TypeVar("T")
# The predictor sub-sweep's winner per throughput interval (seconds).
PredictorWinners = Mapping[int, PolicyEntry]


@dataclass(frozen=True)
class Context:
    """What the user pinned about the deployment, carried on every sample (None values included)."""

    model_name: str
    gpu_budget: int
    min_gpu_budget: int | None = None
    min_endpoint: int | None = None
    context_length: int | None = None
    startup_time: float | None = None
    aic_nextn: int | None = None
    scheduler_recv_interval: int = 1     # SGLang: scheduler iterations between polls for new requests


@dataclass(frozen=True)
class HostOffload:
    """The KV manager's G2 (host memory) tier; ``num_g2_blocks == 0`` means no offload."""

    num_g2_blocks: int = 0
    kv_bytes_per_token: int | None = None
    bandwidth_g1_to_g2_gbps: float | None = None
    bandwidth_g2_to_g1_gbps: float | None = None
    offload_batch_size: int | None = None

    @property
    def enabled(self) -> bool:
        return self.num_g2_blocks > 0


@dataclass(frozen=True)
class EngineKnobs:
    """One role's engine settings: the searched batching knobs and the pinned ones."""

    max_num_batched_tokens: int
    max_num_seqs: int
    block_size: int
    gpu_memory_utilization: float
    enable_prefix_caching: bool


@dataclass(frozen=True)
class Admission:
    """Admission-control fields of the KV router branch (always unset: rejected at config time)."""

    active_decode_blocks_threshold: int | None = None
    active_prefill_tokens_threshold: int | None = None
    active_prefill_tokens_threshold_frac: float | None = None
    no_admission_control: bool = False


@dataclass(frozen=True)
class Router:
    """Round robin, or the KV router with its weights (cache-hit weights only with host offload)."""

    mode: str
    overlap_score_credit: float | None = None
    prefill_load_scale: float | None = None
    router_temperature: float | None = None
    host_cache_hit_weight: float | None = None
    disk_cache_hit_weight: float | None = None
    admission: Admission | None = None

    @property
    def is_kv(self) -> bool:
        return self.mode == "kv_router"

    def weights(self) -> dict[str, float]:
        """The KvRouterConfig keyword arguments this router sets (present weights only)."""
        return {name: value for name in WEIGHT_FIELDS if (value := getattr(self, name)) is not None}


WEIGHT_FIELDS = ("overlap_score_credit", "prefill_load_scale", "router_temperature", "host_cache_hit_weight",
                 "disk_cache_hit_weight")
_PREDICTOR_OWN = ("prophet_window_size", "kalman_q_level", "kalman_q_trend", "kalman_r", "kalman_min_points")


@dataclass(frozen=True)
class LoadPredictorChoice:
    """The planner's load predictor: a family, log1p, and only that family's own knobs."""

    family: str
    log1p: bool = False
    prophet_window_size: int | None = None
    kalman_q_level: float | None = None
    kalman_q_trend: float | None = None
    kalman_r: float | None = None
    kalman_min_points: int | None = None

    def fields(self) -> dict[str, Any]:
        """The planner's flat predictor fields (``load_predictor``, ``load_predictor_log1p``, own knobs)."""
        out: dict[str, Any] = {"load_predictor": self.family, "load_predictor_log1p": self.log1p}
        out.update({k: v for k in _PREDICTOR_OWN if (v := getattr(self, k)) is not None})
        return out

    @classmethod
    def from_fields(cls, flat: Mapping[str, Any]) -> LoadPredictorChoice:
        return cls(family=str(flat["load_predictor"]), log1p=bool(flat["load_predictor_log1p"]),
                   **{k: flat[k] for k in _PREDICTOR_OWN if k in flat})


_PLANNER_DETAILS = ("throughput_adjustment_interval_seconds", "load_adjustment_interval_seconds",
                    "max_num_fpm_samples", "fpm_sample_bucket_size", "load_scaling_down_sensitivity",
                    "load_min_observations")


@dataclass(frozen=True)
class PlannerChoice:
    """The scaling policy entry as written, its flags, and (when it scales) the planner's details."""

    policy: PolicyEntry
    enable_throughput_scaling: bool = False
    enable_load_scaling: bool = False
    throughput_adjustment_interval_seconds: int | None = None
    load_adjustment_interval_seconds: int | None = None
    max_num_fpm_samples: int | None = None
    fpm_sample_bucket_size: int | None = None
    load_scaling_down_sensitivity: int | None = None
    load_min_observations: int | None = None
    load_predictor: LoadPredictorChoice | None = None

    @property
    def scales(self) -> bool:
        return self.enable_throughput_scaling or self.enable_load_scaling


@dataclass(frozen=True)
class KVLoad:
    """The KV capacity a kv_load_ratio workload was sized against."""

    ratio: float
    capacity_tokens: int
    concurrency_capacity: int
    role_capacity_tokens: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Candidate:
    """One deployment: what the study proposed, after projection and the search loop's resolution."""

    mode: Mode
    backend: str
    context: Context
    offload: HostOffload
    parallel: ParallelConfig
    engines: Mapping[str, EngineKnobs]
    router: Router
    planner: PlannerChoice
    precision: Precision
    hardware: Mapping[str, str]          # role → GPU type (aiconfigurator-core system id)
    backend_version: str | None = None   # resolved by the evaluation (latest perf-DB version)
    concurrency: int | None = None       # fixed or KV-derived closed-loop concurrency
    kv_load: KVLoad | None = None

    @property
    def roles(self) -> tuple[str, ...]:
        return roles_of(self.mode)

    @property
    def used_gpus(self) -> int:
        return self.parallel.used_gpus

    def sku(self, role: str) -> str:
        """The GPU type a role runs on."""
        return self.hardware[role]

    @property
    def hardware_sku(self) -> str | None:
        """The one GPU type every role runs on; None when prefill and decode differ."""
        skus = set(self.hardware.values())
        return next(iter(skus)) if len(skus) == 1 else None

    @property
    def system(self) -> str:
        """The GPU type, or ``prefill+decode`` types when they differ."""
        return self.hardware_sku or "+".join(self.hardware[r] for r in self.roles)

    @property
    def group(self) -> tuple[str, str, str]:
        """(model, system, backend): the group its error bands and a calibration are looked up under (a mixed
        deployment has no measured rows of its own, so it falls back to its backend's)."""
        return self.context.model_name, self.system, self.backend

    def resolved(self, *, backend_version: str, concurrency: int | None = None,
                 kv_load: KVLoad | None = None) -> Candidate:
        """The candidate with what the evaluation resolves: perf-DB version, concurrency, KV load."""
        return replace(self, backend_version=backend_version, concurrency=concurrency, kv_load=kv_load)

    # ------------------------------------------------------------ building from a study selection

    @classmethod
    def unroll(cls, space: SearchSpace, selection: Mapping[str, Any], parallel: ParallelConfig,
               winners: PredictorWinners | None = None) -> Candidate:
        """A decoded selection plus its projected parallel config, with pinned knobs from ``space``.

        ``winners`` is the load-predictor sub-sweep's winner per throughput interval (None when
        no predictor was swept).
        """
        mode = selection.get("deployment_mode", parallel.mode)
        if mode != parallel.mode:
            raise SpicaError(f"selection deployment_mode {mode!r} does not match the parallel config "
                             f"({parallel.mode})")

        pinned = partial(getattr, space)

        def pick(knob: str) -> Any:
            if knob in selection:
                return selection[knob]
            values = pinned(knob)
            if isinstance(values, list) and len(values) == 1:
                return values[0]
            raise SpicaError(f"selection has no value for '{knob}' and search_space.{knob} has {len(values)} "
                             f"values ({values}); pin it or let the study choose it")

        backend = pick("backend")
        quantization = selection.get("quantization")
        if quantization is None and space.quantization is not None:
            quantization = pick("quantization")
        precision = precision_of(space.model_name, quantization, pick("kv_cache_dtype"))
        engines = {role: EngineKnobs(int(pick(f"{role}_max_num_batched_tokens")), int(pick(f"{role}_max_num_seqs")),
                                     pinned(f"{role}_block_size"), pinned(f"{role}_gpu_memory_utilization"),
                                     pinned(f"{role}_enable_prefix_caching"))
                   for role in roles_of(mode)}
        router = Router(pick("router_mode"))
        if router.is_kv:
            cache_hits = ({k: float(pick(k)) for k in ("host_cache_hit_weight", "disk_cache_hit_weight")}
                          if space.num_g2_blocks > 0 else {})
            router = Router("kv_router", float(pick("overlap_score_credit")), float(pick("prefill_load_scale")),
                            float(pick("router_temperature")), **cache_hits,
                            admission=_build(Admission, pinned))
        policy = pick("planner_scaling_policy")
        flags = decode_composite("planner_scaling_policy", policy)
        planner = PlannerChoice(policy, bool(flags["enable_throughput_scaling"]), bool(flags["enable_load_scaling"]))
        if planner.scales:
            interval = flags["throughput_adjustment_interval_seconds"]
            winner = (winners or {}).get(int(interval)) if interval is not None else None
            predictor = None
            if planner.enable_throughput_scaling and winner is not None:
                predictor = LoadPredictorChoice.from_fields(predictor_fields(winner))
            planner = replace(planner, throughput_adjustment_interval_seconds=interval,
                              load_adjustment_interval_seconds=flags["load_adjustment_interval_seconds"],
                              **decode_composite("planner_fpm_sampling", pick("planner_fpm_sampling")),
                              **decode_composite("planner_load_sensitivity", pick("planner_load_sensitivity")),
                              load_predictor=predictor)
        hardware = {role: _pick_sku(space, mode, role, selection) for role in roles_of(mode)}
        return cls(mode, backend, _build(Context, pinned), _build(HostOffload, pinned), parallel, engines, router,
                   planner, precision, hardware)

    # ------------------------------------------------------------ the wire format

    def knobs_label(self) -> str:
        """Precision, batching, router and planner, compactly: what tells two rows of the same shape apart."""
        batch = " ".join(f"{role[0].upper()}:{k.max_num_seqs}/{k.max_num_batched_tokens}"
                         for role, k in self.engines.items())
        r = self.router
        router = f"kv({r.overlap_score_credit},{r.prefill_load_scale},{r.router_temperature})" if r.is_kv else "rr"
        policy = self.planner.policy
        planner = "" if policy == "disabled" else f" {policy if isinstance(policy, str) else 'custom'}"
        return f"{self.precision.label()} {batch} {router}{planner}"

    def to_sample(self) -> dict[str, Any]:
        """The flat unrolled sample, plus the run fields once resolved."""
        out: dict[str, Any] = {"deployment_mode": self.mode, "backend": self.backend, **self.precision.fields()}
        out.update(_as_dict(self.context))
        out.update(self.hardware_fields())
        out.update(_as_dict(self.offload))
        out.update(self.parallel.flat_fields())
        for role, knobs in self.engines.items():
            out.update({f"{role}_{k}": v for k, v in _as_dict(knobs).items()})
        out["router_mode"] = self.router.mode
        if self.router.is_kv:
            out.update(self.router.weights())
            out.update(_as_dict(self.router.admission or Admission()))
        p = self.planner
        out.update({"planner_scaling_policy": p.policy, "enable_throughput_scaling": p.enable_throughput_scaling,
                    "enable_load_scaling": p.enable_load_scaling})
        if p.scales:
            out.update({k: getattr(p, k) for k in _PLANNER_DETAILS})
            if p.load_predictor is not None:
                out.update(p.load_predictor.fields())
        if self.backend_version is not None:
            out["backend_version"] = self.backend_version
        if self.concurrency is not None:
            out["concurrency"] = self.concurrency
        if self.kv_load is not None:
            kv = self.kv_load
            out.update({"kv_load_ratio": kv.ratio, "kv_load_concurrency_capacity": kv.concurrency_capacity,
                        "kv_load_capacity_tokens": kv.capacity_tokens})
            out.update({f"{role}_kv_capacity_tokens": v for role, v in kv.role_capacity_tokens.items()})
        return out

    @classmethod
    def from_sample(cls, sample: Mapping[str, Any]) -> Candidate:
        """Read a flat sample back (the inverse of :meth:`to_sample`)."""
        mode: Mode = sample["deployment_mode"]
        roles = roles_of(mode)
        keys = ("tp", "pp", "attention_dp", "moe_tp", "moe_ep", "replicas")
        if mode == "agg":
            parallel = ParallelConfig.from_dict("agg", {k: sample[k] for k in keys})
        else:
            parallel = ParallelConfig.from_dict("disagg", {r: {k: sample[f"{r}_{k}"] for k in keys} for r in roles})
        engines = {r: _build(EngineKnobs, lambda name, r=r: sample[f"{r}_{name}"]) for r in roles}
        router = Router(sample["router_mode"])
        if router.is_kv:
            router = Router("kv_router", **{k: sample[k] for k in WEIGHT_FIELDS if k in sample},
                            admission=_build(Admission, sample.__getitem__))
        planner = PlannerChoice(sample["planner_scaling_policy"], sample["enable_throughput_scaling"],
                                sample["enable_load_scaling"])
        if planner.scales:
            predictor = LoadPredictorChoice.from_fields(sample) if "load_predictor" in sample else None
            planner = replace(planner, **{k: sample[k] for k in _PLANNER_DETAILS}, load_predictor=predictor)
        kv_load = None
        if "kv_load_ratio" in sample:
            kv_load = KVLoad(sample["kv_load_ratio"], sample["kv_load_capacity_tokens"],
                             sample["kv_load_concurrency_capacity"],
                             {r: sample[f"{r}_kv_capacity_tokens"] for r in roles if f"{r}_kv_capacity_tokens" in sample})
        precision = precision_of(sample["model_name"], sample["quantization"], sample["kv_cache_dtype"])
        hardware = {r: sample.get(sku_field(mode, r)) or sample["hardware_sku"] for r in roles}   # one for all roles
        return cls(mode, sample["backend"], _build(Context, partial(_field_or_default, Context, sample)),
                   _build(HostOffload, sample.__getitem__), parallel, engines, router,
                   planner, precision, hardware, sample.get("backend_version"), sample.get("concurrency"), kv_load)

    def hardware_fields(self) -> dict[str, str]:
        """The GPU types as sample fields: ``hardware_sku`` (agg, or a disagg whose roles share one type) and
        ``prefill_hardware_sku`` / ``decode_hardware_sku`` (disagg)."""
        out = {sku_field(self.mode, role): sku for role, sku in self.hardware.items()}
        if self.hardware_sku is not None:
            out["hardware_sku"] = self.hardware_sku
        return out


def _pick_sku(space: SearchSpace, mode: str, role: str, selection: Mapping[str, Any]) -> str:
    """A role's GPU type: the study's choice, or the one the config allows."""
    name = sku_field(mode, role)
    if name in selection:
        return str(selection[name])
    allowed = space.role_skus(mode)[role]
    if len(allowed) == 1:
        return allowed[0]
    raise SpicaError(f"selection has no value for '{name}' and the config allows {allowed}; pin it or let the "
                     "study choose it")


def _build(cls: type[T], value_of: Callable[[str], Any]) -> T:
    """A flat dataclass with each field read by name (from the search space, or from a sample)."""
    return cls(**{f.name: value_of(f.name) for f in fields(cls)})  # type: ignore[call-arg]


def _field_or_default(cls: type, sample: Mapping[str, Any], name: str) -> Any:
    """A sample's field, or the dataclass default for a field added after the sample was written."""
    if name in sample:
        return sample[name]
    default = next(f.default for f in fields(cls) if f.name == name)
    if default is MISSING:
        raise KeyError(name)
    return default


def _as_dict(value: Any) -> dict[str, Any]:
    """A flat dataclass's fields (shallow: nested values stay as they are)."""
    return {f.name: getattr(value, f.name) for f in fields(value)}


__all__ = ["Candidate", "Context", "HostOffload", "EngineKnobs", "Admission", "Router", "PlannerChoice",
           "LoadPredictorChoice", "KVLoad", "PredictorWinners", "roles_of"]
