"""What makes ``--parallel auto`` faster changes nothing it reports: the layouts set aside that
:func:`mapper.cluster.sweep.more` leaves unestimated leave the JSON byte for byte as estimating
them all does, and a block's price read off rank 0's cost-table column
(:func:`mapper.costing.cost.device_column`) is the whole table's."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from small_llama import LLAMA, llama_graph, superpod

import mapper.cluster.search as search
import mapper.cluster.sweep as sweep
from mapper.cli import main
from mapper.cluster.context import a2a_heads
from mapper.cluster.layers import layer_starts
from mapper.cluster.model import lower_bound, refine
from mapper.cluster.search import _setup
from mapper.cluster.space import Variants, layouts
from mapper.costing.cost import build_cost_table, device_column
from mapper.costing.fusion import fuse_for
from mapper.costing.training import training_step
from mapper.frontend.load import load_graph
from mapper.frontend.sources import ModelFile
from mapper.parallel.gradients import synchronise
from mapper.parallel.layout import LayoutSpec
from mapper.parallel.plan import Plan
from mapper.parallel.rewrite import split_graph
from mapper.platform.loader import load_platform

SIZES = {"LAYERS": 4, "HIDDEN": 256, "HEADS": 8, "KV_HEADS": 2, "FFN": 512, "VOCAB": 1000, "SEQ": 2048, "BATCH": 16}


def _plan_json(tmp_path, name: str) -> bytes:
    out = tmp_path / name
    args = ["compile", LLAMA, *(x for k, v in SIZES.items() for x in ("--param", f"{k}={v}")),
            "--platform", "dgx-h100-superpod", "--nodes", "2", "--train", "--parallel", "auto", "--json", str(out),
            "-q"]
    assert main(args) == 0
    return out.read_bytes()


def _every(model, cands, out, below, *_):
    """The search before: every layout set aside whose floor is below ``below`` estimated."""
    todo = [w for w in out.waiting if w[0] <= below * (1 + sweep.SLACK)]
    out.waiting = [w for w in out.waiting if w[0] > below * (1 + sweep.SLACK)]
    sweep._run(model, cands, todo, out, None, 0.0, len(cands), stop=False)


def test_layouts_left_unestimated_change_no_byte(tmp_path, monkeypatch):
    """With the leaders' simulated steps lengthened (as uneven chunks lengthen them), many layouts
    set aside fall below the best and are looked at again: leaving those that cannot rank among the
    runners-up or lower the bound unestimated gives the same report as estimating every one."""
    refine = search.refine
    monkeypatch.setattr(search, "refine", lambda e: replace(refine(e), step=refine(e).step * 1.5))
    counts = {}

    def counted(fn, name):
        def run(model, cands, out, *rest):
            before = len(out.found)
            fn(model, cands, out, *rest)
            counts[name] = counts.get(name, 0) + len(out.found) - before
        return run

    monkeypatch.setattr(search, "more", counted(sweep.more, "pruned"))
    pruned = _plan_json(tmp_path, "pruned.json")
    monkeypatch.setattr(search, "more", counted(_every, "every"))
    every = _plan_json(tmp_path, "every.json")
    assert pruned == every
    assert counts["every"] > counts["pruned"]  # the test sees layouts set aside and left out


@pytest.mark.parametrize("tensor, memory", [(1, None), (4, None), (4, 0.004)])
def test_rank_zero_column_is_the_cost_tables(tensor, memory):
    """Each of rank 0's tasks of a split training block: the same time and, where it cannot run
    (a GPU of ``memory`` GiB), the same reason as the whole cost table gives (colocated forward and
    backward tasks closed together)."""
    node = load_platform("dgx-h100")
    if memory is not None:
        node = replace(node, devices=tuple(replace(d, memory_gib=memory) if d.kind == "gpu" else d
                                           for d in node.devices))
    graph = load_graph(ModelFile(LLAMA, params=tuple(SIZES.items())))
    gpus = tuple(d.name for d in node.devices if d.kind == "gpu")[:tensor]
    plan = Plan(data=1, tensor=tensor, stages=1, micro_batches=4, devices=gpus, vocab=True, parallel_loss=True)
    split = split_graph(graph, plan, node, first_chunk=True)
    g = synchronise(training_step(fuse_for(split.graph, node), "adam"), split, node, "adam")
    d = node.device_index(gpus[0])
    mine = [t.index for t in g.tasks if t.placement.allow[:1] == (gpus[0],)]
    table = build_cost_table(g, node)
    times, why, footprint = device_column(g, node, d, mine)
    assert footprint == table.footprint
    assert all(times[i] == table.time[i][d] for i in mine)
    reasons = {}
    for ti, di, r in table.reasons:
        if di == d:
            reasons.setdefault(ti, r)
    assert {i: why[i] for i in mine if i in why} == {i: reasons[i] for i in mine if i in reasons}
    assert (memory is not None) == bool(why) == any(r.startswith("colocated") for r in why.values())


def _plan_space(**sizes: int):
    """The plan model of the small Llama at ``sizes`` on two SuperPOD nodes, its variants and the
    layouts of its plan space (16 GPUs, every recompute set off)."""
    plat = superpod(2)
    graph = llama_graph(SIZES, **sizes)
    model = _setup(graph, plat, "adam", lambda x: fuse_for(x, plat)).model
    variants = Variants(LayoutSpec(), a2a_heads(graph), len(layer_starts(graph, model.profile.blocks)))
    cands = layouts(16, 8, model.samples, len(model.profile.blocks), LayoutSpec(), 0, sizes["SEQ"], ("none",),
                    a2a_heads(graph))
    return model, variants, cands


def test_fill_floor_is_below_every_cut_of_the_kind():
    """:func:`mapper.cluster.sweep.fill_floor` against every layout of a small plan space with
    pipelines, interleaved or not, each cut: no closed-form or simulated step, and no lower bound,
    below it; and without interleaving it is above the time floor wherever the pipeline fills."""
    model, variants, cands = _plan_space(BATCH=8, SEQ=1024)
    seen = above = 0
    for lay in (x for c in cands if c.pipeline > 1 for x in variants.all(c)):
        est = model.estimate(lay)
        if est is None:
            continue
        floor = sweep.fill_floor(model, lay)
        assert floor <= min(est.step, refine(est).step, lower_bound(est))
        seen += 1
        above += floor > model.time_floor(lay) * (1 + 1e-6)
    assert seen > 50 and above > 10


def test_a_block_that_cannot_run_gives_infinite_floors_never_nan():
    """A block with a kernel over the GPU's memory is priced at infinity; under sequence parallelism
    (its replicated kernels cut by ``t``) and a context ring (one backward step held back) that
    must stay infinity, never ``inf - inf``: a NaN floor leaves the search's queue unsorted."""
    model, variants, cands = _plan_space(SEQ=65536, BATCH=2048)
    blocked = 0
    for lay in (x for c in cands if c.tensor > 1 for x in variants.all(c)):
        if not any(c.unrunnable for c in model.block_costs(lay.tensor, lay.micro_batch, lay.context)):
            continue
        blocked += 1
        floors = [model.time_floor(lay), sweep.cut_floor(model, lay)]
        floors += [sweep.fill_floor(model, lay)] if lay.pipeline > 1 else []
        assert all(f == math.inf for f in floors), (lay.label(), floors)
    assert blocked > 20


def test_sequence_parallelism_leaves_no_block_time_negative():
    """Sequence parallelism cuts the kernels every tensor rank repeats (norms, residual adds) by
    ``t``, but not the vocabulary-parallel embedding's lookup, which runs on the whole sequence
    before its reduce-scatter (Megatron-Core ``VocabParallelEmbedding``): cutting it took more from
    the first block's backward than it holds."""
    model, _, cands = _plan_space(BATCH=8, SEQ=1024)
    seen = 0
    for lay in (c for c in cands if c.tensor > 1 and c.sequence):
        fw, bw = model._block_times(lay)
        assert min(fw) >= 0 and min(bw) >= 0, lay.label()
        seen += 1
    assert seen > 10
