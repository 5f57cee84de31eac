"""The sub-sweep's forecast loss: weighted log errors of one window's forecast."""
from __future__ import annotations

import math
from typing import Final

# Prefill work N·I and decode work N·O dominate, the means refine.
W_PREFILL: Final = 0.4
W_DECODE: Final = 0.4
W_ISL: Final = 0.1
W_OSL: Final = 0.1


def log_error(predicted: float, actual: float) -> float:
    """|ln(1+p⁺) − ln(1+a⁺)|: scale-free, so a 10 % miss costs the same at any load."""
    return abs(math.log1p(max(predicted, 0.0)) - math.log1p(max(actual, 0.0)))


def window_loss(n_hat: float, i_hat: float, o_hat: float, n: float, i: float, o: float) -> float:
    """Weighted log loss of one window; num_req only counts through the N·I and N·O products."""
    return (W_PREFILL * log_error(n_hat * i_hat, n * i)
            + W_DECODE * log_error(n_hat * o_hat, n * o)
            + W_ISL * log_error(i_hat, i)
            + W_OSL * log_error(o_hat, o))


__all__ = ["log_error", "window_loss"]
