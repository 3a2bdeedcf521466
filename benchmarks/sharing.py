"""Several inference models on MIG slices of one GPU against one model per whole GPU.

    python benchmarks/sharing.py

For each case, a set of K models (the examples at the sizes named) is served two ways:

* ``one per GPU``: each model alone on a whole GPU (dgx-a100 / dgx-h100), back to back: model
  ``j`` serves ``1 / t_j`` requests per second, ``t_j`` its request time there; K GPUs;
* ``slices``: the same request mix (rates in the ratio ``1 / t_j``) on the slices of one GPU,
  ``a100-mig`` (3g.40gb + 2g.20gb + 2x 1g.10gb of an A100 80GB) or ``h100-mig`` (7x 1g.10gb of
  an H100 80GB), placed by ``mapper.serving.sharing`` (exact MILP: least largest slice load
  ``U``): the mix is served at ``1 / U`` of the one-per-GPU rates, from one GPU.

Printed per model: its request time on a whole GPU and on the slice it got; then requests per
second per GPU both ways and their ratio, ``K / U``. (One whole GPU time-shared among the K
models at this mix serves the same per GPU as one per GPU: no case of its own.)

A slice is not k/7 of a GPU: its SMs and memory are the published ``nvidia-smi mig -lgip``
tables (mapper.platform.slices), so a model that cannot fill a whole GPU (launch- or
latency-bound kernels at batch 1) runs almost as fast on 14 or 16 SMs and the slices win; a
model that fills it (large batches) runs ``SMs_full / SMs_slice`` times slower on a slice and
one model per GPU wins. Both kinds of case are printed. MIG slices are isolated: no
interference is modelled between them.
"""

from __future__ import annotations

import math
from pathlib import Path

from mapper.costing.cost import build_cost_table
from mapper.costing.fusion import fuse_for
from mapper.frontend.load import load_graph
from mapper.frontend.sources import ModelFile
from mapper.frontend.workload import App, merge
from mapper.platform.loader import load_platform
from mapper.serving.sharing import plan_on_slices, problem

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
#: label -> (example, params)
MODELS = {
    "resnet50-b1": ("resnet50.tg", {"N": 1}),
    "bert-base-b1": ("bert_base.tg", {"B": 1, "S": 128}),
    "bert-small-b1": ("bert_base.tg", {"B": 1, "S": 128, "H": 512, "A": 8, "F": 2048, "L": 4}),
    "gpt2-block-s128": ("gpt2_block.tg", {"S": 128}),
    "resnet50-b64": ("resnet50.tg", {"N": 64}),
    "bert-base-b32": ("bert_base.tg", {"B": 32, "S": 128}),
}
#: (title, sliced platform, whole-GPU platform, models)
CASES = (
    ("A100: four small models", "a100-mig", "dgx-a100",
     ("resnet50-b1", "bert-base-b1", "bert-small-b1", "gpt2-block-s128")),
    ("H100: seven small models", "h100-mig", "dgx-h100",
     ("resnet50-b1", "bert-base-b1", "bert-small-b1", "gpt2-block-s128", "resnet50-b1", "bert-base-b1",
      "bert-small-b1")),
    ("A100: four large-batch models", "a100-mig", "dgx-a100",
     ("resnet50-b64", "bert-base-b32", "resnet50-b64", "bert-base-b32")),
)


def case(title: str, sliced: str, whole: str, names: tuple[str, ...]) -> None:
    labels, graphs = [], []
    for i, name in enumerate(names):
        file, params = MODELS[name]
        labels.append(name if name not in names[:i] else f"{name}_{i}")
        graphs.append((labels[-1], load_graph(ModelFile(str(EXAMPLES / file), params=tuple(params.items())))))
    graph = merge(graphs, "jobs")
    full = load_platform(whole)
    gpu = next(d.index for d in full.devices if d.kind == "gpu")
    unit = [App(MODELS[n][0], 1.0, math.inf, lab) for n, lab in zip(names, labels)]
    alone = problem(build_cost_table(fuse_for(graph, full), full), unit, (gpu,))
    t_full = [alone.times[j][0] for j in range(len(unit))]
    apps = [App(a.file, t, math.inf, a.label) for a, t in zip(unit, t_full)]  # rate_j = 1 / t_j
    plat = load_platform(sliced)
    shared = plan_on_slices(graph, plat, apps)
    assert shared is not None
    loads = shared.jobs.loads(shared.plan.assign)
    devs = [plat.devices[d] for d in shared.slices]
    print(f"\n{title} ({sliced}: " + ", ".join(f"{d.name} {d.mig} {d.compute_units} SMs" for d in devs) + ")")
    print(f"  {'model':<18} {'whole GPU':>10} {'slice':>8} {'on slice':>10} {'slowdown':>9} {'share':>6}")
    for j, app in enumerate(apps):
        s = shared.plan.assign[j]
        t = shared.jobs.times[j][s]
        print(f"  {app.label:<18} {t_full[j] * 1e3:>8.3f}ms {devs[s].name:>8} {t * 1e3:>8.3f}ms "
              f"{t / t_full[j]:>8.2f}x {1 / loads[s]:>6.2f}")
    k = len(apps)
    per_gpu = sum(1 / t for t in t_full) / k
    sliced_gpu = per_gpu * k / shared.plan.load
    verdict = "slices win" if sliced_gpu > per_gpu else "one model per GPU wins"
    print(f"  requests/s per GPU: one per GPU {per_gpu:,.0f}, slices {sliced_gpu:,.0f} "
          f"(largest slice load U = {shared.plan.load:.2f}, {shared.plan.status}); "
          f"slices / one per GPU {sliced_gpu / per_gpu:.2f}x: {verdict}")


def main() -> None:
    print("MIG slices (SMs and memory from nvidia-smi mig -lgip, NVIDIA MIG User Guide) against whole GPUs; "
          "the one-per-GPU request mix; MIG slices are isolated (no interference modelled)")
    for c in CASES:
        case(*c)


if __name__ == "__main__":
    main()
