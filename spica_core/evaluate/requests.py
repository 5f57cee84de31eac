"""Each replayed request's client-visible latencies, kept with its trial so that a finished run can be scored
again under a calibration, or another SLA factor, without replaying."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

_COLUMNS = ("ttft_ms", "itl_ms", "e2e_latency_ms", "output_length")


@dataclass(frozen=True, eq=False)
class RequestLatencies:
    """One row per completed request: TTFT, its own mean ITL, end-to-end latency (ms, as its client sees them)
    and output tokens, in float64 (32 bytes a request), so that a recount matches the replay's own exactly."""

    table: np.ndarray     # shape (requests, 4), columns as _COLUMNS

    @classmethod
    def of(cls, per_request: Sequence[Mapping[str, Any]]) -> RequestLatencies:
        """From the replay's per-request records (already shifted by the serving path), completed ones only."""
        done = [r for r in per_request if r.get("terminal_status", "completed") == "completed"]
        table = np.array([[float(r.get(c) or 0.0) for c in _COLUMNS] for r in done], dtype=np.float64)
        return cls(table.reshape(-1, len(_COLUMNS)))

    @property
    def ttft_ms(self) -> np.ndarray:
        return self.table[:, 0]

    @property
    def itl_ms(self) -> np.ndarray:
        return self.table[:, 1]

    @property
    def e2e_ms(self) -> np.ndarray:
        return self.table[:, 2]

    @property
    def output_tokens(self) -> np.ndarray:
        return self.table[:, 3]

    def __len__(self) -> int:
        return int(self.table.shape[0])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RequestLatencies) and np.array_equal(self.table, other.table)

    def to_bytes(self) -> bytes:
        return self.table.astype("<f8").tobytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> RequestLatencies:
        return cls(np.frombuffer(data, dtype="<f8").reshape(-1, len(_COLUMNS)).copy())


__all__ = ["RequestLatencies"]
