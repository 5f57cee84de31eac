"""Work done ahead of a sweep's first model ask: jax and Vizier imported (:func:`warm_up`), and GP-UCB-PE's code
traced on a made-up study (:func:`trace_gp`), once per process, on a thread of its own that holds the model-ask
lock, so the sweep's first ask finds the code traced or waits for it.
"""
from __future__ import annotations

import logging
import threading

import numpy as np

from spica_core.search.jax_setup import MODEL_ASK, _runtime
from spica_core.search.study import Study
from spica_core.space.params import Param

_TRACING: list[threading.Thread] = []  # the process's one tracing thread, once started


def warm_up(trace: bool = False) -> threading.Thread | None:
    """Import jax and Vizier now (seconds), e.g. while something else starts. ``trace``: then also trace
    GP-UCB-PE's code (:func:`trace_gp`) on a thread, once per process, and return that thread; it holds
    :data:`MODEL_ASK`, so the sweep's first model ask finds the code traced or waits for it."""
    _runtime()
    if not trace:
        return None
    if not _TRACING:
        # Not a daemon: the interpreter waits for it at exit (a daemon thread stopped inside jax aborts the process).
        _TRACING.append(threading.Thread(target=_trace_quietly, name="spica-trace-gp"))
        _TRACING[0].start()
    return _TRACING[0]


def _trace_quietly() -> None:
    """:func:`trace_gp`, best effort: what fails there fails again in the sweep's first model ask, with that
    stage's message, instead of as a thread's traceback on the terminal."""
    try:
        trace_gp()
    except Exception:  # noqa: BLE001 - see the docstring
        logging.getLogger(__name__).debug("tracing GP-UCB-PE ahead failed", exc_info=True)


def trace_gp() -> None:
    """One GP-UCB-PE ask (a UCB pick, then exploration picks) on a small made-up study with the padded shapes of
    a single-objective branch's first model asks: jax traces per process and keeps what it traced by shape, not
    by study, so the sweep's own first ask then costs what a steady one does (about 1 s, not 3-9 s of tracing
    while the workers wait). Its picks are thrown away."""
    params = [Param("x", "float", bounds=(0.0, 1.0)), Param("n", "discrete", values=(1, 2, 4, 8)),
              Param("c", "categorical", values=("a", "b", "c"))]
    rng = np.random.default_rng(0)
    pool = [{"x": float(rng.random()), "n": int(rng.choice([1, 2, 4, 8])), "c": str(rng.choice(["a", "b", "c"]))}
            for _ in range(64)]
    study = Study(params, seed=0)
    # Its ARD fit need not converge, only pass every count of L-BFGS-B's stored corrections (at most 10), each of
    # which jax traces once: 12 iterations, not the 100 of four trials, about 0.5 s less (tested: nothing is left
    # to trace).
    study._ard_cap = 12
    for raw in pool[:4]:
        study.complete(raw, {"objective": raw["x"] * raw["n"] + (raw["c"] == "b")})
    allowed = [False] * 6 + [True] * (len(pool) - 6)
    with MODEL_ASK:
        study.suggest(4, step=1, pool=pool, allowed=allowed, pending=pool[4:6], exploit=True)


__all__ = ["trace_gp", "warm_up"]
