"""The cluster planner: platforms, collectives, the plan model, schedules, the CLI."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from mapper.cli import main
from mapper.cluster.plan_graph import plan_graph, replica_platform
from mapper.cluster.schedule import orders, simulate, step_time
from mapper.cluster.search import plan_cluster
from mapper.costing.fusion import fuse_for
from mapper.errors import InfeasibleError, OptionsError, PlatformError
from mapper.frontend.load import load_graph
from mapper.frontend.sources import ModelFile
from mapper.mapping.pipeline import partition, pipelined
from mapper.parallel.collectives import bus_bandwidth, collective, network, send
from mapper.parallel.layout import Layout, LayoutSpec, parse_layout
from mapper.pipeline import compile_graph
from mapper.platform.cluster import flat_platform, with_nodes
from mapper.platform.loader import load_platform, parse_platform

GPT = "examples/gpt.tg"


def small_gpt(layers=8, batch=32, hidden=1024, heads=16):
    return load_graph(ModelFile(GPT, params=(("LAYERS", layers), ("HIDDEN", hidden), ("HEADS", heads),
                                             ("BATCH", batch), ("SEQ", 1024))))


# -- platforms ---------------------------------------------------------------------------------

def test_device_count_expands_and_switch_names_the_group():
    p = parse_platform("""
name = "n"
[[device]]
name = "gpu"
count = 4
kind = "gpu"
peak_gflops = { f32 = 1.0 }
[[switch]]
name = "s"
ports = ["gpu"]
bandwidth_gbs = 10.0
collective_efficiency = 0.5
""")
    assert [d.name for d in p.devices] == ["gpu0", "gpu1", "gpu2", "gpu3"]
    assert [d.index for d in p.devices] == [0, 1, 2, 3]
    assert p.switches[0].ports == ("gpu0", "gpu1", "gpu2", "gpu3") and p.switches[0].collective_efficiency == 0.5


@pytest.mark.parametrize("count", ["0", "2000", "1.5", "true", '"4"'])
def test_bad_count(count):
    with pytest.raises(PlatformError) as err:
        parse_platform(f'name = "n"\n[[device]]\nname = "g"\ncount = {count}\nkind = "gpu"\n')
    assert "count" in str(err.value.obj)


def test_selene_is_a_cluster_of_dgx_a100_nodes():
    sel = load_platform("selene")
    node = load_platform("dgx-a100")
    assert sel.devices == node.devices and sel.cluster is not None
    assert sel.cluster.nics == 8 and sel.cluster.nic_bandwidth_gbs == 25.0
    assert with_nodes(sel, 4).cluster.nodes == 4
    with pytest.raises(OptionsError):
        with_nodes(node, 4)


def test_flat_platform_joins_nodes_through_the_fabric():
    flat = flat_platform(with_nodes(load_platform("selene"), 2))
    assert len(flat.devices) == 18 and flat.cluster is None
    assert flat.switches[-1].name == "fabric" and len(flat.switches[-1].ports) == 16
    with pytest.raises(PlatformError):
        flat_platform(load_platform("selene"))  # 384 nodes: not task by task


@pytest.mark.parametrize("doc, bad", [
    ('node = "dgx-a100"\n[cluster]\nnodes = 0\nnics_per_node = 8\nnic_bandwidth_gbs = 25.0\n', "nodes"),
    ('node = "dgx-a100"\n[cluster]\nnodes = 2\nnics_per_node = 8\nnic_bandwidth_gbs = -1\n', "nic_bandwidth_gbs"),
    ('node = "dgx-a100"\n[cluster]\nnodes = 2\nnics_per_node = 8\nnic_bandwidth_gbs = 25.0\ntopology = "torus"\n',
     "topology"),
    ('node = "nope"\n[cluster]\nnodes = 2\nnics_per_node = 8\nnic_bandwidth_gbs = 25.0\n', "node"),
    ('node = "selene"\n[cluster]\nnodes = 2\nnics_per_node = 8\nnic_bandwidth_gbs = 25.0\n', "node"),
])
def test_bad_cluster_tables(doc, bad):
    with pytest.raises(PlatformError) as err:
        parse_platform('name = "c"\n' + doc, "c.toml")
    assert bad in str(err.value.obj)


# -- collectives -------------------------------------------------------------------------------

def test_collectives_by_hand():
    net = network(with_nodes(load_platform("selene"), 16))
    assert net.intra_gbs == pytest.approx(300 * 0.8) and net.node_gbs == pytest.approx(8 * 25 * 0.96)
    n = 2.0**30
    t, alg = collective(net, "allreduce", n, 8, 8)  # one node: a ring over NVSwitch
    launch = 3e-6  # the A100's kernel launch, paid by every collective
    assert alg == "ring" and t == pytest.approx(launch + 2 * 7 / 8 * n / 240e9 + 14 * 3e-6)
    t, alg = collective(net, "allreduce", n, 16, 8)  # two nodes: the ring's bus is the NICs
    assert alg == "ring" and t == pytest.approx(launch + 2 * 15 / 16 * n / 192e9 + 30 * 5e-6)
    t, alg = collective(net, "allgather", n, 128, 8)  # 16 nodes: half the all-reduce's steps
    assert t - launch <= (collective(net, "allreduce", n, 128, 8)[0] - launch) / 2 * 1.0001
    assert collective(net, "allreduce", n, 1, 1) == (0.0, "local")
    assert send(net, n, True) == pytest.approx(5e-6 + n / 24e9)
    assert bus_bandwidth("allreduce", n, collective(net, "allreduce", n, 8, 8)[0], 8) == pytest.approx(240, rel=0.01)


def test_small_messages_in_a_node_take_the_low_latency_ring():
    """NCCL's LL protocol (v2.12 tuning model): 3.6 us, 0.47 us a step over NVLink, a quarter of the
    bandwidth for an all-reduce; it wins for a decode step's few kilobytes and loses for megabytes."""
    net = network(load_platform("dgx-a100"))
    n = 12288.0  # one token's hidden state of GPT-20B in 16 bits
    for k in (2, 4, 8):
        t, alg = collective(net, "allreduce", n, k, k)
        want = 3e-6 + 3.6e-6 + 2 * (k - 1) * 0.47e-6 + 2 * (k - 1) / k * n / (240e9 / 4)
        assert alg == "ring-ll" and t == pytest.approx(want)
        simple = 3e-6 + 2 * (k - 1) / k * n / 240e9 + 2 * (k - 1) * 3e-6
        assert t < simple
    t, alg = collective(net, "allgather", n, 8, 8)
    assert alg == "ring-ll" and t == pytest.approx(3e-6 + 3.6e-6 + 7 * 0.47e-6 + 7 / 8 * n / 80e9)
    assert collective(net, "allreduce", 64 * 2.0**20, 8, 8)[1] == "ring"  # large: the bandwidth protocol
    plat = load_platform("dgx-a100")
    plain = replace(plat, switches=tuple(replace(sw, step_latency_us=None) for sw in plat.switches))
    # no step latency: not NCCL's protocols; recursive doubling (MPI's choice for small messages) instead
    t, alg = collective(network(plain), "allreduce", n, 8, 8)
    assert alg == "tree" and t == pytest.approx(3e-6 + 3 * (3e-6 + n / 240e9))


