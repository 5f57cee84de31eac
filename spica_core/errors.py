"""Errors a user can act on. The CLI prints them without a traceback and exits 2."""
from __future__ import annotations

import reprlib
from dataclasses import dataclass
from typing import Any

EXCERPT_CHARS = 80  # a message shows at most this much of an offending value

_excerpt = reprlib.Repr()
_excerpt.maxstring = _excerpt.maxother = _excerpt.maxlong = EXCERPT_CHARS
_excerpt.maxlist = _excerpt.maxtuple = _excerpt.maxdict = _excerpt.maxset = 8
_excerpt.maxlevel = 3


def excerpt(value: Any) -> str:
    """A short repr: a huge or deeply nested value is cut, never echoed whole."""
    text = _excerpt.repr(value)
    return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS - 3] + "..."


class SpicaError(Exception):
    """Base of every error caused by the user's input or environment (never a bug)."""


@dataclass(frozen=True)
class Issue:
    """One problem in a config: where (YAML path), what was found, what is allowed."""

    path: str
    message: str
    value: Any = None
    has_value: bool = False

    def __str__(self) -> str:
        shown = f" (got {excerpt(self.value)})" if self.has_value else ""
        return f"{self.path or '<root>'}: {self.message}{shown}"


class ConfigError(SpicaError):
    """The config (or a file it names) is invalid; carries every problem found."""

    def __init__(self, source: str, issues: list[Issue]):
        self.source = source
        self.issues = issues
        lines = "\n".join(f"  - {issue}" for issue in issues)
        super().__init__(f"{source}: {len(issues)} problem(s)\n{lines}")


class FieldError(ValueError):
    """Raised inside model validators to point at a field below the model (``rel_path``)."""

    def __init__(self, rel_path: str, message: str, value: Any = None, has_value: bool = False):
        super().__init__(message)
        self.rel_path = rel_path
        self.message = message
        self.value = value
        self.has_value = has_value


class NoPerfDatabaseError(SpicaError):
    """aiconfigurator-core has no performance data for this (SKU, backend)."""


class NoViableParallelConfigError(SpicaError):
    """No parallel configuration is legal and KV-feasible within the GPU budget."""


class UnknownModelError(SpicaError):
    """The model id is not bundled with aiconfigurator-core and is not a local folder."""


class UnknownSystemError(SpicaError):
    """The hardware SKU is not an aiconfigurator-core system."""


class InfeasibleKVCapacityError(SpicaError):
    """The candidate's shape or batching leaves no KV cache (reported infeasible, never replayed)."""


class OverBudgetError(SpicaError):
    """The candidate uses more GPUs than ``gpu_budget`` (reported infeasible, never replayed)."""


class RejectedEngineArgsError(SpicaError):
    """The runtime's normaliser rejected a payload; the message is the runtime's."""


class PlannerConfigError(SpicaError):
    """The candidate's planner fields are not a valid planner configuration (Dynamo's PlannerConfig rules)."""


class GoodputContractError(SpicaError):
    """A goodput objective was asked for but the report carries no goodput (never fall back to latency)."""


class RunDirError(SpicaError):
    """The run folder cannot hold this run (another run's artifacts, or not a folder)."""


class TraceError(SpicaError):
    """The trace file breaks the mooncake format or the model's limits; names the file, line and field."""


class CalibrationFileError(SpicaError):
    """A calibration file (``--calibration``, ``goal.calibration``) is missing, unreadable or not one
    ``spica calibrate`` wrote."""


class CalibrationInputError(SpicaError):
    """The measurements ``spica calibrate`` reads (CSV rows in the columns of aiconfigurator-core's
    silicon_sample.csv) break the format; names the file and line (``FILE:LINE: what is wrong``)."""


class BandFileError(SpicaError):
    """A shipped accuracy file (spica_core/evaluate/data/bands.json or serving.json, or the SPICA_BANDS_FILE /
    SPICA_SERVING_FILE that replaces it) is missing or corrupt."""


class ManifestError(SpicaError):
    """A candidate cannot be expressed as a DynamoGraphDeployment; lists every field that cannot."""


class WorkerStoppedError(SpicaError):
    """An evaluation worker was stopped by a signal from outside (not a crash of its candidate)."""


class OptimizerStoppedError(SpicaError):
    """The optimizer process (the sweep's studies) ended while the search still needed it: killed, or out of
    memory. Finished evaluations are kept; re-running the sweep resumes."""


class ClusterError(SpicaError):
    """The cluster in sweep.cluster (--cluster) cannot be reached, has no usable worker, or went away."""


class WorkerLost(Exception):
    """A cluster worker process went away while evaluating (its candidate is evaluated again, once)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class RemoteTaskError(Exception):
    """An evaluation task raised on a cluster worker (not a loss): its candidate is failed with this reason."""

