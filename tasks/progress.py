"""A one-line progress bar over the evaluation target, with the best score so far (stderr)."""
from __future__ import annotations

import math
import sys
import time

from spica_core.search import Trial


class SweepProgress:
    """Counts unique successful evaluations against the target (§6.1); redraws at most 4×/s."""

    def __init__(self, target: int, pareto: bool, enabled: bool = True):
        self.target = max(1, target)
        self.pareto = pareto
        self.enabled = enabled
        self.done = 0
        self.attempts = 0
        self.best: float | None = None
        self.start = time.monotonic()
        self._last_draw = 0.0
        self._tty = sys.stderr.isatty()

    def __call__(self, trial: Trial) -> None:
        self.count(trial)
        self.draw()

    def count(self, trial: Trial) -> None:
        self.attempts += 1
        if trial.is_evaluated_success:
            self.done += 1
            if trial.score is not None and math.isfinite(trial.score):
                self.best = trial.score if self.best is None else max(self.best, trial.score)

    def draw(self, final: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not final and self._tty and now - self._last_draw < 0.25:
            return
        self._last_draw = now
        frac = min(1.0, self.done / self.target)
        bar = "#" * int(frac * 30)
        best = "-" if self.best is None else f"{self.best:,.4g}"
        label = "first objective" if self.pareto else "score"
        line = (f"[{bar:<30}] {self.done}/{self.target} evaluations ({self.attempts} attempts), "
                f"best {label} {best}, {now - self.start:,.0f}s")
        if self._tty:
            print("\r" + line, end="\n" if final else "", file=sys.stderr, flush=True)
        elif final or self.attempts % 10 == 0:
            print(line, file=sys.stderr, flush=True)
