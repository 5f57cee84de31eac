"""Optimizer parameters: the small typed description of one study dimension (Vizier-agnostic).

Branches and projection produce these; the study turns them into a Vizier search space; the
thorough policy enumerates them. Values are decoded back with :meth:`Param.decode`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

ParamKind = Literal["categorical", "discrete", "float"]


@dataclass(frozen=True)
class Param:
    """One dimension. ``categorical`` values are strings; ``discrete`` values are sorted numbers."""

    name: str
    kind: ParamKind
    values: tuple[Any, ...] = ()           # categorical / discrete
    bounds: tuple[float, float] | None = None  # float
    log_scale: bool = False
    default: Any = None
    is_int: bool = False                    # discrete values decode to int
    entries: tuple[Any, ...] = field(default=(), compare=False)  # composite knobs: index string -> entry

    def decode(self, raw: Any) -> Any:
        """Turn what the optimizer returned into the knob's value."""
        if self.entries:
            return self.entries[int(raw)]
        if self.kind == "discrete":
            return int(round(float(raw))) if self.is_int else float(raw)
        if self.kind == "float":
            return float(raw)
        return raw
