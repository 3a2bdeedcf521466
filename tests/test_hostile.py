"""Hostile input and everyday mistakes: every case of the manifests tests/data/hostile/cases*.toml
ends cleanly, within 60 s and 2 GiB, with its exit code (0, 2 or 3), a message without a traceback
or a raw control character, and every input as it was. Plus what a manifest cannot say: a run
killed mid-write, concurrent writers, and terminal output escaping."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from pathlib import Path

import pytest
from mapping_signals import signal_while_mapping
from randdag import slow_to_prove_dsl

DATA = Path(__file__).resolve().parent / "data" / "hostile"
#: Every manifest of the folder (cases.toml, and one per round or surface beside it).
MANIFESTS = sorted(DATA.glob("cases*.toml"))
CASES = [case for m in MANIFESTS for case in tomllib.loads(m.read_text(encoding="utf-8"))["case"]]
#: C0/C1 controls but tab, newline, carriage return; DEL; bidi and invisible format controls
RAW_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
#: every case ends within this bound (the hostile-input rule: under 60 s), on a loaded machine too
LIMIT_S = 60
#: The most memory a case may take (peak resident set of the command).
LIMIT_BYTES = 2 * 2**30


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def _mapper_measured(args: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], int]:
    """``mapper ARGS`` run in ``cwd`` (killed past the time limit), and its peak resident set in bytes
    (``wait4``'s usage, Linux)."""
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    env.pop("MAPPER_TRACEBACK", None)
    with tempfile.TemporaryFile("w+", encoding="utf-8") as out, tempfile.TemporaryFile("w+", encoding="utf-8") as err:
        proc = subprocess.Popen([sys.executable, "-m", "mapper", *args], cwd=cwd, stdout=out, stderr=err, env=env,
                                stdin=subprocess.DEVNULL, text=True)
        timer = threading.Timer(LIMIT_S, proc.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out.read(), err.read()), usage.ru_maxrss * 1024


@pytest.fixture(scope="module")
def corpus_digest():
    before = _digest(DATA)
    yield before
    assert _digest(DATA) == before, "a case changed a file of the corpus"


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_case_ends_cleanly(case, tmp_path, corpus_digest):
    fifo, link, folder = tmp_path / "fifo", tmp_path / "link.json", tmp_path / "dir"
    os.mkfifo(fifo)
    link.symlink_to(tmp_path / "target")
    folder.mkdir()
    names = {"{data}": str(DATA), "{tmp}": str(tmp_path), "{fifo}": str(fifo), "{link}": str(link),
             "{dir}": str(folder), "{long}": str(tmp_path / ("n" * 300 + ".json"))}
    args = []
    for arg in case["args"]:
        for key, value in names.items():
            arg = arg.replace(key, value)
        args.append(arg)
    start = time.monotonic()
    proc, peak = _mapper_measured(args, tmp_path)
    assert time.monotonic() - start < LIMIT_S
    assert peak < LIMIT_BYTES, f"{peak / 2**30:.2f} GiB"
    out = proc.stdout + proc.stderr
    assert proc.returncode == case["exit"], out[-2000:]
    assert "Traceback" not in out and "internal error" not in out, out[-2000:]
    assert not RAW_CONTROL.search(out), f"raw control character in {out[-500:]!r}"
    assert proc.returncode == 0 or proc.stderr.strip(), "an error must say what went wrong"
    if "stderr" in case:
        assert case["stderr"] in proc.stderr, proc.stderr[-2000:]
    if "stdout" in case:
        assert case["stdout"] in proc.stdout, proc.stdout[-2000:]
    if "absent" in case:
        assert case["absent"] not in out
    # special files stay what they were; refused outputs leave nothing behind
    assert fifo.is_fifo() and link.is_symlink() and not (tmp_path / "target").exists() and folder.is_dir()
    assert not list(tmp_path.glob(".*.tmp"))
    if proc.returncode != 0:
        assert not (tmp_path / "x").exists()


def test_every_class_of_the_audit_has_cases():
    text = "".join(m.read_text(encoding="utf-8") for m in MANIFESTS)
    for heading in ("reading unbounded or special files", "arithmetic at the edges of float", "WfCommons files",
                    "codes and messages", "data safety", "terminal safety", "resources",
                    "files read outside the platform's folder", "unbounded time and memory from a few bytes",
                    "an internal invariant as the message", "accepted when it should not be"):
        assert f"# -- {heading}" in text
    assert len(CASES) >= 90
    names = [c["name"] for c in CASES]
    assert len(names) == len(set(names)), "two cases of the manifests share a name"


def test_sigterm_while_mapping_ends_cleanly_and_writes_nothing(tmp_path):
    src = tmp_path / "slow.tg"
    src.write_text(slow_to_prove_dsl(n=100))  # the search reports long before it could prove this graph
    out = tmp_path / "r.json"
    proc = subprocess.Popen([sys.executable, "-m", "mapper", "compile", str(src), "--platform", "cpu-gpu-fpga",
                             "--time-limit", "60", "--json", str(out), "--verbose"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        signal_while_mapping(proc, signal.SIGTERM)  # delivered while mapping, however fast the machine
        _, err = proc.communicate(timeout=LIMIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["slow.tg"]


def test_concurrent_writers_leave_one_whole_file(tmp_path):
    out = tmp_path / "r.json"
    args = ["compile", str(DATA / "ok.tg"), "--platform", "workstation", "--mapper", "heft", "-q", "--json", str(out)]
    procs = [subprocess.Popen([sys.executable, "-m", "mapper", *args], cwd=tmp_path) for _ in range(3)]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0]
    assert json.loads(out.read_text())["mapper"] == "heft"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_a_task_out_of_memory_in_run_is_bad_input(tmp_path, monkeypatch, capsys):
    from mapper.cli import main
    from mapper.kernels import registry

    def no_memory(*args, **kwargs):
        raise MemoryError("Unable to allocate 40 GiB")

    monkeypatch.setattr(registry, "run_kernel", no_memory)
    assert main(["run", str(DATA / "ok.tg"), "--platform", "dev-vm", "--mapper", "heft", "--repeats", "1"]) == 2
    err = capsys.readouterr().err
    assert "ran out of memory" in err and "Traceback" not in err


def test_an_internal_error_is_one_line_without_traceback(monkeypatch, capsys):
    from mapper.cli import main
    from mapper.mapping import heft

    def broken(self, cost, options=None):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(heft.HeftMapper, "map", broken)
    assert main(["compile", str(DATA / "ok.tg"), "--platform", "workstation", "--mapper", "heft"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("internal error: ZeroDivisionError") and "MAPPER_TRACEBACK" in err
    assert "Traceback" not in err


def test_long_source_lines_are_cut_around_the_caret():
    from mapper.errors import DslError, SourceSpan, format_error

    line = "x" * 5000 + "?" + "y" * 5000
    text = format_error(DslError("bad", span=SourceSpan("f.tg", 1, 5001), source_line=line))
    shown, caret = text.splitlines()[1:3]
    assert len(shown) < 200 and shown.strip().startswith("...") and shown.endswith("...")
    assert shown[caret.index("^")] == "?"
