"""A one-line progress bar over the evaluation target, with the best score so far (stderr).

On a terminal the bar is redrawn in place (at most 4×/s). Off a terminal (a log file, CI, ``| tee``) it
prints a whole line on every 10th attempt and whenever :data:`EVERY_S` seconds have passed since the last
line, so a sweep whose evaluations are slow still shows life. ``draw`` runs only when a trial completes:
the search loop should also call :meth:`SweepProgress.tick` while it waits for results (cheap; any rate).
The bar is written to the stream directly, so it reaches the terminal from inside a Prefect flow run too.
"""
from __future__ import annotations

import math
import sys
import time
from typing import TYPE_CHECKING, Callable, TextIO

from spica_core.evaluate.scoring import meets_requirement

if TYPE_CHECKING:
    from spica_core.search import Trial

EVERY_S = 10.0       # off a terminal: the longest gap between two lines
EVERY_N = 10         # off a terminal: a line every N attempts, however fast they come
REDRAW_S = 0.25      # on a terminal: the shortest gap between two redraws


class SweepProgress:
    """Counts unique successful evaluations against the target and draws the bar on ``stream``.

    ``clock`` (seconds, monotonic) and ``stream`` (default: ``sys.stderr`` at each draw) are for tests.
    """

    def __init__(self, target: int, pareto: bool, enabled: bool = True, *, required_attainment: float = 0.0,
                 clock: Callable[[], float] = time.monotonic, stream: TextIO | None = None):
        self.target = max(1, target)
        self.pareto = pareto
        self.required = required_attainment   # the best score counts only candidates that meet the SLA requirement
        self.enabled = enabled
        self.done = 0
        self.attempts = 0
        self.best: float | None = None
        self._clock = clock
        self._stream = stream
        self.start = clock()
        self._last_draw = -math.inf   # the last redraw on a terminal
        self._last_line = self.start  # the last line off a terminal (the first comes EVERY_S after the start)
        self._tty = self._out().isatty()

    def _out(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    def __call__(self, trial: Trial) -> None:
        self.count(trial)
        self.draw()

    def count(self, trial: Trial) -> None:
        self.attempts += 1
        if trial.is_evaluated_success:
            self.done += 1
            meets = meets_requirement(self.required, trial.metrics)
            if trial.score is not None and math.isfinite(trial.score) and meets:
                self.best = trial.score if self.best is None else max(self.best, trial.score)

    def draw(self, final: bool = False) -> None:
        """After a trial completed (or, ``final``, at the end): redraw, or off a terminal print a line when due."""
        if not self.enabled:
            return
        now = self._clock()
        if self._tty:
            if final or now - self._last_draw >= REDRAW_S:
                self._redraw(now, final)
        elif final or self.attempts % EVERY_N == 0 or now - self._last_line >= EVERY_S:
            self._print_line(now)

    def tick(self) -> None:
        """Call while waiting for results, as often as convenient: off a terminal a line once :data:`EVERY_S`
        seconds have passed since the last one, on a terminal the elapsed time is redrawn (at most 4×/s)."""
        if not self.enabled:
            return
        now = self._clock()
        if self._tty:
            if now - self._last_draw >= REDRAW_S:
                self._redraw(now, final=False)
        elif now - self._last_line >= EVERY_S:
            self._print_line(now)

    def line(self, now: float | None = None) -> str:
        now = self._clock() if now is None else now
        frac = min(1.0, self.done / self.target)
        bar = "#" * int(frac * 30)
        best = "-" if self.best is None else f"{self.best:,.4g}"
        label = "first objective" if self.pareto else "score"
        if self.required > 0:
            label += " meeting the SLA"
        return (f"[{bar:<30}] {self.done}/{self.target} evaluations ({self.attempts} attempts), "
                f"best {label} {best}, {now - self.start:,.0f}s")

    def _redraw(self, now: float, final: bool) -> None:
        self._last_draw = now
        self._write("\r" + self.line(now) + ("\n" if final else ""))

    def _print_line(self, now: float) -> None:
        self._last_line = now
        self._write(self.line(now) + "\n")

    def _write(self, text: str) -> None:
        # Not print(): inside a flow or task run with log_prints (the sweep flow has it), Prefect's patched print
        # sends stderr lines to the run's log instead of the terminal (prefect/logging/loggers.py, print_as_log).
        out = self._out()
        out.write(text)
        out.flush()
