"""Delegation on a phone and an embedded board: the nine light ONNX models of the onnx wheel.

Per model and platform (``sd8gen3``: the Hexagon NPU behind ONNX Runtime's QNN EP list;
``jetson-orin``: a DLA behind TensorRT's DLA list), prints the accelerator's subgraph count and
fallback nodes under ``--delegate greedy`` (what the runtimes do), the predicted latency of
``greedy`` and of ``mapped`` (the mapper's choice with the same invocation and hand-over costs),
and of the best single processor. Every schedule is checked by the independent validator.

Then CoDL's models (Jia et al., MobiSys 2022: VGG-16, YOLOv2, Fast Style Transfer; the graphs of
benchmarks/codl_models.py under tests/data/codl) on each phone's CPU clusters and GPU, the NPU left
out: each processor alone, the better of them, and the mapper's co-execution (the default mapper,
whose incumbents include every single processor, so it is never worse), with the gain, and the
bound of any co-execution, CoDL's per-operator splits included: every operator split across all the
processors in proportion to their speed with no synchronisation, 1 / sum(1 / each alone).

Whole-model latency against MLPerf Mobile v4.0's Snapdragon 8 Gen 3 rows, CPU+GPU co-execution and
several models' SLOs are benchmarks/mlperf_mobile.py's (the Exynos 2400's rows:
benchmarks/mlperf_exynos.py); ONNX Runtime QNN's own partitions are the optional oracle in
tests/test_delegation.py.

    python benchmarks/mobile.py [--models squeezenet,resnet50] [--time-limit 5] [--codl-only]
"""

from __future__ import annotations

import argparse
import warnings
from importlib import resources
from pathlib import Path

import onnx

from mapper.core.units import fmt_time
from mapper.engine.validate import validate
from mapper.errors import InputWarning
from mapper.mapping.base import MapOptions
from mapper.mapping.single import on_one_device
from mapper.pipeline import compile_graph
from mapper.platform.devices import ACCELERATOR_KINDS, Platform
from mapper.platform.loader import load_platform, parse_platform
from mapper.report.delegation import delegation

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
PLATFORMS = ("sd8gen3", "jetson-orin")
CODL = Path(__file__).resolve().parent.parent / "tests" / "data" / "codl"
PHONES = ("sd8gen3", "exynos2400")


def cpu_gpu(name: str, what: str = "NPU") -> Platform:
    """Shipped platform ``name`` less its NPU/DLA devices and their links: the file's tables that
    declare such a kind or name one of those devices (a ``count`` device's too: ``dla0``, ``dla1``)."""
    accel = {d.name for d in load_platform(name).devices if d.kind in ACCELERATOR_KINDS}
    kinds = tuple(f'kind = "{k}"' for k in ACCELERATOR_KINDS)
    blocks = (resources.files("mapper.platforms") / f"{name}.toml").read_text(encoding="utf-8").split("\n[[")
    kept = [blocks[0]] + [b for b in blocks[1:]
                          if not any(f'"{a}"' in b for a in accel) and not any(k in b for k in kinds)]
    return parse_platform("\n[[".join(kept), f"{name} without its {what}")


def coexecution(model: Path, platform: Platform, options: MapOptions) -> tuple[dict[str, float], float]:
    """Each processor's latency alone and the mapper's co-executed latency (validated) of ``model``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InputWarning)
        r = compile_graph(str(model), platform, options=options).result
    bad = validate(r.schedule)
    if bad:
        raise SystemExit(f"{model.stem} on {platform.name}: the schedule is invalid: {bad[0].message}")
    cost = r.schedule.cost
    alone = {d.name: on_one_device(cost, d.index, options.schedule).makespan for d in platform.devices}
    return alone, r.schedule.makespan


def codl(options: MapOptions) -> None:
    print()
    print("CoDL's models, CPU+GPU co-execution (NPU left out) against each processor alone")
    head = (f"{'model':<8} {'platform':<11} {'best CPU alone':>22} {'GPU alone':>10} {'co-executed':>11} "
            f"{'gain':>6} {'split bound':>11}")
    print(head)
    print("-" * len(head))
    for name in PHONES:
        platform = cpu_gpu(name)
        kinds = {d.name: d.kind for d in platform.devices}
        for model in sorted(CODL.glob("*.onnx")):
            alone, both = coexecution(model, platform, options)
            cpu = min((t, n) for n, t in alone.items() if kinds[n] == "cpu")
            gpu = min(t for n, t in alone.items() if kinds[n] == "gpu")
            print(f"{model.stem:<8} {name:<11} {fmt_time(cpu[0]) + ' ' + cpu[1]:>22} {fmt_time(gpu):>10} "
                  f"{fmt_time(both):>11} {min(alone.values()) / both:>5.2f}x "
                  f"{min(alone.values()) * sum(1 / t for t in alone.values()):>10.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="", help="comma-separated model names (default: all nine)")
    ap.add_argument("--time-limit", type=float, default=5.0)
    ap.add_argument("--codl-only", action="store_true", help="only CoDL's models' co-execution")
    args = ap.parse_args()
    wanted = {m.strip() for m in args.models.split(",") if m.strip()}
    models = [m for m in sorted(LIGHT.glob("light_*.onnx")) if not wanted or m.stem[6:] in wanted]
    options = MapOptions(time_limit=args.time_limit)
    if args.codl_only:
        models = []
    head = f"{'model':<14} {'platform':<12} {'subgraphs':>9} {'fallbacks':>9}  {'fallback ops':<22} " \
           f"{'greedy':>10} {'mapped':>10} {'gain':>6} {'best single':>18}"
    print(head)
    print("-" * len(head))
    for path in models:
        for plat in PLATFORMS:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", InputWarning)
                greedy = compile_graph(str(path), plat, mapper="delegate-greedy", options=options).result
                mapped = compile_graph(str(path), plat, mapper="delegate-mapped", options=options).result
                single = compile_graph(str(path), plat, mapper="single", options=options).result
            for r in (greedy, mapped, single):
                bad = validate(r.schedule)
                if bad:
                    raise SystemExit(f"{path.stem} on {plat}: {r.mapper}'s schedule is invalid: {bad[0].message}")
            dl = delegation(greedy.schedule) or {"subgraphs": [], "fallbacks": []}
            ops = ",".join(sorted({f["op"] for f in dl["fallbacks"]})) or "-"
            g, m = greedy.schedule.makespan, mapped.schedule.makespan
            where = single.schedule.cost.platform.devices[single.schedule.slots[0].device].name
            print(f"{path.stem[6:]:<14} {plat:<12} {len(dl['subgraphs']):>9} {len(dl['fallbacks']):>9}  "
                  f"{ops[:22]:<22} {fmt_time(g):>10} {fmt_time(m):>10} {g / m:>5.2f}x "
                  f"{fmt_time(single.schedule.makespan) + ' ' + where:>18}")
    codl(options)


if __name__ == "__main__":
    main()
