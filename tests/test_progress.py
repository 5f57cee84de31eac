"""The sweep's progress bar off a terminal: a line every 10th attempt and at least every 10 s (tick)."""
from __future__ import annotations

import io
from types import SimpleNamespace

from spica_core.search.progress import EVERY_S, SweepProgress


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def trial(score: float | None = 1.0, ok: bool = True, met: int | None = None) -> SimpleNamespace:
    metrics = {} if met is None else {"num_requests": 100, "goodput_completed_requests": met}
    return SimpleNamespace(is_evaluated_success=ok, score=score, metrics=metrics)


def lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def test_off_a_terminal_every_tenth_attempt_and_every_10_s() -> None:
    clock, out = Clock(), io.StringIO()
    p = SweepProgress(20, pareto=False, clock=clock, stream=out)
    for _ in range(9):
        clock.now += 0.5
        p(trial())
    assert lines(out) == []
    clock.now += 0.5
    p(trial(score=7.0))                      # the 10th attempt
    assert lines(out) == ["[###############               ] 10/20 evaluations (10 attempts), best score 7, 5s"]
    clock.now += EVERY_S - 0.1               # a slow evaluation: just under 10 s since that line
    p(trial(ok=False))
    assert len(lines(out)) == 1
    clock.now += 0.2                         # 10 s since the last line: printed although not a 10th attempt
    p(trial(ok=False))
    assert len(lines(out)) == 2 and lines(out)[-1].endswith("(12 attempts), best score 7, 15s")


def test_tick_prints_while_nothing_completes() -> None:
    clock, out = Clock(), io.StringIO()
    p = SweepProgress(5, pareto=True, clock=clock, stream=out)
    for _ in range(79):                      # called often while waiting: cheap and silent
        clock.now += 0.125
        p.tick()
    assert lines(out) == []
    clock.now += 0.125                       # 10 s since the start
    p.tick()
    p.tick()
    assert lines(out) == ["[                              ] 0/5 evaluations (0 attempts), best first objective -, 10s"]
    clock.now += 5
    p(trial(score=3.0))                      # the line 5 s ago counts: no time line yet
    p.tick()
    assert len(lines(out)) == 1
    clock.now += 5
    p.tick()
    assert lines(out)[-1] == "[######                        ] 1/5 evaluations (1 attempts), best first objective 3, 20s"
    p.draw(final=True)
    assert len(lines(out)) == 3


def test_disabled_prints_nothing() -> None:
    clock, out = Clock(), io.StringIO()
    p = SweepProgress(5, pareto=False, enabled=False, clock=clock, stream=out)
    clock.now += 100
    p.tick()
    for _ in range(10):
        p(trial())
    p.draw(final=True)
    assert out.getvalue() == ""
    assert (p.done, p.best) == (10, 1.0)     # it still counts: the flow reads the tally either way
    shown = SweepProgress(5, pareto=False, enabled=True, clock=clock, stream=out)
    shown(trial())
    shown.draw(final=True)                   # the same calls, enabled: a line
    assert lines(out) == ["[######                        ] 1/5 evaluations (1 attempts), best score 1, 0s"]


def test_on_a_terminal_redraws_in_place_at_most_4_per_second() -> None:
    clock, tty = Clock(), Tty()
    p = SweepProgress(4, pareto=False, clock=clock, stream=tty)
    p(trial(score=2.0))
    p(trial(score=1.0))                      # same instant: not redrawn
    clock.now += 0.3
    p.tick()                                 # the clock moves on screen while waiting
    p.draw(final=True)
    text = tty.getvalue()
    assert text.count("\r") == 3 and text.endswith("2/4 evaluations (2 attempts), best score 2, 0s\n")
    assert "\n" not in text[:-1]


def test_default_stream_is_stderr_at_draw_time(capsys) -> None:  # type: ignore[no-untyped-def]
    clock = Clock()
    p = SweepProgress(1, pareto=False, clock=clock)
    clock.now += EVERY_S
    p.tick()
    assert capsys.readouterr().err.startswith("[                              ] 0/1 evaluations")


def test_the_bar_does_not_go_through_print(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    """Inside a Prefect run with log_prints (the sweep flow), print() sends stderr lines to the run's log
    (prefect.logging.loggers.print_as_log) instead of the terminal, so the bar writes to the stream itself."""
    import builtins

    def no_print(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("the progress bar used print()")

    clock = Clock()
    p = SweepProgress(1, pareto=False, clock=clock)
    monkeypatch.setattr(builtins, "print", no_print)
    clock.now += EVERY_S
    p.tick()
    p(trial())
    p.draw(final=True)
    assert len(capsys.readouterr().err.splitlines()) == 2


def test_the_best_score_counts_only_candidates_that_meet_the_sla_requirement() -> None:
    clock, out = Clock(), io.StringIO()
    p = SweepProgress(3, pareto=False, required_attainment=0.9, clock=clock, stream=out)
    p.count(trial(score=500.0, met=85))      # the highest score misses the requirement
    p.count(trial(score=300.0, met=95))
    assert p.best == 300.0 and "best score meeting the SLA 300" in p.line()
