"""Numbers with their units, as every report and message shows them."""

from __future__ import annotations

import math

_UNITS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns"))
#: Units for 10,000 s and more (below that, seconds read best).
_LONG_UNITS = ((365.25 * 86400.0, "years"), (86400.0, "days"), (3600.0, "h"), (60.0, "min"))
_LONG = 1e4


def time_unit(seconds: float) -> tuple[float, str]:
    """The (scale, unit) that shows ``seconds`` with 1 to 3 integer digits
    (up to 4 in seconds; minutes, hours, days and years from 10,000 s)."""
    mag = abs(seconds)
    if mag >= _LONG:
        for scale, unit in _LONG_UNITS:
            if mag >= scale:
                return scale, unit
    for scale, unit in _UNITS:
        if mag >= scale:
            return scale, unit
    return _UNITS[-1] if mag > 0 else _UNITS[0]


def fmt_time(seconds: float | None, digits: int = 4) -> str:
    """``seconds`` with a unit: ``12.5 ms``, ``80 s``, ``2.778 h``; ``-`` for None."""
    if seconds is None:
        return "-"
    if not math.isfinite(seconds):
        return str(seconds)
    scale, unit = time_unit(seconds)
    value = seconds / scale
    if abs(value) >= 10**digits:  # no exponent: 31,710 years, not 3.171e+04
        return f"{value:,.0f} {unit}"
    return f"{value:.{digits}g} {unit}"


def fmt_count(x: float, unit: str = "") -> str:
    """A count with an SI prefix: ``1.5 G``FLOP, ``4 M``B."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.4g} {prefix}{unit}"
    return f"{x:.4g} {unit}".rstrip()


def fmt_pct(frac: float | None) -> str:
    """``12.3 %``; two significant digits below 0.05 % (``0.0026 %``), so only zero reads ``0.0 %``."""
    if frac is None:
        return "-"
    pct = 100.0 * frac
    return f"{pct:.2g} %" if 0 < abs(pct) < 0.05 else f"{pct:.1f} %"


def fmt_objective(value: float | None, objective: str, digits: int = 4) -> str:
    """An objective value with its unit: a time for makespan and throughput (the period), joules for energy."""
    if value is None:
        return "-"
    return f"{value:.{digits}g} J" if objective == "energy" else fmt_time(value, digits)


#: Binary prefixes for byte counts (what the DSL's KiB, MiB, GiB mean).
_BYTE_UNITS = ((2.0**50, "PiB"), (2.0**40, "TiB"), (2.0**30, "GiB"), (2.0**20, "MiB"), (2.0**10, "KiB"))


def fmt_bytes(x: float) -> str:
    """A byte count in binary units, as everywhere in mapper: ``1.5 MiB``, ``812 B``."""
    for scale, unit in _BYTE_UNITS:
        if abs(x) >= scale:
            value = x / scale
            return f"{value:,.0f} {unit}" if abs(value) >= 1e4 else f"{value:.4g} {unit}"
    return f"{x:.4g} B"
