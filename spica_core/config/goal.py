"""The ``goal`` section: what a candidate is ranked by, its SLA and how much of the traffic must meet it.

The optimization targets, the SLA, the SLA requirement (``sla_attainment``) and confidence, headroom and
the robust traffic scale.
"""
from __future__ import annotations

from enum import Enum
from typing import Annotated

from pydantic import BeforeValidator, Field, model_validator

from spica_core.config import limits
from spica_core.config.fields import _Model, _at_most, _no_bool
from spica_core.errors import FieldError


class OptimizationTarget(str, Enum):
    throughput = "throughput"
    throughput_per_gpu = "throughput_per_gpu"
    throughput_per_user = "throughput_per_user"
    e2e_latency = "e2e_latency"
    goodput = "goodput"
    goodput_per_gpu = "goodput_per_gpu"
    min_gpus = "min_gpus"
    cost_per_mtok = "cost_per_mtok"
    energy_per_token = "energy_per_token"
    pareto = "pareto"


GOODPUT_TARGETS = frozenset({OptimizationTarget.goodput, OptimizationTarget.goodput_per_gpu})
MINIMIZED_TARGETS = frozenset({OptimizationTarget.e2e_latency, OptimizationTarget.min_gpus,
                               OptimizationTarget.cost_per_mtok, OptimizationTarget.energy_per_token})
COST_TARGETS = frozenset({OptimizationTarget.cost_per_mtok})   # they need goal.gpu_hour_usd
DEFAULT_SLA_ATTAINMENT = 0.9   # the share of requests that must meet an SLA unless goal.sla_attainment says otherwise
DEFAULT_PARETO = (OptimizationTarget.throughput_per_gpu, OptimizationTarget.throughput_per_user)


class SLATarget(_Model):
    ttft_ms: Annotated[float, Field(gt=0)] | None = None
    itl_ms: Annotated[float, Field(gt=0)] | None = None
    e2e_ms: Annotated[float, Field(gt=0)] | None = None

    @property
    def satisfies_goodput(self) -> bool:
        return self.e2e_ms is not None or (self.ttft_ms is not None and self.itl_ms is not None)

    @model_validator(mode="after")
    def _one_form(self) -> SLATarget:
        """Dynamo's replay refuses e2e together with ttft/itl, so a mixed SLA would be scored on part of it."""
        if self.e2e_ms is not None and (self.ttft_ms is not None or self.itl_ms is not None):
            raise FieldError("", "e2e_ms cannot be combined with ttft_ms or itl_ms (Dynamo's replay refuses the "
                             "mix); set either e2e_ms alone, or ttft_ms and/or itl_ms",
                             self.model_dump(exclude_none=True), True)
        return self


