"""Numbers with their units, as every report and message shows them."""

from __future__ import annotations

import math

_UNITS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns"))
#: Units for an hour and more (below that, seconds read best; a column of times then never
#: mixes ``5674 s`` with ``3.436 h``).
_LONG_UNITS = ((365.25 * 86400.0, "years"), (86400.0, "days"), (3600.0, "h"))
_LONG = 3600.0


def time_unit(seconds: float) -> tuple[float, str]:
    """The (scale, unit) that shows ``seconds`` with 1 to 3 integer digits
    (up to 4 in seconds; hours, days and years from an hour)."""
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
    for scale, prefix in ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.4g} {prefix}{unit}"
    return f"{x:.4g} {unit}".rstrip()


#: Percentages below this read ``< 0.001 %`` (a solver's tolerance, not a figure to read).
_TINY_PCT = 1e-3


def fmt_pct(frac: float | None) -> str:
    """``12.3 %``; two significant digits below 0.05 % (``0.0026 %``), ``< 0.001 %`` below that,
    so only zero reads ``0.0 %`` and no percentage has an exponent."""
    if frac is None:
        return "-"
    pct = 100.0 * frac
    if 0 < abs(pct) < _TINY_PCT:
        return f"{'>' if pct < 0 else '<'} {'-' if pct < 0 else ''}{_TINY_PCT:g} %"
    return f"{pct:.2g} %" if 0 < abs(pct) < 0.05 else f"{pct:.1f} %"


def fmt_rate(x: float | None, unit: str, digits: int = 4) -> str:
    """A rate such as tokens/s with its unit, never with an exponent: ``1,977 tokens/s``,
    ``172,500 tokens/s`` (``digits`` significant digits, the rest zeros), ``3.5 tokens/s``."""
    if x is None:
        return "-"
    if not math.isfinite(x):
        return f"{x} {unit}"
    if abs(x) >= 10 ** (digits - 1):
        return f"{float(f'{x:.{digits}g}'):,.0f} {unit}"
    return f"{x:.{digits}g} {unit}"


def fmt_energy(joules: float | None, digits: int = 4) -> str:
    """Joules with an SI prefix and no exponent: ``5.873 J``, ``23.5 mJ``, ``1.2 MJ``."""
    if joules is None:
        return "-"
    if not math.isfinite(joules):
        return f"{joules} J"
    for scale, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""), (1e-3, "m"), (1e-6, "u")):
        if abs(joules) >= scale:
            return f"{joules / scale:.{digits}g} {prefix}J"
    return f"{joules:.{digits}g} J" if joules == 0 else f"{joules / 1e-9:.{digits}g} nJ"


def fmt_objective(value: float | None, objective: str, digits: int = 4) -> str:
    """An objective value with its unit: a time for makespan and throughput (the period), joules
    for energy. A lower bound of the objective has the objective's unit."""
    if value is None:
        return "-"
    return fmt_energy(value, digits) if objective == "energy" else fmt_time(value, digits)


#: Binary prefixes for byte counts (what the DSL's KiB, MiB, GiB mean).
_BYTE_UNITS = ((2.0**50, "PiB"), (2.0**40, "TiB"), (2.0**30, "GiB"), (2.0**20, "MiB"), (2.0**10, "KiB"))


def fmt_bytes(x: float) -> str:
    """A byte count in binary units, as everywhere in mapper: ``1.5 MiB``, ``812 B``."""
    for scale, unit in _BYTE_UNITS:
        if abs(x) >= scale:
            value = x / scale
            return f"{value:,.0f} {unit}" if abs(value) >= 1e4 else f"{value:.4g} {unit}"
    return f"{x:.4g} B"


def fmt_bytes_pair(a: float, b: float) -> tuple[str, str]:
    """Two byte counts in one unit (the larger's) with the digits that tell them apart:
    ``80.01 GiB`` against ``80 GiB``, never ``80 GiB exceeds 80 GiB``."""
    if not (math.isfinite(a) and math.isfinite(b)):
        return fmt_bytes(a), fmt_bytes(b)
    big = max(abs(a), abs(b))
    scale, unit = next(((s, u) for s, u in _BYTE_UNITS if big >= s), (1.0, "B"))
    for digits in range(4, 16):
        x, y = f"{a / scale:.{digits}g}", f"{b / scale:.{digits}g}"
        if x != y or a == b:
            return f"{x} {unit}", f"{y} {unit}"
    return f"{a:.0f} B", f"{b:.0f} B"


def fmt_n(n: int, noun: str, plural: str | None = None) -> str:
    """A count with its noun in the right number: ``1 stage``, ``2 stages``, ``1,024 GPUs``."""
    return f"{n:,} {noun if n == 1 else plural or noun + ('es' if noun.endswith(('ch', 'sh', 's', 'x')) else 's')}"
