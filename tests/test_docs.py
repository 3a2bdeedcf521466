"""The Python examples in README.md and docs/api.md run as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BLOCKS = [
    pytest.param(code, id=f"{doc}-{i}")
    for doc in ("README.md", "docs/api.md")
    for i, code in enumerate(re.findall(r"```python\n(.*?)```", (ROOT / doc).read_text(), re.S))
]


@pytest.mark.parametrize("code", BLOCKS)
def test_python_example_runs(code, tmp_path):
    os.symlink(ROOT / "examples", tmp_path / "examples")
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr


def test_import_is_light():
    code = "import sys, mapper; mapper.MapOptions; print('numba' in sys.modules, 'pulp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    assert out.split() == ["False", "False"]
