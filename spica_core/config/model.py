"""SmartSearchConfig: the user's YAML as typed, validated, normalised objects.

Every model forbids unknown keys. Loading turns pydantic's errors into :class:`Issue` records
that name the YAML path, the offending value and what is allowed (``issues.py``). The sections live in
their own modules (``search_space.py``, ``workload.py``, ``goal.py``, ``sweep.py``); this one joins them,
checks the rules between sections and loads a file.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, model_validator

from spica_core.config import limits
from spica_core.config.fields import _Model
from spica_core.config.goal import OptimizationGoal
from spica_core.config.issues import issues_from
from spica_core.config.search_space import SearchSpace
from spica_core.config.sweep import SweepConfig, SweepPolicy
from spica_core.config.workload import Workload
from spica_core.config.yaml_loading import load_yaml
from spica_core.errors import ConfigError, FieldError, Issue


class SmartSearchConfig(_Model):
    search_space: SearchSpace
    workload: Workload
    goal: OptimizationGoal = Field(default_factory=OptimizationGoal)
    sweep: SweepConfig = Field(default_factory=SweepConfig)

    @model_validator(mode="before")
    @classmethod
    def _default_pareto_kv_load_ratio(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        goal, workload = data.get("goal"), data.get("workload")
        if (isinstance(goal, dict) and goal.get("target") == "pareto" and isinstance(workload, dict)
                and workload.get("trace_path") is None
                and all(workload.get(k) is None for k in ("request_rate", "concurrency", "kv_load_ratio"))):
            data = {**data, "workload": {**workload, "kv_load_ratio": [0.0, 1.0]}}
        return data

    @model_validator(mode="after")
    def _rules(self) -> SmartSearchConfig:
        most = self.search_space.gpu_budget * limits.MAX_NUM_SEQS_PER_GPU
        for name in ("concurrency", "replay_concurrency"):
            value = getattr(self.workload, name)
            if value is not None and value > most:
                derived = f"gpu_budget {self.search_space.gpu_budget} × {limits.MAX_NUM_SEQS_PER_GPU}"
                raise FieldError(f"workload.{name}", limits.over(limits.IN_FLIGHT, most, derived), value, True)
        if self.workload.kv_load_range is not None and not self.goal.is_pareto:
            raise FieldError("workload.kv_load_ratio", "a [min, max] range is only allowed when goal.target is "
                             "pareto; give a single ratio", self.workload.kv_load_ratio, True)
        prices = self.goal.gpu_hour_usd
        unpriced = [sku for sku in self.search_space.skus if sku not in (prices or {})]
        if prices is not None and unpriced:
            raise FieldError("goal.gpu_hour_usd", f"has no price for {', '.join(unpriced)}, which candidates may run "
                             "on (search_space.hardware_sku and the role lists); priced: "
                             f"{', '.join(sorted(prices)) or 'none'}", prices, True)
        if self.sweep.policy is SweepPolicy.thorough and self.workload.kv_load_range is not None:
            raise FieldError("sweep.policy", "thorough enumerates a finite space and rejects the continuous "
                             "workload.kv_load_ratio range; use policy rapid or a single ratio", "thorough", True)
        return self

    # ------------------------------------------------------------ loading

    @classmethod
    def from_yaml(cls, path: str | Path) -> SmartSearchConfig:
        """Parse and validate a YAML file; raises ConfigError listing every problem."""
        path = Path(path)
        data = load_yaml(path)
        config = cls.from_dict(data, source=str(path))
        config.check_files(path.parent)
        return config

    @classmethod
    def from_dict(cls, data: Any, source: str = "<config>") -> SmartSearchConfig:
        if not isinstance(data, dict):
            raise ConfigError(source, [Issue("", "the config must be a mapping with search_space, workload, "
                                             "goal and sweep", data, True)])
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(source, issues_from(exc, data, cls)) from None

    def trace_file(self, base_dir: str | Path) -> Path | None:
        """The trace path resolved against the config file's folder (absolute paths unchanged)."""
        if self.workload.trace_path is None:
            return None
        p = Path(self.workload.trace_path).expanduser()
        return p if p.is_absolute() else Path(base_dir) / p

    def calibration_file(self, base_dir: str | Path) -> Path | None:
        """``goal.calibration`` resolved against the config file's folder (absolute paths unchanged)."""
        if self.goal.calibration is None:
            return None
        p = Path(self.goal.calibration).expanduser()
        return p if p.is_absolute() else Path(base_dir) / p

    def check_files(self, base_dir: str | Path) -> None:
        trace = self.trace_file(base_dir)
        if trace is not None and not trace.is_file():
            raise ConfigError("config", [Issue("workload.trace_path", f"trace file not found: {trace}",
                                               self.workload.trace_path, True)])

    def normalised(self) -> dict[str, Any]:
        """The canonical JSON-able form (defaults filled, duplicates removed, injections applied) that a run's
        identity and its fingerprints are made of; where evaluations run (``sweep.cluster``) and where the
        calibration file is (``goal.calibration``: its content joins the identity instead) are left out."""
        return self.model_dump(mode="json", exclude={"sweep": {"cluster"}, "goal": {"calibration"}})


__all__ = ["SmartSearchConfig"]
