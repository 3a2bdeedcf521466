"""Part 4 of ``vs_saga.py``: whole processes, mapper's CLI against SAGA's HEFT.

``mapper compile --mapper heft -q`` on a DSL file and a platform file (it
starts, parses, lowers, prices, maps and validates, and prints nothing)
against a Python process that builds the same instance in SAGA (Coleman,
Krishnamachari, arXiv:2403.07120) and runs its HEFT (it prints the makespan),
interleaved. Both sides run with Python's bytecode cache, as installed
packages do: each runs once untimed first and writes its cache under a
private prefix (``PYTHONPYCACHEPREFIX``), even where the environment turns
writing off. Both makespans come from untimed runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

#: SAGA's side: read the instance, build SAGA's graph and network, run its HEFT.
SAGA_PROCESS = """
import json, math, sys
import logging
import saga
logging.getLogger().setLevel(logging.ERROR)
from saga.schedulers import HeftScheduler
inst = json.load(open(sys.argv[1]))
nodes = list(zip(inst["names"], inst["speeds"]))
links = [(inst["names"][a], inst["names"][b], inst["strength"][a][b])
         for a in range(len(nodes)) for b in range(a + 1, len(nodes))]
links += [(nm, nm, math.inf) for nm in inst["names"]]
tg = saga.TaskGraph.create([tuple(t) for t in inst["tasks"]], [tuple(e) for e in inst["edges"]])
sched = HeftScheduler().schedule(saga.Network.create(nodes, links), tg)
print(sched.makespan)
"""


def platform_toml(names: list[str], strength: list[list[float]], name: str) -> str:
    """The nodes ``names`` as CPUs, each linked pair at ``strength`` bytes/s, no latency."""
    lines = [f'name = "{name}"']
    for nm in names:
        lines += ["", "[[device]]", f'name = "{nm}"', 'kind = "cpu"']
    for a in range(len(names)):
        for b in range(a + 1, len(names)):
            lines += ["", "[[link]]", f'from = "{names[a]}"', f'to = "{names[b]}"', "bidirectional = true",
                      f"bandwidth_gbs = {strength[a][b] / 1e9!r}", "latency_us = 0.0"]
    return "\n".join(lines) + "\n"


def whole_processes(tmp: Path, dsl: str, instance: dict, title: str, repeats: int) -> None:
    """Time both processes ``repeats`` times, interleaved, and print the table.

    ``dsl`` is mapper's program; ``instance`` is SAGA's (``names``, ``speeds``,
    ``strength``, ``tasks``, ``edges``), from which the platform file is also written.
    """
    (tmp / "g.tg").write_text(dsl)
    (tmp / "p.toml").write_text(platform_toml(instance["names"], instance["strength"], "related"))
    (tmp / "i.json").write_text(json.dumps(instance))
    (tmp / "saga_heft.py").write_text(SAGA_PROCESS)
    ours_cmd = [sys.executable, "-m", "mapper", "compile", str(tmp / "g.tg"), "--platform", str(tmp / "p.toml"),
                "--mapper", "heft", "-q"]
    saga_cmd = [sys.executable, str(tmp / "saga_heft.py"), str(tmp / "i.json")]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONHASHSEED="0", PYTHONPYCACHEPREFIX=str(tmp / "pycache"))
    for cmd in (ours_cmd, saga_cmd):  # untimed: writes each side's bytecode cache
        subprocess.run(cmd, capture_output=True, env=env, check=True)
    times: dict[str, list[float]] = {"ours": [], "saga": []}
    makespans: dict[str, float] = {}
    load0 = os.getloadavg()
    for _ in range(repeats):
        for side, cmd in (("ours", ours_cmd), ("saga", saga_cmd)):
            t0 = time.perf_counter()
            done = subprocess.run(cmd, capture_output=True, text=True, env=env)
            times[side].append(time.perf_counter() - t0)
            if done.returncode != 0:
                raise SystemExit(f"{side} failed: {done.stderr[-2000:]}")
            if side == "saga":
                makespans[side] = float(done.stdout.split()[-1])
    load1 = os.getloadavg()
    subprocess.run([*ours_cmd, "--json", str(tmp / "r.json")], check=True, env=env)  # the makespan, untimed
    makespans["ours"] = json.loads((tmp / "r.json").read_text())["makespan"]
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    print(f"\n## Part 4: whole processes, {title}, median of {repeats} interleaved runs\n")
    print(f"load average {load0[0]:.2f} before, {load1[0]:.2f} after\n")
    print("| process | wall s (median) | runs | HEFT makespan |")
    print("|---|---:|---|---:|")
    print(f"| mapper compile --mapper heft | {med['ours']:.2f} | {' '.join(f'{x:.2f}' for x in times['ours'])} | "
          f"{makespans['ours']:g} |")
    print(f"| SAGA HeftScheduler | {med['saga']:.2f} | {' '.join(f'{x:.2f}' for x in times['saga'])} | "
          f"{makespans['saga']:g} |")
    print(f"\nratio mapper/SAGA {med['ours'] / med['saga']:.3f} (target at most 0.10)")
