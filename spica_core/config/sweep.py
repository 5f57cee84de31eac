"""The ``sweep`` section: how the search runs (rounds, candidates per round, policy, algorithm, seed) and where.

It also holds the one parser of a cluster address (``sweep.cluster``), which the evaluator shares.
"""
from __future__ import annotations

import re
from enum import Enum
from typing import Annotated

from pydantic import AfterValidator, Field, model_validator

from spica_core.config import limits
from spica_core.config.fields import _Model, _float_upto, _int_upto
from spica_core.errors import FieldError


class SweepPolicy(str, Enum):
    rapid = "rapid"
    thorough = "thorough"


class VizierAlgorithm(str, Enum):
    DEFAULT = "DEFAULT"  # GP-UCB-PE
    GAUSSIAN_PROCESS_BANDIT = "GAUSSIAN_PROCESS_BANDIT"
    RANDOM_SEARCH = "RANDOM_SEARCH"
    QUASI_RANDOM_SEARCH = "QUASI_RANDOM_SEARCH"


CLUSTER_ADDRESS = re.compile(r"^(tcp|ray)://(\[[0-9A-Fa-f:.]+\]|[^\s/:\[\]]+):(\d{1,5})$")
CLUSTER_FORMS = "tcp://HOST:PORT (a Dask scheduler) or ray://HOST:PORT (a Ray head); an IPv6 host in brackets"


def parse_cluster_address(text: str) -> tuple[str, str, int]:
    """(scheme, host, port) of a cluster address, the one parser for the config and the evaluator."""
    match = CLUSTER_ADDRESS.fullmatch(str(text).strip())
    if match is None or not 0 < int(match.group(3)) < 65536:
        raise ValueError(f"must be {CLUSTER_FORMS}")
    return match.group(1), match.group(2).strip("[]"), int(match.group(3))


def _cluster_address(value: str) -> str:
    parse_cluster_address(value)
    return value


class SweepConfig(_Model):
    max_rounds: _int_upto(limits.MAX_ROUNDS) = 20
    parallel_evals: _int_upto(limits.PARALLEL_EVALS) | None = Field(
        default=None, description="evaluation processes; None: this machine's cores, at most 16")
    candidates_per_round: _int_upto(limits.CANDIDATES_PER_ROUND) | None = None
    max_eval_seconds: _float_upto(limits.EVAL_SECONDS) | None = 600.0
    seed: _int_upto(limits.SEED, minimum=0) = 0
    policy: SweepPolicy = SweepPolicy.rapid
    algorithm: VizierAlgorithm = VizierAlgorithm.DEFAULT
    cluster: Annotated[str, AfterValidator(_cluster_address)] | None = Field(
        default=None, json_schema_extra={"pattern": CLUSTER_ADDRESS.pattern}, description="run the evaluations on an existing cluster: tcp://HOST:PORT (a Dask "
                                            "scheduler) or ray://HOST:PORT (a Ray head); where is not what, so it "
                                            "is not part of the run's identity")

    @property
    def per_round(self) -> int:
        """Fixed by the config alone (never by the machine), so a run's search is the same everywhere."""
        return self.candidates_per_round or self.parallel_evals or limits.DEFAULT_PER_ROUND

    @property
    def workers(self) -> int:
        """Local evaluation processes: never more than a round can keep busy or this machine has cores."""
        return min(self.parallel_evals or limits.DEFAULT_PER_ROUND, self.per_round, limits.machine_cores())

    @model_validator(mode="after")
    def _bounded(self) -> SweepConfig:
        total = self.max_rounds * self.per_round
        if total > limits.EVALUATIONS.maximum:
            raise FieldError("max_rounds", f"{self.max_rounds} rounds × {self.per_round} per round = {total:,} "
                             f"{limits.over(limits.EVALUATIONS)}", self.max_rounds, True)
        return self


__all__ = ["SweepConfig", "SweepPolicy", "VizierAlgorithm"]
