"""Golden tests: each tests/data/golden/*.tg lowers to exactly its *.dump.

Regenerate after an intended change with ``MAPPER_REGEN_GOLDEN=1 pytest
tests/test_golden.py``, then read the diff of the .dump files before committing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mapper.dump import dump_graph
from mapper.frontend.load import load_graph

GOLDEN = Path(__file__).parent / "data" / "golden"
CASES = sorted(p.stem for p in GOLDEN.glob("*.tg"))
REGEN = os.environ.get("MAPPER_REGEN_GOLDEN") == "1"


def test_there_are_golden_cases():
    assert len(CASES) >= 4


@pytest.mark.parametrize("name", CASES)
def test_golden(name, monkeypatch):
    monkeypatch.chdir(GOLDEN)  # short, machine-independent file names in any error
    got = dump_graph(load_graph(f"{name}.tg"))
    expected_path = GOLDEN / f"{name}.dump"
    if REGEN:
        expected_path.write_text(got)
    assert expected_path.exists(), f"no {expected_path.name}; run with MAPPER_REGEN_GOLDEN=1"
    assert got == expected_path.read_text()


@pytest.mark.parametrize("name", CASES)
def test_dump_is_deterministic(name, monkeypatch):
    monkeypatch.chdir(GOLDEN)
    assert dump_graph(load_graph(f"{name}.tg")) == dump_graph(load_graph(f"{name}.tg"))
