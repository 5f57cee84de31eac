"""Numbers for people, one rule everywhere: the report, the Prefect UI's tables and the CLI's lines.

``digits`` significant digits, trailing zeros kept so a column reads evenly (3 in the report and the UI, 4 in
the CLI's tables, which people compare run to run), thousands separators, whole numbers once the integer
part has that many digits, and "—" where there is no value."""
from __future__ import annotations

import math
import numbers
from typing import Any

MISSING = "—"


def fmt(value: Any, unit: str = "", digits: int = 3) -> str:
    """``value`` for a person, with ``unit`` after it (none for a missing value)."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        text = str(value)
    elif isinstance(value, numbers.Integral):
        text = f"{int(value):,}"
    elif not isinstance(value, numbers.Real):
        text = str(value)
    elif math.isnan(value := float(value)):
        return MISSING
    elif math.isinf(value):
        text = "∞" if value > 0 else "-∞"
    elif value == 0:
        text = "0"
    elif abs(value) >= 1:
        decimals = max(0, digits - 1 - int(math.floor(math.log10(abs(value)))))
        text = f"{value:,.{decimals}f}"
    else:
        text = f"{value:.{digits}g}"
    return f"{text} {unit}" if unit else text


__all__ = ["MISSING", "fmt"]