# -- schedules ---------------------------------------------------------------------------------

@pytest.mark.parametrize("schedule, p, v, m", [("1f1b", 4, 1, 8), ("1f1b", 4, 2, 8), ("1f1b", 2, 4, 6),
                                               ("gpipe", 3, 1, 5), ("1f1b", 8, 1, 3), ("1f1b", 4, 4, 4)])
def test_bubble_matches_a_brute_force_schedule(schedule, p, v, m):
    f, b = 1.0, 2.0  # per micro-batch on each rank, all its chunks together
    sim = simulate(orders(schedule, p, v, m), lambda op: (f if op[0] == "F" else b) / v)
    assert sim == pytest.approx((m + (p - 1) / v) * (f + b))
    assert step_time([f + b] * p, m, v) == pytest.approx(sim)


def test_every_op_runs_once_in_each_order():
    for p, v, m in ((4, 2, 8), (3, 1, 7)):
        ops = [op for seq in orders("1f1b", p, v, m) for op in seq]
        assert len(ops) == len(set(ops)) == 2 * p * v * m


def test_partition_is_contiguous_and_balanced():
    starts = partition([1, 1, 1, 1, 4, 1, 1, 1], 3)
    assert starts == (0, 4, 5)
    assert partition([1.0] * 3, 4) is None
    # stages may start only where allowed (the single-node splitter: never inside a tensor region)
    assert partition([1, 1, 1, 1, 4, 1, 1, 1], 3, allowed=[2, 6]) == (0, 2, 6)
    assert partition([1, 1, 1, 1, 4, 1, 1, 1], 3, allowed=[2, 4, 6]) == (0, 4, 6)
    assert partition([1.0] * 8, 3, allowed=[4]) is None


def test_one_pipeline_formula():
    assert pipelined(10.0, 4.0, 3) == 18.0  # the sum, then m - 1 more of the slowest
    assert pipelined(10.0, 4.0, 3, 2) == 3 * 4.0 + 6.0 / 2  # interleaved: the bubble over v
    assert step_time([1.0, 4.0, 2.0, 3.0], 3, 1) == pipelined(10.0, 4.0, 3)


# -- layouts and the plan model ----------------------------------------------------------------

@pytest.mark.parametrize("text", ["tensor", "tensor=0", "tensor=x", "tensr=2", "recompute=some", "zero=4",
                                  "sequence=yes", "tensor=2,tensor=4", "=3"])
