"""Idle time in two everyday compiles, this tree against a git revision.

Two whole processes, each run against this tree and against ``--rev``
(exported with ``git archive`` into a temporary folder, removed on exit),
interleaved ``--repeats`` times; prints the median wall time of each side,
their ratio, the median CPU seconds (user plus system: what a shared, loaded
machine does not inflate) and their ratio, and the load average:

* ``big``: a default compile (``--time-limit 10``) of a 5,000-task layered
  random DAG on 4 related machines with explicit costs (Topcuoglu et al.
  2002, section 5.1: out-degree 1-3 to the next layers, costs U[1, 20],
  speeds U[1, 4], CCR 1), where LNS gains nothing on HEFT;
* ``bert``: the fully pinned BERT-large training step
  (``mapper compile examples/bert_large.tg --platform dgx-a100 --parallel
  data --train``), JSON report written.

Both sides' ``bert`` JSON reports are compared byte for byte, but for the
count of LNS windows in its note: LNS stops on a timed rule there (its gain
per second), so that count varies from run to run on either side.

    python benchmarks/idle.py [--rev main] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from related_dag import related_dag  # noqa: E402
from saga_process import platform_toml  # noqa: E402

from mapper.frontend.importers import related_instance  # noqa: E402
from mapper.frontend.importers.dsl_writer import graph_to_dsl  # noqa: E402


def layered_dag(n: int, seed: int, nodes: int = 4) -> tuple[str, str]:
    """The DSL program and platform file of an ``n``-task layered random DAG on
    ``nodes`` related machines, scaled to CCR 1 (vs_saga.py's random instances)."""
    names, costs, edges, net = related_dag(n, 1.0, seed, nodes)
    graph, _ = related_instance(f"rand{n}", names, costs, edges, net)
    return graph_to_dsl(graph), platform_toml(list(net.names), [list(r) for r in net.strength], "related")


def commands(tmp: Path) -> dict[str, list[str]]:
    """The two compiles, as arguments after ``mapper``; outputs go under ``tmp``."""
    return {"big": ["compile", str(tmp / "g.tg"), "--platform", str(tmp / "p.toml"), "--time-limit", "10", "-q"],
            "bert": ["compile", str(ROOT / "examples" / "bert_large.tg"), "--platform", "dgx-a100",
                     "--parallel", "data", "--train", "-q", "--json", "{json}"]}


def run(tree: Path, args: list[str], json_out: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user plus system) seconds of ``python -m mapper ARGS`` with ``tree`` first on the path."""
    argv = [a.replace("{json}", str(json_out)) for a in args]
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "mapper", *argv], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env={**env, "PYTHONPATH": str(tree)}, cwd=tree)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{tree}: mapper {' '.join(argv)} failed: {err[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime


def _masked(path: Path) -> str:
    """The report's text with the count of LNS windows (a timed stop) masked."""
    return re.sub(r"LNS from (\S+): \d+ windows", r"LNS from \1: N windows", path.read_text())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rev", default="main", help="the revision to compare against (default main)")
    ap.add_argument("--repeats", type=int, default=3)
    ns = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="idle_"))
    old = tmp / "old"
    try:
        old.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", ns.rev], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
        dsl, plat = layered_dag(5000, seed=7)
        (tmp / "g.tg").write_text(dsl)
        (tmp / "p.toml").write_text(plat)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(PYTHONHASHSEED="0", PYTHONPYCACHEPREFIX=str(tmp / "pycache"))
        sides = {"new": ROOT, "old": old}
        cmds = commands(tmp)
        for side, tree in sides.items():  # untimed: bytecode caches, and each side imports its own tree
            where = subprocess.run([sys.executable, "-c", "import mapper; print(mapper.__file__)"], cwd=tree,
                                   env={**env, "PYTHONPATH": str(tree)}, capture_output=True, text=True).stdout
            if not where.startswith(str(tree)):
                raise SystemExit(f"{side}: mapper comes from {where.strip()}, not {tree}")
            run(tree, ["--version"], tmp / "x.json", env)
        times: dict[tuple[str, str], list[tuple[float, float]]] = {(c, s): [] for c in cmds for s in sides}
        load0 = os.getloadavg()
        for _ in range(ns.repeats):
            for name, args in cmds.items():
                for side, tree in sides.items():
                    times[name, side].append(run(tree, args, tmp / f"{name}_{side}.json", env))
        load1 = os.getloadavg()
        print(f"this tree against {ns.rev}, median of {ns.repeats} interleaved runs; "
              f"load average {load0[0]:.2f} before, {load1[0]:.2f} after\n")
        print("| compile | new s | old s | new/old | new CPU s | old CPU s | CPU new/old | runs new | runs old |")
        print("|---|---:|---:|---:|---:|---:|---:|---|---|")
        for name in cmds:
            med = {s: sorted(w for w, _ in times[name, s])[ns.repeats // 2] for s in sides}
            cpu = {s: sorted(c for _, c in times[name, s])[ns.repeats // 2] for s in sides}
            runs = {s: " ".join(f"{w:.2f}" for w, _ in times[name, s]) for s in sides}
            print(f"| {name} | {med['new']:.2f} | {med['old']:.2f} | {med['new'] / med['old']:.2f} | "
                  f"{cpu['new']:.2f} | {cpu['old']:.2f} | {cpu['new'] / cpu['old']:.2f} | "
                  f"{runs['new']} | {runs['old']} |")
        same = _masked(tmp / "bert_new.json") == _masked(tmp / "bert_old.json")
        print(f"\nbert JSON reports byte-identical: {'yes' if same else 'NO'}")
        return 0 if same else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
