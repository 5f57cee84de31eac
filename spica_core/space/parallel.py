"""Parallel configurations: worker shapes, replicas and the derived ``strategy`` / ``used_gpus``.

These small frozen value types are what enumeration produces, projection selects, the unroller
flattens and the replay builder reads. They are hashable so they can key caches.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Mode = Literal["agg", "disagg"]


@dataclass(frozen=True, order=True)
class Shape:
    """One worker's parallel layout. A worker spans ``tp × attention_dp`` GPUs (pp is always 1)."""

    tp: int
    attention_dp: int = 1
    moe_tp: int = 1
    moe_ep: int = 1
    pp: int = 1

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.attention_dp

    @property
    def strategy(self) -> str:
        """tp / tep / dep / dtp; ``mixed`` for anything enumeration never emits."""
        if self.moe_tp == 1 and self.moe_ep == 1:
            return "tp" if self.attention_dp == 1 else "mixed"
        if self.attention_dp == 1 and self.moe_tp == 1 and self.moe_ep > 1:
            return "tep"
        if self.tp == 1 and self.attention_dp > 1 and self.moe_tp == 1 and self.moe_ep > 1:
            return "dep"
        if self.attention_dp == 1 and self.moe_tp > 1 and self.moe_ep == 1:
            return "tp"
        if self.tp == 1 and self.attention_dp > 1 and self.moe_tp > 1 and self.moe_ep == 1:
            return "dtp"
        return "mixed"

    @property
    def attention_mode(self) -> str:
        """``dp`` if attention is data-parallel, else ``tp`` (a one-GPU shape is ``tp``)."""
        return "dp" if self.attention_dp > 1 else "tp"

    @property
    def ffn_mode(self) -> str:
        """``ep`` if experts are sharded by expert parallelism, else ``tp``."""
        return "ep" if self.moe_ep > 1 else "tp"

    @property
    def is_moe_sharded(self) -> bool:
        return self.moe_tp * self.moe_ep > 1

    def fields(self) -> dict[str, Any]:
        return {"tp": self.tp, "pp": self.pp, "attention_dp": self.attention_dp,
                "moe_tp": self.moe_tp, "moe_ep": self.moe_ep, "strategy": self.strategy}

    def sort_key(self) -> tuple[int, int, int, int, int]:
        return (self.tp, self.pp, self.attention_dp, self.moe_tp, self.moe_ep)


@dataclass(frozen=True, order=True)
class RoleConfig:
    """A shape and how many workers of it run."""

    shape: Shape
    replicas: int = 1

    @property
    def gpus(self) -> int:
        return self.shape.gpus * self.replicas

    def to_dict(self) -> dict[str, int]:
        s = self.shape
        return {"tp": s.tp, "attention_dp": s.attention_dp, "moe_tp": s.moe_tp, "moe_ep": s.moe_ep,
                "pp": s.pp, "replicas": self.replicas}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RoleConfig:
        return cls(Shape(tp=int(d["tp"]), attention_dp=int(d.get("attention_dp", 1)),
                         moe_tp=int(d.get("moe_tp", 1)), moe_ep=int(d.get("moe_ep", 1)), pp=int(d.get("pp", 1))),
                   int(d.get("replicas", 1)))


@dataclass(frozen=True)
class ParallelConfig:
    """A whole deployment's parallel layout: one aggregated role, or a prefill and a decode role."""

    mode: Mode
    agg: RoleConfig | None = None
    prefill: RoleConfig | None = None
    decode: RoleConfig | None = None

    def __post_init__(self) -> None:
        if self.mode == "agg" and (self.agg is None or self.prefill or self.decode):
            raise ValueError("an agg ParallelConfig has exactly the agg role")
        if self.mode == "disagg" and (self.agg is not None or self.prefill is None or self.decode is None):
            raise ValueError("a disagg ParallelConfig has exactly the prefill and decode roles")

    @property
    def roles(self) -> dict[str, RoleConfig]:
        if self.mode == "agg":
            assert self.agg is not None
            return {"agg": self.agg}
        assert self.prefill is not None and self.decode is not None
        return {"prefill": self.prefill, "decode": self.decode}

    @property
    def used_gpus(self) -> int:
        return sum(r.gpus for r in self.roles.values())

    @property
    def shapes(self) -> tuple[Shape, ...]:
        return tuple(r.shape for r in self.roles.values())

    def sort_key(self) -> tuple[Any, ...]:
        """The stable tie-break key: (tp, pp, dp, moe_tp, moe_ep, replicas), prefill then decode."""
        return tuple(x for r in self.roles.values() for x in (*r.shape.sort_key(), r.replicas))

    def to_dict(self) -> dict[str, Any]:
        """The YAML ``parallel_configs`` entry form (also the JSON form of ``spica space --json``)."""
        if self.mode == "agg":
            assert self.agg is not None
            return self.agg.to_dict()
        assert self.prefill is not None and self.decode is not None
        return {"prefill": self.prefill.to_dict(), "decode": self.decode.to_dict()}

    @classmethod
    def from_dict(cls, mode: Mode, d: dict[str, Any]) -> ParallelConfig:
        if mode == "agg":
            return cls("agg", agg=RoleConfig.from_dict(d))
        return cls("disagg", prefill=RoleConfig.from_dict(d["prefill"]), decode=RoleConfig.from_dict(d["decode"]))

    def flat_fields(self) -> dict[str, Any]:
        """The unrolled-sample parallel keys."""
        if self.mode == "agg":
            assert self.agg is not None
            return {**self.agg.shape.fields(), "replicas": self.agg.replicas, "used_gpus": self.used_gpus}
        out: dict[str, Any] = {}
        for role, rc in self.roles.items():
            out.update({f"{role}_{k}": v for k, v in rc.shape.fields().items()})
            out[f"{role}_replicas"] = rc.replicas
        out["used_gpus"] = self.used_gpus
        return out

    def label(self) -> str:
        """Short human form, e.g. ``4×TP2`` or ``1×TEP8 + 2×DEP8``."""
        def one(rc: RoleConfig) -> str:
            return f"{rc.replicas}×{rc.shape.strategy.upper()}{rc.shape.gpus}"
        return " + ".join(one(r) for r in self.roles.values())