def test_bad_layouts(text):
    with pytest.raises(OptionsError):
        parse_layout(text)


def test_layout_keys():
    given = parse_layout("tensor=8, pipeline=2,recompute=full,sequence=on,zero=1")
    assert given == LayoutSpec(tensor=8, pipeline=2, recompute="full", sequence=True, zero=1)
    assert given.fixed() == {"tensor": 8, "pipeline": 2, "recompute": "full", "zero": 1, "sequence": True}
    assert given.text() == "tensor=8, pipeline=2, recompute=full, zero=1, sequence=on"
    assert given.allows(Layout(8, 2, 4, 1, 1, "full", 1, True)) and not given.allows(Layout(8, 2, 4, 1, 1, "full", 0, True))


def _choice(layout, nodes=2, **kw):
    plat = with_nodes(load_platform("selene"), nodes)
    g = small_gpt(**kw)
    return g, plat, plan_cluster(g, plat, LayoutSpec(**layout), "adam", lambda x: fuse_for(x, plat))


def test_memory_follows_korthikanti():
    """Activations of one micro-batch per layer: 34 s b h + 5 a s^2 b bytes (Korthikanti et al. 2023,
    eq. 1) less the two dropout masks (2 s b h) the graph has no ops for; the loss's f32 logits
    (4 s b v / t, section 4.3); divided by t with sequence parallelism; 2 s b h per layer, less
    with full recomputation."""
    s, h, a, layers = 1024, 1024, 16, 8
    per_layer = (32 * s * h + 5 * a * s * s) * 1  # b = 1
    g, plat, ch = _choice({"tensor": 1, "pipeline": 1, "data": 16, "micro_batch": 1, "recompute": "none",
                           "zero": 0})
    act = ch.best.memory["activations"]
    # the embedding sum, the final norm's and the LM head's inputs, and the loss's f32 logits (vocabulary 51,200)
    ends = 2 * s * h + 2 * s * h + 2 * s * h + 4 * s * 51200
    assert act == pytest.approx(layers * per_layer + ends, rel=0.02)
    _, _, sel = _choice({"tensor": 1, "pipeline": 1, "data": 16, "micro_batch": 1, "recompute": "selective",
                         "zero": 0})
    assert sel.best.memory["activations"] == pytest.approx(act - layers * 5 * a * s * s, rel=0.02)
    _, _, sp = _choice({"tensor": 4, "pipeline": 1, "data": 4, "micro_batch": 1, "recompute": "none",
                        "zero": 0, "sequence": True})
    assert sp.best.memory["activations"] == pytest.approx(act / 4, rel=0.05)


def test_optimizer_state_is_sharded_by_zero():
    base = {"tensor": 1, "pipeline": 1, "data": 16, "micro_batch": 1, "recompute": "full"}
    mem = {z: _choice({**base, "zero": z})[2].best.memory for z in range(4)}
    assert mem[1]["optimizer"] == pytest.approx(mem[0]["optimizer"] / 16)
    assert mem[2]["gradients"] == pytest.approx(mem[0]["gradients"] / 16)
    # ZeRO 3: the shards, and two neighbouring blocks gathered whole (the largest: the LM head, V h 16-bit
    # weights, beside a smaller block; mapper.cluster.zero3.live)
    v, h = 51200, 1024
    assert 2 * v * h <= mem[3]["weights"] - mem[0]["weights"] / 16 <= 2 * v * h + 2 * 12 * h * h
    # Adam in Megatron-LM's mixed precision: f32 states, master weights and main gradients, 16 bytes per
    # 2-byte weight (20 bytes per parameter in all)
    assert mem[0]["optimizer"] == pytest.approx(8 * mem[0]["weights"])


@pytest.mark.parametrize("layout", [
    {"tensor": 2, "pipeline": 4, "micro_batch": 1, "interleave": 1},
    {"tensor": 2, "pipeline": 4, "micro_batch": 1, "interleave": 2},
    {"tensor": 1, "pipeline": 2, "micro_batch": 2, "recompute": "full"},
])
def test_plan_graph_schedule_agrees_with_the_model(layout):
    g, plat, ch = _choice(layout)
    est = ch.best
    graph = plan_graph(est, g.name)
    result = compile_graph(graph, replica_platform(plat, "gpu0", est.layout.pipeline, plat.name), mapper="heft",
                           fuse="none")  # validated inside
    assert result.result.schedule.makespan == pytest.approx(est.step, rel=0.05)


def test_auto_is_no_slower_than_any_given_layout():
    g, plat, auto = _choice({})
    for lay in ({"tensor": 8, "pipeline": 2}, {"tensor": 1, "pipeline": 1}):
        given = plan_cluster(g, plat, LayoutSpec(**lay), "adam", lambda x: fuse_for(x, plat)).best
        if given.fits:
            assert auto.best.step <= given.step * 1.0001


