"""The base of every config model and the bounded number types the config sections share.

Each section (search space, workload, goal, sweep) builds its fields from these, so every bound reads the
same way: booleans are refused where a number is meant, and a value over a limit is told why.
"""
from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StrictInt

from spica_core.config import limits
from spica_core.config.limits import Limit


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True, allow_inf_nan=False)


def _no_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("a number is required, not a boolean")
    return value


def _at_most(limit: Limit) -> Any:
    """A bound whose message says why (pydantic's own ``le`` message gives only the number)."""
    def check(value: Any) -> Any:
        if value > limit.maximum:
            raise ValueError(limits.over(limit))
        return value

    return AfterValidator(check)


def _int_upto(limit: Limit, minimum: int = 1) -> Any:
    return Annotated[StrictInt, Field(ge=minimum, json_schema_extra={"maximum": limit.maximum}), _at_most(limit)]


def _float_upto(limit: Limit) -> Any:
    return Annotated[float, Field(gt=0, json_schema_extra={"maximum": limit.maximum}), BeforeValidator(_no_bool),
                     _at_most(limit)]

