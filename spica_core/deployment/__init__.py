"""The typed deployment every stage speaks, as ``pyvizier`` is for Vizier: a candidate, its context and knobs.

It sits below the stages that pass it around (planner, evaluate, search, emit), so none of them has to
import another to name a candidate.
"""
from spica_core.deployment.candidate import (
    Admission, Candidate, Context, EngineKnobs, HostOffload, KVLoad, LoadPredictorChoice, PlannerChoice, Router,
    roles_of,
)

__all__ = ["Admission", "Candidate", "Context", "EngineKnobs", "HostOffload", "KVLoad", "LoadPredictorChoice",
           "PlannerChoice", "Router", "roles_of"]
