"""mapper's max-load against Tarnawski et al.'s optimum and baselines on their own inputs.

Tarnawski, Phanishayee, Devanur, Mahajan, Nagarajan, "Efficient Algorithms
for Device Placement of DNN Graph Operators", NeurIPS 2020; inputs and code
in the repository msr-fiddle/dnn-partitioning (MIT). For every input under
``throughput-inputs/`` of a checkout of that repository (kept outside this
repository; give its path), the script

* builds their ``throughput-dp/dp.cpp`` with ``g++ -O3`` in a temporary
  folder (one line added at the top of ``main``: 17-digit output, so the
  expert comparison can be exact), and runs it: the optimal contiguous split
  (the DP), ``-pipeDream`` (PipeDream's DP on the linearised graph),
  ``-localSearch 10`` (their local search, 10 restarts), ``-scotch`` when
  Scotch's ``gpart`` is on the PATH, and ``-expert`` on the human-expert
  split where ``human-experts/`` has one, each with a time limit;
* imports the input (``mapper import dnn-partitioning``), evaluates the
  human-expert split with mapper's max-load (:func:`mapper.mapping.objectives.loads`),
  and maps it with the ``milp`` mapper (``--objective throughput``, time
  limit ``--time-limit``, 60 s by default) twice: over every split, and
  over contiguous splits only (``--contiguous``, the DP's search space);
* prints one row per input: the max-load (ms) of each, mapper's statuses and
  times and whether its free split is contiguous, the ratios mapper / DP,
  and the relative difference between mapper's and ``dp.exe``'s evaluation
  of the expert split.

    python benchmarks/dnn_partitioning.py PATH/TO/dnn-partitioning [--time-limit S] [--dp-limit S] [--only NAME]

Without the checkout (or without g++) it says so and exits 0. Wall times are
printed with the load average; the max-loads do not depend on load, except
that a search cut short by its time limit may end higher.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mapper.costing.cost import build_cost_table
from mapper.engine.schedule import ScheduleOptions
from mapper.frontend.importers.dnn_partitioning import instance_platform, read_instance, read_split
from mapper.mapping.base import MapOptions
from mapper.mapping.objectives import loads
from mapper.pipeline import compile_graph
from mapper.platform.loader import parse_platform

PRECISION = "cerr.precision(17); cout.precision(17);"


def build_dp(repo: Path, work: Path) -> Path | None:
    """Their dp.exe, built from a copy of dp.cpp that prints 17 digits; None without g++."""
    gxx = shutil.which("g++")
    if gxx is None:
        return None
    (work / "throughput-dp").mkdir()
    shutil.copytree(repo / "nlohmann", work / "nlohmann")
    src = (repo / "throughput-dp" / "dp.cpp").read_text()
    head = "int main(int argc, char **argv) {"
    if head not in src:
        raise SystemExit("dp.cpp has no main where expected; the script needs updating")
    (work / "throughput-dp" / "dp.cpp").write_text(src.replace(head, head + " " + PRECISION, 1))
    exe = work / "throughput-dp" / "dp.exe"
    subprocess.run([gxx, "-O3", "-std=c++17", "dp.cpp", "-o", "dp.exe"], cwd=work / "throughput-dp", check=True)
    return exe


def run_dp(exe: Path, args: list[str], instance: Path, limit: float, cwd: Path) -> tuple[float | None, float, str]:
    """(max-load in ms or None, seconds, a note) of one dp.exe run."""
    t0 = time.perf_counter()
    try:
        with instance.open() as stdin:
            out = subprocess.run([str(exe), *args], stdin=stdin, capture_output=True, text=True, timeout=limit, cwd=cwd)
    except subprocess.TimeoutExpired:
        return None, time.perf_counter() - t0, f"> {limit:g} s"
    dt = time.perf_counter() - t0
    text = out.stdout + "\n" + out.stderr
    if out.returncode != 0 or "FAIL" in text:
        line = next((x for x in text.splitlines() if "FAIL" in x), f"exit {out.returncode}")
        return None, dt, line.strip()[:60]
    for pattern in (r"max-load of the split: ([0-9.eE+-]+)", r"local search done\. maxLoad = ([0-9.eE+-]+)",
                    r"computed maxLoad for Scotch result: ([0-9.eE+-]+)"):
        m = re.search(pattern, text)
        if m:
            return float(m.group(1)), dt, ""
    start = out.stdout.find("{")
    if start >= 0:
        try:
            return float(json.JSONDecoder().raw_decode(out.stdout[start:])[0]["maxLoad"]), dt, ""
        except (ValueError, KeyError):
            pass
    return None, dt, "no result in the output"


def fmt(x: float | None, note: str = "") -> str:
    return f"{x:.4f}" if x is not None else (note or "-")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("repo", nargs="?", default=os.environ.get("DNN_PARTITIONING", ""),
                    help="a checkout of msr-fiddle/dnn-partitioning (or $DNN_PARTITIONING)")
    ap.add_argument("--time-limit", type=float, default=60.0, help="mapper's time limit per input (s)")
    ap.add_argument("--dp-limit", type=float, default=300.0, help="time limit of each dp.exe run (s)")
    ap.add_argument("--only", default="", help="only inputs whose FOLDER/NAME contains this")
    args = ap.parse_args()
    repo = Path(args.repo) if args.repo else None
    if repo is None or not (repo / "throughput-inputs").is_dir():
        print("skipped: give the path of a msr-fiddle/dnn-partitioning checkout (its throughput-inputs/ "
              "was not found)")
        return 0
    inputs = sorted(p for p in (repo / "throughput-inputs").glob("*/*.json")
                    if args.only in f"{p.parent.name}/{p.name}")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        exe = build_dp(repo, work)
        if exe is None:
            print("note: g++ not found: their DP and baselines are left out")
        scotch = shutil.which("gpart") is not None
        if not scotch:
            print("note: Scotch's gpart is not on the PATH: the Scotch column is left out")
        head = (f"{'input':<34} {'nodes':>5} {'DP opt':>9} {'DP s':>6} {'PipeDrm':>9} {'local':>9} "
                f"{'Scotch':>9} {'expert':>9} {'free':>9} {'s':>5} {'status':>9} {'contig':>6} "
                f"{'contig.':>9} {'s':>5} {'status':>9} {'free/DP':>7} {'cont/DP':>7} {'expert diff':>11}")
        print(head)
        print("-" * len(head))
        ratios: list[float] = []
        contiguous_ratios: list[float] = []
        for path in inputs:
            label = f"{path.parent.name}/{path.stem}"
            inst = read_instance(path)
            platform = parse_platform(instance_platform(inst))
            res: dict[str, tuple[float | None, float, str]] = {}
            if exe is not None:
                res["dp"] = run_dp(exe, [], path, args.dp_limit, work)
                res["pipedream"] = run_dp(exe, ["-pipeDream"], path, args.dp_limit, work)
                res["local"] = run_dp(exe, ["-localSearch", "10"], path, args.dp_limit, work)
                if scotch:
                    res["scotch"] = run_dp(exe, ["-scotch"], path, args.dp_limit, work)
            expert_file = repo / "human-experts" / f"{path.stem}_expert.json"
            diff = "-"
            if expert_file.is_file() and path.parent.name == "LayerGraphs":
                cost = build_cost_table(inst.graph, platform)
                ours = max(loads(cost, read_split(expert_file, inst))) * 1e3
                if exe is not None:
                    res["expert"] = run_dp(exe, ["-expert", str(expert_file)], path, args.dp_limit, work)
                    theirs = res["expert"][0]
                    diff = f"{abs(ours - theirs) / theirs:.1e}" if theirs else "-"
                else:
                    res["expert"] = (ours, 0.0, "")
            runs = []
            for contiguous in (False, True):
                t0 = time.perf_counter()
                result = compile_graph(inst.graph, platform, fuse="none", options=MapOptions(
                    objective="throughput", time_limit=args.time_limit, contiguous=contiguous,
                    schedule=ScheduleOptions(memory=True))).result
                runs.append((result.objective_value * 1e3, time.perf_counter() - t0, result.status,
                             "yes" if any(n.startswith("the split is contiguous") for n in result.notes) else "no"))
            dp = res.get("dp", (None, 0.0, ""))
            ratio = [f"{r[0] / dp[0]:.4f}" if dp[0] else "-" for r in runs]
            if dp[0]:
                ratios.append(runs[0][0] / dp[0])
                contiguous_ratios.append(runs[1][0] / dp[0])
            cells = [fmt(*[res[k][0], res[k][2]]) if k in res else "-"
                     for k in ("pipedream", "local", "scotch", "expert")]
            (free, free_s, free_status, free_contig), (cont, cont_s, cont_status, _) = runs
            print(f"{label:<34} {len(inst.graph.tasks):>5} {fmt(dp[0], dp[2]):>9} {dp[1]:>6.1f} "
                  f"{cells[0]:>9} {cells[1]:>9} {cells[2]:>9} {cells[3]:>9} {free:>9.4f} {free_s:>5.1f} "
                  f"{free_status:>9} {free_contig:>6} {cont:>9.4f} {cont_s:>5.1f} {cont_status:>9} "
                  f"{ratio[0]:>7} {ratio[1]:>7} {diff:>11}", flush=True)
        for what, rs in (("free splits", ratios), ("contiguous splits", contiguous_ratios)):
            if rs:
                print(f"mapper ({what}) / DP optimum: best {min(rs):.4f}, worst {max(rs):.4f} over {len(rs)} "
                      f"inputs with a DP result; {sum(r <= 1 + 1e-9 for r in rs)} at or below the DP")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
