"""The throughput loop: forecast the next interval's load and size the pools from engine capacity."""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from spica_core.planner.budget import Pools
from spica_core.planner.estimates import Estimator
from spica_core.planner.settings import PlannerSettings, RoleCapability


class Predictor(Protocol):
    def add_data_point(self, value: float) -> None: ...
    def predict_next(self) -> float: ...


PredictorFactory = Callable[[Mapping[str, Any], float], Predictor]


def default_predictor_factory(fields: Mapping[str, Any], interval_s: float) -> Predictor:
    """The candidate's load-predictor family; imported on first use (the forecasting libraries are heavy)."""
    from spica_core.predictors import make_predictor

    return make_predictor(dict(fields), interval_s)


class ThroughputLoop:
    """Forecast requests, ISL and OSL of the next interval, then demand / per-engine rps per pool.

    An unready pass model pins the counts (or, in hybrid mode, the load loop's floor) at the current ones.
    """

    def __init__(self, settings: PlannerSettings, caps: Mapping[str, RoleCapability], estimator: Estimator,
                 pools: Pools, predictor_factory: PredictorFactory):
        self.agg = settings.mode == "agg"
        self.hybrid = settings.enable_load_scaling
        self.ttft_ms, self.itl_ms = settings.ttft_ms, settings.itl_ms
        self.max_step = settings.max_throughput_scaling_replicas
        self.caps = dict(caps)
        self.est = estimator
        self.pools = pools
        self.predictors = {k: predictor_factory(settings.predictor, settings.throughput_interval_s)
                           for k in ("num_req", "isl", "osl")}
        self.last_isl = 0.0
        self.last_osl = 0.0
        self.seen_traffic = False

    def targets(self, window: Mapping[str, Any] | None, ready: Mapping[str, int]) -> dict[str, int] | None:
        """Counts for the interval that ``window`` (the traffic since the last run) precedes; None without traffic."""
        if not window or float(window.get("duration_s") or 0) <= 0:
            return None
        num_req = float(window.get("num_req") or 0)
        isl, osl = float(window.get("avg_isl") or 0), float(window.get("avg_osl") or 0)
        self.est.observe_traffic(window)
        self.predictors["num_req"].add_data_point(num_req)
        if num_req > 0:
            self.last_isl, self.last_osl, self.seen_traffic = isl, osl, True
        elif self.seen_traffic:
            isl, osl = self.last_isl, self.last_osl  # an idle interval keeps the last request shape
        for key, v in (("isl", isl), ("osl", osl)):
            if math.isfinite(v):
                self.predictors[key].add_data_point(v)
        pred_n = max(0.0, float(self.predictors["num_req"].predict_next()))
        pred_isl = float(self.predictors["isl"].predict_next())
        pred_osl = float(self.predictors["osl"].predict_next())
        demand = pred_n / float(window["duration_s"])
        min_ep = self.pools.min_endpoint
        out: dict[str, int] = {}
        not_ready = False
        for r in ready:
            rps = self.engine_rps(r, pred_isl, pred_osl)
            if rps is None or rps <= 0:
                not_ready = True
                out[r] = ready[r]
            else:
                out[r] = max(math.ceil(demand / rps), min_ep)
        if not_ready and not self.agg:
            out = dict(ready)
        if not_ready and self.hybrid:
            return dict(ready)  # hybrid: an unready model pins the floor at the current count
        k = self.max_step
        for r in ready:
            out[r] = max(min(max(out[r], max(0, ready[r] - k)), ready[r] + k), min_ep)
        return self.pools.fit_ceiling(ready, out)

    def engine_rps(self, role: str, pred_isl: float, pred_osl: float) -> float | None:
        """Requests/s one engine sustains at the SLA (highest-rps point if no batch meets it)."""
        f = self.est.models[role]
        if not f.ready:
            return None
        cap = self.caps[role]
        M, acc = cap.max_num_batched_tokens, self.est.accept()
        isl = math.ceil(pred_isl)
        osl = max(1, math.ceil(pred_osl))
        if isl <= 0:
            return None
        pisl = max(1, math.ceil(isl * (1 - self.est.kv_hit())))
        ctx = max(1, isl + osl // 2)
        kind = "agg" if self.agg else role
        if kind == "prefill":
            B = 1 if pisl > M else min(cap.max_num_seqs, M // pisl)
        else:
            B = min(cap.max_num_seqs, cap.max_kv_tokens // ctx)
            if kind == "agg":
                B = min(B, max(1, M - 1))
        if B < 1:
            return None
        sizes = list(range(1, B + 1)) if B <= 128 else sorted({max(1, round(1 + i * (B - 1) / 127))
                                                                for i in range(128)})
        best: tuple[bool, float] | None = None
        for b in sizes:
            if kind == "prefill":
                tokens = b * pisl
                ttft = sum(f(min(M, tokens - i), 0, 0) or 0.0 for i in range(0, tokens, M))
                if ttft <= 0:
                    continue
                rps, ok = b / (ttft / 1000.0), ttft <= self.ttft_ms
            elif kind == "decode":
                t = f(0, b, b * ctx)
                if t is None or t <= 0:
                    continue
                itl = t / acc
                rps, ok = b / (osl * itl / 1000.0), itl <= self.itl_ms
            else:
                pp = math.ceil(b * acc * pisl / osl)
                if pp > M - b:
                    continue
                t = f(min(M, pp), b, b * ctx)
                if t is None or t <= 0:
                    continue
                itl = t / acc
                need = pp + pisl
                ttft = sum(f(min(M, need - i), b, b * ctx) or 0.0 for i in range(0, need, M))
                rps, ok = b / (osl * itl / 1000.0), ttft <= self.ttft_ms and itl <= self.itl_ms
            key = (ok, rps)
            if best is None or key > best:
                best = key
        return best[1] if best else None


__all__ = ["Predictor", "PredictorFactory", "default_predictor_factory", "ThroughputLoop"]
