"""The built wheel carries the grammar and the platform files, and works installed.

The source is copied to a temporary folder first, so the build never writes
into the working tree; the installed copy is imported in a subprocess started
without ``site`` (so no editable-install hook) from another directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "mapper", "grammar", "platforms", "kernels")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("wheel")
    src = base / "src"
    src.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, src / name)
    out = base / "dist"
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
         "--no-index", "-q", "-w", str(out)],
        capture_output=True, text=True, cwd=base,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    (whl,) = out.glob("mapper-*.whl")
    return whl


def test_wheel_contains_grammar_and_platforms(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "mapper/grammar/mapper.lark" in names
    assert "mapper/frontend/parse.py" in names and "mapper/frontend/lowering/program.py" in names
    tomls = sorted(p.name for p in (ROOT / "platforms").glob("*.toml"))
    assert tomls, "no platform files in platforms/"
    for name in tomls:
        assert f"mapper/platforms/{name}" in names, name
    assert "mapper/kernels/__init__.py" in names
    for init in sorted((ROOT / "mapper").rglob("__init__.py")):  # every subpackage is listed in pyproject.toml
        assert init.relative_to(ROOT).as_posix() in names, init
    assert "mapper/py.typed" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), "the wheel carries no LICENSE"


def test_installed_wheel_finds_its_grammar(wheel, tmp_path):
    target = tmp_path / "site"
    r = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", str(target),
         str(wheel)],
        capture_output=True, text=True, cwd=tmp_path,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    probe = textwrap.dedent("""
        import importlib.resources, sys
        import mapper, mapper.frontend.parse, mapper.pipeline
        from mapper.frontend.load import graph_from_text
        assert mapper.__file__.startswith(sys.argv[1]), mapper.__file__
        g = graph_from_text("param N = 4\\ngraph g {\\n  input x : f32[N, N]\\n  y = relu(matmul(x, x))\\n}\\n")
        tomls = sorted(p.name for p in importlib.resources.files("mapper.platforms").iterdir()
                       if p.name.endswith(".toml"))
        print(len(g.tasks), g.tasks[0].name, ",".join(tomls))
    """)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(target), sysconfig.get_paths()["purelib"]])
    work = tmp_path / "elsewhere"
    work.mkdir()
    r = subprocess.run([sys.executable, "-S", "-c", probe, str(target)], capture_output=True, text=True,
                       cwd=work, env=env)
    assert r.returncode == 0, r.stderr
    count, first, tomls = r.stdout.split()
    assert (count, first) == ("2", "y.matmul")
    assert tomls.split(",") == sorted(p.name for p in (ROOT / "platforms").glob("*.toml"))