class OptimizationGoal(_Model):
    target: OptimizationTarget = OptimizationTarget.throughput
    sla: SLATarget | None = None
    pareto_objectives: list[OptimizationTarget] | None = None
    sla_attainment: Annotated[float, Field(ge=0, le=1), BeforeValidator(_no_bool)] | None = Field(
        default=None, description="the share of requests (rejected ones included) that must meet the SLA at today's "
                                  "traffic; a candidate below it ranks after every one that meets it. Default 0.9 "
                                  "when goal.sla is set; 0: the SLA enters goodput only")
    sla_confidence: Annotated[float, Field(ge=0.5, le=0.99), BeforeValidator(_no_bool)] = Field(
        default=0.5, description="the SLA must hold at this quantile of the candidate's error band on measured "
                                 "GPUs; 0.5 is the point prediction")
    headroom_max: Annotated[float, Field(ge=1, json_schema_extra={"maximum": limits.TRAFFIC_SCALE.maximum}),
                            BeforeValidator(_no_bool), _at_most(limits.TRAFFIC_SCALE)] = Field(
        default=4.0, description="the largest traffic scale headroom looks for")
    headroom_attainment: Annotated[float, Field(gt=0, le=1), BeforeValidator(_no_bool)] | None = Field(
        default=None, description="the share of requests that must meet the SLA for a traffic scale to hold; "
                                  "default: sla_attainment (0.9 when that is 0)")
    robust_scale: Annotated[float, Field(ge=1, json_schema_extra={"maximum": limits.TRAFFIC_SCALE.maximum}),
                            BeforeValidator(_no_bool), _at_most(limits.TRAFFIC_SCALE)] = Field(
        default=1.0, description="rank by the worst score over traffic scales 1 and this (1: off)")
    gpu_hour_usd: dict[str, Annotated[float, Field(gt=0), BeforeValidator(_no_bool)]] | None = Field(
        default=None, description="your price of one GPU-hour in USD, per SKU (e.g. {h200_sxm: 3.5}); needed by "
                                  "target cost_per_mtok, and then for every SKU a candidate can run on. Spica "
                                  "ships no prices")
    calibration: str | None = Field(
        default=None, description="a calibration file written by `spica calibrate` (relative to the config file): "
                                  "measurements on your own GPUs correct the latencies, bands and SLA count of "
                                  "the groups they measured; its content is part of the run's identity")

    @property
    def objectives(self) -> tuple[OptimizationTarget, ...]:
        """The effective objective set: {target}, or the resolved Pareto list."""
        if self.target is OptimizationTarget.pareto:
            return tuple(self.pareto_objectives) if self.pareto_objectives else DEFAULT_PARETO
        return (self.target,)

    @property
    def is_pareto(self) -> bool:
        return self.target is OptimizationTarget.pareto

    @property
    def required_attainment(self) -> float:
        """The share of requests that must meet the SLA for a candidate to meet it (0: no requirement)."""
        return self.sla_attainment or 0.0

    @property
    def headroom_share(self) -> float:
        """The attainment a traffic scale must keep to hold: headroom ≥ 1 exactly when the candidate meets
        the requirement, unless headroom_attainment says otherwise."""
        return self.headroom_attainment or self.required_attainment or DEFAULT_SLA_ATTAINMENT

    @model_validator(mode="after")
    def _rules(self) -> OptimizationGoal:
        if COST_TARGETS & set(self.objectives) and not self.gpu_hour_usd:
            raise FieldError("gpu_hour_usd", "target cost_per_mtok needs your GPU prices: set gpu_hour_usd to "
                             "{SKU: USD per GPU-hour} for every SKU a candidate can run on", None, True)
        if self.sla is None:
            if self.sla_attainment is not None:
                raise FieldError("sla_attainment", "is the share of requests that must meet goal.sla, and goal.sla "
                                 "is not set; add an SLA or remove sla_attainment", self.sla_attainment, True)
            if self.target is OptimizationTarget.min_gpus:
                raise FieldError("sla", "target min_gpus (the fewest GPUs that meet the SLA) needs an SLA: set "
                                 "ttft_ms, itl_ms and/or e2e_ms", None, True)
        elif self.sla_attainment is None:
            self.sla_attainment = DEFAULT_SLA_ATTAINMENT
        if self.pareto_objectives is not None:
            if not self.is_pareto:
                raise FieldError("pareto_objectives", "is only allowed when target is pareto",
                                 [o.value for o in self.pareto_objectives], True)
            objs = self.pareto_objectives
            if len(objs) < 2:
                raise FieldError("pareto_objectives", "needs at least 2 objectives", [o.value for o in objs], True)
            for bad, why in ((OptimizationTarget.pareto, "pareto cannot be a Pareto objective"),
                             (OptimizationTarget.min_gpus, "min_gpus cannot be a Pareto objective: it is a "
                              "requirement search (the fewest GPUs that meet the SLA); use target min_gpus, or "
                              "throughput_per_gpu / goodput_per_gpu on the front")):
                if bad in objs:
                    raise FieldError(f"pareto_objectives[{objs.index(bad)}]", why, bad.value, True)
            if len(set(objs)) != len(objs):
                raise FieldError("pareto_objectives", "objectives must be distinct", [o.value for o in objs], True)
        if GOODPUT_TARGETS & set(self.objectives):
            if self.sla is None or not self.sla.satisfies_goodput:
                raise FieldError("sla", "a goodput objective needs an SLA with e2e_ms, or both ttft_ms and itl_ms",
                                 self.sla.model_dump(exclude_none=True) if self.sla else None, True)
        return self


__all__ = ["OptimizationGoal", "SLATarget", "OptimizationTarget", "GOODPUT_TARGETS", "MINIMIZED_TARGETS",
           "DEFAULT_SLA_ATTAINMENT"]
