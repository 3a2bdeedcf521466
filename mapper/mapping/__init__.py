"""Mapping algorithms behind one interface, and the registry that finds them.

:data:`MAPPERS` maps a name to ``"module:Class"``; modules are imported only
when a mapper is asked for, so a missing optional dependency of one mapper
does not break the others.
"""

from __future__ import annotations

import difflib
import importlib

from mapper.errors import OptionsError

#: name -> "module:Class", in listing order.
MAPPERS: dict[str, str] = {
    "milp": "mapper.mapping.milp:MilpMapper",
    "heft": "mapper.mapping.heft:HeftMapper",
    "heft-samedev": "mapper.mapping.heft:HeftSameDeviceMapper",
    "cpop": "mapper.mapping.cpop:CpopMapper",
    "peft": "mapper.mapping.peft:PeftMapper",
    "greedy": "mapper.mapping.greedy:GreedyMapper",
    "single": "mapper.mapping.single:SingleDeviceMapper",
    "cpu": "mapper.mapping.single:CpuMapper",
    "cpsat": "mapper.mapping.cpsat:CpSatMapper",
    "delegate-greedy": "mapper.mapping.delegate:DelegateGreedyMapper",
    "delegate-mapped": "mapper.mapping.delegate:DelegateMappedMapper",
    "multilevel": "mapper.mapping.multilevel:MultilevelMapper",
}


def _load(name: str):
    module, _, cls = MAPPERS[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def get_mapper(name: str, option: str = "--mapper"):
    """A new instance of the mapper called ``name`` (unknown: :class:`OptionsError` naming ``option``)."""
    if name not in MAPPERS:
        close = difflib.get_close_matches(name, list(MAPPERS), n=1)
        raise OptionsError(f"unknown mapper {name!r}; available: {', '.join(MAPPERS)}", obj=option,
                           hint=f"did you mean '{close[0]}'?" if close else None)
    return _load(name)()


def available_mappers() -> list[tuple[str, str]]:
    """``(name, summary)`` of every registered mapper whose module imports."""
    out = []
    for name in MAPPERS:
        try:
            cls = _load(name)
        except (ImportError, AttributeError):
            continue
        out.append((name, cls.summary))
    return out