# -- command line ------------------------------------------------------------------------------

def test_compile_gpt_on_selene(tmp_path, capsys):
    out = tmp_path / "o.json"
    assert main(["compile", GPT, "--param", "LAYERS=8", "--param", "BATCH=64", "--platform", "selene",
                 "--nodes", "4", "--train", "--optimizer", "adam", "--parallel", "auto", "-q",
                 "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    par = doc["parallel"]
    assert set(par["plan"]) >= {"tensor", "pipeline", "data", "micro_batch", "interleave", "recompute", "zero",
                                "sequence"}
    assert par["fits"] is True and par["gpus"] == 32
    assert doc["makespan"] == pytest.approx(par["step_time"], rel=0.05)
    assert par["peak_memory"]["total"] <= 80 * 2**30 and par["tokens_per_s"] > 0 and 0 < par["mfu"] < 1
    assert par["hardware_tflops_per_gpu"] >= par["model_tflops_per_gpu"]


def test_given_layout_that_cannot_fit_exits_3(capsys):
    code = main(["compile", GPT, "--param", "LAYERS=64", "--param", "HIDDEN=8192", "--param", "HEADS=64",
                 "--platform", "selene", "--nodes", "1", "--train", "--optimizer", "adam",
                 "--parallel", "tensor=1,pipeline=1,data=8,recompute=none,zero=0"])
    err = capsys.readouterr().err
    assert code == 3 and "does not fit" in err and "bytes" in err


@pytest.mark.parametrize("argv, needle", [
    (["--parallel", "tensor=3x"], "tensor"),
    (["--parallel", "pipes=2"], "unknown layout key"),
    (["--parallel", "sideways"], "unknown --parallel mode"),
    (["--nodes", "0"], "node count of at least 1"),
    (["--nodes", "a100=2"], "one kind of node"),
])
def test_bad_options_exit_2(argv, needle, capsys):
    try:
        code = main(["compile", GPT, "--param", "LAYERS=2", "--platform", "selene", "--train", *argv])
    except SystemExit as stop:  # argparse's own checks
        code = stop.code
    assert code == 2 and needle in capsys.readouterr().err


def test_nodes_on_a_single_machine_exits_2(capsys):
    assert main(["compile", GPT, "--platform", "dgx-a100", "--nodes", "2"]) == 2
    assert "cluster platforms" in capsys.readouterr().err


def test_layout_without_train_exits_2(capsys):
    assert main(["compile", GPT, "--param", "LAYERS=2", "--platform", "selene", "--parallel", "tensor=8"]) == 2
    assert "--train" in capsys.readouterr().err


def test_infeasible_is_raised_for_a_given_layout():
    with pytest.raises(InfeasibleError):
        from mapper.cluster.driver import plan_step

        plat = with_nodes(load_platform("selene"), 1)
        g = small_gpt(layers=64, hidden=8192, heads=64, batch=8)
        plan_step(g, plat, "tensor=1,pipeline=1,recompute=none,zero=0", "adam", lambda x: x)


def test_layout_label():
    assert "interleave 2" in Layout(2, 4, 1, 1, 2).label()


def test_layout_on_one_machine_and_reports(tmp_path):
    html, trace = tmp_path / "o.html", tmp_path / "o.json"
    assert main(["compile", GPT, "--param", "LAYERS=4", "--param", "BATCH=16", "--param", "HIDDEN=1024",
                 "--param", "HEADS=16", "--platform", "dgx-a100", "--train", "--optimizer", "adam",
                 "--parallel", "tensor=2,pipeline=4,micro_batch=1", "-q", "--html", str(html),
                 "--trace", str(trace)]) == 0
    page = html.read_text()
    assert "stage0" in page and "stage3" in page and "fwd.c0.mb0" in page
    events = json.loads(trace.read_text())
    names = {e.get("name") for e in (events["traceEvents"] if isinstance(events, dict) else events)}
    assert "bwd.c3.mb3" in names


def test_progress_is_reported():
    seen = []
    g = small_gpt()
    plat = with_nodes(load_platform("selene"), 4)
    import mapper.cluster.sweep as sweep

    old = sweep.PROGRESS_EVERY
    sweep.PROGRESS_EVERY = 0.0
    try:
        plan_cluster(g, plat, LayoutSpec(), "adam", lambda x: fuse_for(x, plat), seen.append)
    finally:
        sweep.PROGRESS_EVERY = old
    assert seen and seen[-1].phase.startswith("cluster layouts") and seen[-1].incumbent is not None


def test_gpipe_keeps_every_micro_batch_and_1f1b_at_most_p():
    g, plat, ch = _choice({"tensor": 1, "pipeline": 4, "data": 4, "micro_batch": 1, "recompute": "none",
                           "zero": 0, "interleave": 1})
    from mapper.cluster.model import PlanModel
    from mapper.cluster.profile import Profile
    from mapper.parallel.collectives import network

    prof = Profile(g, plat, "gpu0", lambda x: fuse_for(x, plat), "adam")
    model = PlanModel(prof, network(plat), 32, "adam", 80 * 2**30)
    lay = ch.best.layout
    one, gp = model.estimate(lay, "1f1b"), model.estimate(lay, "gpipe")
    m = 32 // 4
    ends = [*one.chunks[1:], len(prof.blocks)]
    acts = [model._activations(lay, range(a, e))[0] for a, e in zip(one.chunks, ends)]  # one micro-batch's
    assert gp.memory["activations"] == pytest.approx(m * acts[gp.fullest], rel=1e-9)
    assert gp.memory["activations"] == pytest.approx(m * max(acts), rel=0.05)  # activations dominate
    assert one.memory["activations"] == pytest.approx(min(4 - one.fullest, m) * acts[one.fullest], rel=1e-9)
    assert gp.pipeline == pytest.approx(one.pipeline)  # the same bubble, more memory


def test_tensor_groups_wider_than_a_node_cross_the_fabric():
    g = small_gpt(layers=4, hidden=2048, heads=32, batch=64)
    plat = with_nodes(load_platform("selene"), 4)
    wide = plan_cluster(g, plat, LayoutSpec(tensor=16, pipeline=2, micro_batch=1, interleave=1),
                        "adam", lambda x: fuse_for(x, plat)).best
    node = plan_cluster(g, plat, LayoutSpec(tensor=8, pipeline=2, micro_batch=1, interleave=1),
                        "adam", lambda x: fuse_for(x, plat)).best
    assert wide.layout.tensor == 16 and wide.step > node.step  # its all-reduces go through the NICs


def test_small_messages_over_many_nodes_take_the_tree():
    net = network(with_nodes(load_platform("selene"), 384))
    t, alg = collective(net, "allreduce", 1000.0, 3072, 8)
    assert alg == "tree" and t == pytest.approx(3e-6 + 12 * (5e-6 + 1000.0 / 24e9))
    assert collective(net, "allreduce", 2.0**30, 3072, 8)[1] == "hierarchical"


# -- fleets ------------------------------------------------------------------------------------

def test_fleet_platform_and_node_counts():
    from mapper.platform.cluster import parse_nodes

    fleet = load_platform("fleet-a100-v100")
    assert [k.kind for k in fleet.fleet.kinds] == ["a100", "v100"]
    v100 = fleet.fleet.kind("v100").platform
    assert v100.cluster.nics == 4 and v100.devices[1].memory_gib == 32
    two = with_nodes(fleet, parse_nodes("a100=1, v100=1"))
    flat = flat_platform(two)
    assert len(flat.devices) == 18 and "v1000_gpu3" in {d.name for d in flat.devices}
    assert flat.switches[-1].name == "between"
    only = with_nodes(fleet, parse_nodes("a100=0,v100=3"))
    assert [k.kind for k in only.fleet.kinds] == ["v100"] and only.devices == v100.devices
    for bad, needle in (("4", "give each kind's nodes"), ("h100=2", "no node kind"), ("a100=0,v100=0", "no node"),
                        ("a100=1,a100=2", "twice"), ("a100=x", "node count")):
        with pytest.raises(OptionsError) as err:
            with_nodes(fleet, parse_nodes(bad))
        assert needle in err.value.message


def test_fleet_plans_each_kind_and_keeps_the_fastest(tmp_path):
    out = tmp_path / "o.json"
    assert main(["compile", GPT, "--param", "LAYERS=8", "--param", "BATCH=64", "--platform", "fleet-a100-v100",
                 "--nodes", "a100=1,v100=2", "--train", "--optimizer", "adam", "--parallel", "auto", "-q",
                 "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    par = doc["parallel"]
    assert par["kind"] in ("a100", "v100", "mixed") and par["fits"]
    if any("data parallel over" in n for n in doc["notes"]):  # one stage, its replicas on both kinds
        assert all(s["layers"] == 8 for s in par["stages"])
    else:
        assert sum(s["layers"] for s in par["stages"]) == 8
    assert {s["kind"] for s in par["stages"]} <= {"a100", "v100"}
    assert any("parallel fleet" in n for n in doc["notes"])
    assert main(["compile", GPT, "--param", "LAYERS=8", "--param", "BATCH=64", "--platform", "fleet-a100-v100",
                 "--nodes", "a100=0,v100=2", "--train", "--parallel", "auto", "-q", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["parallel"]["kind"] == "v100"


@pytest.mark.parametrize("doc, needle", [
    ('[[fleet]]\nkind = "a"\nnode = "dgx-a100"\n[fleet.cluster]\nnodes = 1\nnics_per_node = 1\n'
     'nic_bandwidth_gbs = 1.0\n[between]\nbandwidth_gbs = 1.0\n', "two or more"),
    ('[[fleet]]\nkind = "a"\nnode = "dgx-a100"\n[fleet.cluster]\nnodes = 1\nnics_per_node = 1\nnic_bandwidth_gbs = 1.0\n'
     '[[fleet]]\nkind = "a"\nnode = "dgx-h100"\n[fleet.cluster]\nnodes = 1\nnics_per_node = 1\nnic_bandwidth_gbs = 1.0\n'
     '[between]\nbandwidth_gbs = 1.0\n', "twice"),
    ('[[fleet]]\nkind = "a"\nnode = "dgx-a100"\n[fleet.cluster]\nnodes = 1\nnics_per_node = 1\nnic_bandwidth_gbs = 1.0\n'
     '[[fleet]]\nkind = "b"\nnode = "selene"\n[fleet.cluster]\nnodes = 1\nnics_per_node = 1\nnic_bandwidth_gbs = 1.0\n'
     '[between]\nbandwidth_gbs = 1.0\n', "itself a cluster"),
    ('[[fleet]]\nkind = "a"\nnode = "dgx-a100"\n[fleet.cluster]\nnodes = 1\nnics_per_node = 1\nnic_bandwidth_gbs = 1.0\n'
     '[[fleet]]\nkind = "b"\nnode = "dgx-h100"\n[fleet.cluster]\nnodes = 0\nnics_per_node = 1\nnic_bandwidth_gbs = 1.0\n'
     '[between]\nbandwidth_gbs = 1.0\n', "fleet[1].cluster.nodes"),
])
def test_bad_fleet_files(doc, needle):
    with pytest.raises(PlatformError) as err:
        parse_platform('name = "f"\n' + doc, "f.toml")
    assert needle in err.value.message or needle in str(err.value.obj)


@pytest.mark.parametrize("stage", ["lower", "platform", "split", "cost", "map", "validate"])
def test_every_dump_stage_with_the_cluster_planner(stage, capsys):
    assert main(["compile", GPT, "--param", "LAYERS=2", "--param", "BATCH=16", "--platform", "selene", "--nodes",
                 "2", "--train", "--parallel", "auto", "--dump-after", stage]) == 0
    assert capsys.readouterr().out.strip()


def test_run_refuses_a_cluster_layout(capsys):
    assert main(["run", GPT, "--param", "LAYERS=2", "--param", "BATCH=8", "--param", "HIDDEN=64", "--param",
                 "HEADS=4", "--param", "SEQ=16", "--param", "VOCAB=64", "--platform", "dgx-a100",
                 "--parallel", "tensor=2"]) == 2
    assert "mapper compile --train" in capsys.readouterr().err


def test_mixed_partition_is_the_best_contiguous_split():
    """Against every contiguous split, for stages priced on different kinds in a fixed order."""
    import itertools

    from mapper.mapping.pipeline import stage_partition

    rng = __import__("random").Random(4)
    for _ in range(40):
        n = rng.randint(3, 9)
        fast = [rng.uniform(1, 5) for _ in range(n)]
        slow = [w * rng.uniform(1.2, 3.0) for w in fast]
        order = [rng.randint(0, 1) for _ in range(rng.randint(2, min(4, n)))]
        weights = [fast, slow]
        best = min(max(sum(weights[order[k]][a:b]) for k, (a, b) in enumerate(zip((0, *cuts), (*cuts, n))))
                   for cuts in itertools.combinations(range(1, n), len(order) - 1))
        starts = stage_partition(weights, order)
        got = max(sum(weights[order[k]][a:b]) for k, (a, b) in enumerate(zip(starts, (*starts[1:], n))))
        assert got == pytest.approx(best, rel=1e-6)


def test_a_mixed_pipeline_beats_each_kind_alone_and_schedules_as_predicted(tmp_path):
    out, html = tmp_path / "o.json", tmp_path / "o.html"
    assert main(["compile", GPT, "--param", "LAYERS=24", "--param", "BATCH=256", "--platform", "fleet-a100-v100",
                 "--nodes", "a100=2,v100=4", "--train", "--optimizer", "adam", "--parallel", "auto", "-q",
                 "--json", str(out), "--html", str(html)]) == 0
    doc = json.loads(out.read_text())
    par = doc["parallel"]
    assert par["kind"] == "mixed" and par["fits"] and par["gpus"] == 48
    page = html.read_text()
    assert "_v100" in page and "_a100" in page  # the Gantt's lanes name each stage's group
    kinds = [s["kind"] for s in par["stages"]]
    assert set(kinds) == {"a100", "v100"} and sum(s["layers"] for s in par["stages"]) == 24
    a100 = [s["layers"] for s in par["stages"] if s["kind"] == "a100"]
    v100 = [s["layers"] for s in par["stages"] if s["kind"] == "v100"]
    assert min(a100) > max(v100)  # the faster GPUs hold more layers
    alone = [n for n in doc["notes"] if "alone: best" in n][0]
    scale = {"ms": 1e-3, "s": 1.0, "h": 3600.0}
    for k in ("a100", "v100"):
        value, unit = alone.split(f"{k} alone: best ")[1].split(";")[0].split()[:2]
        assert par["step_time"] < float(value) * scale[unit]
    assert doc["makespan"] == pytest.approx(par["step_time"], rel=0.05)  # the validated schedule agrees


def test_data_parallel_over_kinds_shares_the_batch_by_speed(tmp_path):
    out = tmp_path / "o.json"
    assert main(["compile", GPT, "--param", "LAYERS=24", "--param", "BATCH=256", "--platform", "fleet-a100-v100",
                 "--nodes", "a100=2,v100=4", "--train", "--optimizer", "adam", "--parallel", "pipeline=1", "-q",
                 "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    par = doc["parallel"]
    assert par["kind"] == "mixed" and par["fits"]
    shares = {s["kind"]: s for s in par["stages"]}
    assert set(shares) == {"a100", "v100"}
    assert sum(s["share"] * s["data"] for s in par["stages"]) == pytest.approx(1.0)
    assert shares["a100"]["share"] > 1.5 * shares["v100"]["share"]  # the faster GPUs take more of the batch
    assert any("data parallel over" in n for n in doc["notes"])
    assert doc["makespan"] == pytest.approx(par["step_time"], rel=0.05)


@pytest.mark.slow
def test_without_replans_on_what_is_left_and_says_what_changed(tmp_path, capsys):
    out = tmp_path / "o.json"
    assert main(["compile", GPT, "--param", "LAYERS=24", "--param", "BATCH=256", "--platform", "fleet-a100-v100",
                 "--nodes", "a100=2,v100=4", "--without", "v100", "--train", "--optimizer", "adam", "--parallel",
                 "auto", "-q", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    par = doc["parallel"]
    assert par["gpus"] == 16 and {s["kind"] for s in par["stages"]} == {"a100"}
    assert par["previous"]["gpus"] == 48 and par["previous"]["step_time"] < par["step_time"]
    assert any("re-planned without v100" in n and "over several node kinds" in n for n in doc["notes"])
    assert main(["compile", GPT, "--param", "LAYERS=8", "--param", "BATCH=64", "--platform", "selene", "--nodes", "4",
                 "--without", "2", "--train", "--parallel", "auto", "-q", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["parallel"]["gpus"] == 16
    for argv, needle in ((["--platform", "selene", "--nodes", "2", "--without", "2"], "no node at all"),
                         (["--platform", "fleet-a100-v100", "--without", "h100"], "no node kind 'h100'"),
                         (["--platform", "fleet-a100-v100", "--without", "a100=99"], "from 1 to the 16"),
                         (["--platform", "dgx-a100", "--without", "1"], "one machine")):
        assert main(["compile", GPT, *argv, "--train", "--parallel", "auto"]) == 2
        assert needle in capsys.readouterr().err


@pytest.mark.slow
def test_an_even_split_over_a_fleet_is_never_better_than_the_plan():
    """The baseline of benchmarks/hetero.py: layers and data shares split as if every GPU were of the
    first kind. On A100 + L4 (and three kinds) the planned layout is at least as fast."""
    from mapper.cluster.search import plan_even_split

    graph = load_graph(ModelFile(GPT, params=(("LAYERS", 8), ("BATCH", 64))))
    for name, nodes in (("fleet-a100-l4", {"a100": 1, "l4": 1}),
                        ("fleet-h100-a100-v100", {"h100": 1, "a100": 1, "v100": 1})):
        fleet = with_nodes(load_platform(name), nodes)
        planned = plan_cluster(graph, fleet, LayoutSpec(), "adam", lambda g, f=fleet: fuse_for(g, f))
        even = plan_even_split(graph, fleet, "adam", lambda g, f=fleet: fuse_for(g, f))
        assert planned.best.fits and even is not None
        assert planned.best.step <= even.best.step * (1 + 1e-9) or not even.best.fits
        assert planned.kind in {k.kind for k in fleet.fleet.kinds} | {"mixed"}


@pytest.mark.slow
def test_a_fleet_may_leave_a_slow_kind_idle():
    """Every subset of two or more kinds is planned too: a kind that only slows the others down
    stays idle, and the notes and JSON say which kinds the layout uses."""
    import json as _json

    graph = load_graph(ModelFile(GPT, params=(("LAYERS", 8), ("BATCH", 64))))
    fleet = with_nodes(load_platform("fleet-h100-a100-v100"), {"h100": 1, "a100": 1, "v100": 1})
    planned = plan_cluster(graph, fleet, LayoutSpec(), "adam", lambda g: fuse_for(g, fleet))
    labels = {k for k, _, _ in planned.others}
    assert {"h100+a100", "h100+v100", "a100+v100"} & (labels | {"+".join(planned.kinds_used)})
    best_other = min(step for _, step, fits in planned.others if fits)
    assert planned.best.step <= best_other * (1 + 1e-9)
    if planned.kinds_used:
        assert any("nodes only" in n for n in planned.notes())
        assert _json.loads(_json.dumps(planned.to_json()))["kinds_used"] == list(planned.kinds_used)


def test_the_plan_space_bound_is_a_bound_and_certifies_the_choice(tmp_path):
    """model.lower_bound never exceeds a layout's simulated step (checked on every layout scored,
    interleaved and GPipe ones included); the layout kept is proven when no other layout's bound
    is lower, and the JSON says so."""
    from mapper.cluster.model import lower_bound, refine

    graph = load_graph(ModelFile(GPT, params=(("LAYERS", 8), ("BATCH", 64))))
    plat = with_nodes(load_platform("selene"), 2)
    choice = plan_cluster(graph, plat, LayoutSpec(), "adam", lambda g: fuse_for(g, plat))
    assert choice.ranked and choice.bound is not None
    for est in choice.ranked:
        assert lower_bound(est) <= refine(est).step * (1 + 1e-9)
    assert choice.bound <= choice.best.step * (1 + 1e-9)
    doc = choice.to_json()
    assert doc["proven"] == choice.proven and doc["bound"] == choice.bound
    fleet = with_nodes(load_platform("fleet-a100-v100"), {"a100": 1, "v100": 1})
    mixed = plan_cluster(graph, fleet, LayoutSpec(), "adam", lambda g: fuse_for(g, fleet))
    assert mixed.bound is not None and mixed.bound <= mixed.best.step * (1 + 1e-9)
    assert any("proven the fastest" in n or "not proven" in n for n in mixed.notes())


@pytest.mark.parametrize("seed", range(30))
def test_exact_split_against_every_split(seed):
    """mapper.cluster.split.exact_split minimises (m - 1) max T + sum T over every contiguous split
    (stages that do not fit cost inf), and its bound is the least over every split of
    max_r (sum_{c<r} T_c + m T_r), the plan model's lower bound, to a millionth."""
    import itertools
    import random

    import numpy as np

    from mapper.cluster.split import exact_split

    rng = random.Random(seed)
    n, p, m = rng.randint(2, 9), rng.randint(1, 4), rng.choice((1, 2, 3, 8, 64))
    if p > n:
        p = n
    kinds = [[rng.uniform(0.5, 3.0) for _ in range(n)] for _ in range(2)]
    order = [rng.randrange(2) for _ in range(p)]
    cost = []
    for s in range(p):
        c = np.full((n + 1, n + 1), np.inf)
        for a in range(n):
            for e in range(a + 1, n + 1):
                if rng.random() > 0.15:  # some stages do not fit
                    c[a, e] = sum(kinds[order[s]][a:e]) + (rng.uniform(0, 0.5) if s + 1 < p else 0.0)
        cost.append(c)
    splits = [(0, *cuts) for cuts in itertools.combinations(range(1, n), p - 1)]
    stages = [[float(cost[s][a, e]) for s, (a, e) in enumerate(zip(st, (*st[1:], n)))] for st in splits]
    fitting = [t for t in stages if all(x < np.inf for x in t)]
    got = exact_split(cost, m)
    if not fitting:
        assert got is None
        return
    assert got is not None
    starts, bound = got
    mine = [float(cost[s][a, e]) for s, (a, e) in enumerate(zip(starts, (*starts[1:], n)))]
    best = min((m - 1) * max(t) + sum(t) for t in fitting)
    assert (m - 1) * max(mine) + sum(mine) == pytest.approx(best, rel=1e-12)
    least = min(max(sum(t[:r]) + m * x for r, x in enumerate(t)) for t in fitting)
    assert least * (1 - 1e-5) <= bound <= least * (1 + 1e-12)


def test_the_planner_equals_enumeration_of_its_space_on_a_small_fleet():
    """Every contiguous layer split and every division of the batch among the kinds, enumerated
    (mapper.cluster.search.mixed_space with exhaustive=True), finds no layout faster than the
    planner's own space: the exact split and the greedy shares (the gradient sync, priced for
    the chosen split, may differ by a hair)."""
    from mapper.cluster.search import mixed_space

    graph = load_graph(ModelFile(GPT, params=(("LAYERS", 2), ("BATCH", 32))))
    fleet = with_nodes(load_platform("fleet-a100-v100"), {"a100": 1, "v100": 1})
    planned = min(e.step for e in mixed_space(graph, fleet, "adam", lambda g: fuse_for(g, fleet)) if e.fits)
    every = min(e.step for e in mixed_space(graph, fleet, "adam", lambda g: fuse_for(g, fleet), exhaustive=True)
                if e.fits)
    assert planned == pytest.approx(every, rel=1e-3) and planned >= every * (1 - 1e-9)
