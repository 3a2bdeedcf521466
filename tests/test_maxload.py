"""The max-load throughput model of Tarnawski et al. (NeurIPS 2020): its loads, colocation,
the contiguous-split DP and the group MILP against brute force, and the import of their inputs."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest

from mapper.cli import main
from mapper.costing.cost import build_cost_table
from mapper.engine.schedule import ScheduleOptions
from mapper.engine.validate import validate
from mapper.frontend.importers.dnn_partitioning import (
    instance_dsl,
    instance_platform,
    parse_instance,
    read_instance,
    read_split,
)
from mapper.frontend.load import graph_from_text
from mapper.mapping import get_mapper
from mapper.mapping.base import MapOptions
from mapper.mapping.maxload import non_contiguous, split_dp, task_groups
from mapper.mapping.objectives import loads
from mapper.platform.loader import parse_platform

DATA = Path(__file__).resolve().parent / "data" / "dnn_partitioning"
BERT24 = DATA / "bert24_training.json"
EXPERT = DATA / "bert24_training_expert.json"
# printed by their throughput-dp/dp.cpp (g++ -O3, 17 digits) for these two files (data/dnn_partitioning/README.md)
DP_OPTIMUM_MS = 41.7458125
EXPERT_MS = 49.404906249999996

PLATFORM = """
name = "mini"
throughput_model = "max-load"
[[device]]
name = "cpu1"
kind = "cpu"
[[device]]
name = "fpga1"
kind = "fpga"
memory_gib = 1
[[device]]
name = "fpga2"
kind = "fpga"
memory_gib = 1
"""


def table(text: str, platform: str = PLATFORM):
    return build_cost_table(graph_from_text(text), parse_platform(platform))


def test_an_output_is_sent_once_and_received_once_per_device():
    cost = table("""graph g {
      task a cost { cpu: 10, fpga: 1 }
      task b cost { cpu: 10, fpga: 2 }
      task c cost { cpu: 10, fpga: 3 }
      task d cost { cpu: 10, fpga: 4 }
      a -> b comm 0.5
      a -> c comm 0.5
      a -> d comm 0.5
    }""")
    # a on fpga1; b and c on fpga2 (one receipt), d on the CPU (pays no transfer)
    got = loads(cost, (1, 2, 2, 0))
    assert got == pytest.approx((10.0, 1 + 0.5, 2 + 3 + 0.5))
    # all together: nothing crosses
    assert loads(cost, (1, 1, 1, 1)) == pytest.approx((0.0, 10.0, 0.0))


def test_the_device_load_model_stays_the_default():
    cost = table("""graph g {
      task a cost { cpu: 10, fpga: 1 }
      task b cost { cpu: 10, fpga: 2 }
      a -> b comm 0.5
    }""", PLATFORM.replace('throughput_model = "max-load"\n', ""))
    assert cost.platform.throughput_model == "device-load"
    assert loads(cost, (1, 2)) == pytest.approx((0.0, 1.0, 2.5))  # incoming only, the sender pays nothing


def random_instance(seed: int, n: int = 7) -> str:
    rng = random.Random(seed)
    lines = ["graph r {"]
    for t in range(n):
        extra = f" colocate k{rng.randint(0, 2)}" if rng.random() < 0.4 else ""
        lines.append(f"  task t{t} cost {{ cpu: {rng.randint(5, 30)}, fpga: {rng.randint(1, 6)} }} "
                     f"memory {rng.randint(1, 5)} GiB{extra}".rstrip())
    for v in range(1, n):
        for u in rng.sample(range(v), min(v, rng.randint(1, 2))):
            lines.append(f"  t{u} -> t{v} comm {rng.randint(0, 4)}")
    lines.append("}")
    return "\n".join(lines)


def brute_force(cost, memory: bool, contiguous: bool = False) -> float:
    best = float("inf")
    g = cost.graph
    for device in itertools.product(range(cost.n_devices), repeat=cost.n_tasks):
        if any(cost.time[t][d] == float("inf") for t, d in enumerate(device)):
            continue
        classes: dict[str, int] = {}
        if any(classes.setdefault(t.colocate, d) != d for t, d in zip(g.tasks, device) if t.colocate):
            continue
        if memory and any(sum(cost.footprint[t] for t in range(cost.n_tasks) if device[t] == d)
                          > cost.memory_capacity[d] for d in range(cost.n_devices)):
            continue
        if contiguous and non_contiguous(cost, device):
            continue
        best = min(best, max(loads(cost, device)))
    return best


@pytest.mark.parametrize("seed", range(6))
def test_the_milp_finds_the_brute_force_optimum(seed):
    cost = table(random_instance(seed), PLATFORM.replace("memory_gib = 1", "memory_gib = 8"))
    result = get_mapper("milp").map(cost, MapOptions(objective="throughput", time_limit=20,
                                                    schedule=ScheduleOptions(memory=True)))
    assert result.status == "optimal"
    assert result.objective_value == pytest.approx(brute_force(cost, True), rel=1e-6)
    assert not validate(result.schedule)
    assert result.lower_bound == pytest.approx(result.objective_value, rel=1e-6)


@pytest.mark.parametrize("seed", range(4))
def test_contiguous_splits_on_request(seed):
    cost = table(random_instance(seed + 20), PLATFORM.replace("memory_gib = 1", "memory_gib = 8"))
    result = get_mapper("milp").map(cost, MapOptions(objective="throughput", time_limit=20, contiguous=True,
                                                    schedule=ScheduleOptions(memory=True)))
    assert result.status == "optimal" and not non_contiguous(cost, result.schedule.device_of)
    assert result.objective_value == pytest.approx(brute_force(cost, True, contiguous=True), rel=1e-6)
    assert result.objective_value >= brute_force(cost, True) * (1 - 1e-9)


def test_the_dp_is_optimal_over_contiguous_splits_of_a_chain():
    rng = random.Random(3)
    lines = ["graph chain {"]
    for t in range(7):
        lines.append(f"  task t{t} cost {{ cpu: {rng.randint(5, 40)}, fpga: {rng.randint(1, 9)} }}")
    lines += [f"  t{t} -> t{t + 1} comm {rng.randint(0, 3)}" for t in range(6)] + ["}"]
    cost = table("\n".join(lines))
    device, value = split_dp(cost, task_groups(cost), memory=False)
    assert max(loads(cost, device)) == pytest.approx(value)
    assert not non_contiguous(cost, device)
    best = float("inf")
    for cuts in itertools.combinations(range(1, 7), 2):  # three segments, each on its own device
        bounds = (0, *cuts, 7)
        for perm in itertools.permutations(range(3)):
            dev = [0] * 7
            for k in range(3):
                for t in range(bounds[k], bounds[k + 1]):
                    dev[t] = perm[k]
            best = min(best, max(loads(cost, dev)))
    for d in range(3):  # or everything on one device
        best = min(best, max(loads(cost, [d] * 7)))
    assert value == pytest.approx(best)


def test_colocated_tasks_share_a_device_with_every_mapper():
    text = random_instance(11, n=9)
    cost = table(text, PLATFORM.replace("memory_gib = 1", "memory_gib = 100"))
    for name in ("heft", "cpop", "peft", "milp"):
        for objective in ("makespan", "throughput"):
            result = get_mapper(name).map(cost, MapOptions(objective=objective, time_limit=5))
            assert not validate(result.schedule), (name, objective)
            where: dict[str, int] = {}
            for t, d in zip(cost.graph.tasks, result.schedule.device_of):
                if t.colocate:
                    assert where.setdefault(t.colocate, d) == d, (name, objective)


def test_the_validator_flags_a_split_colocation_class():
    cost = table("""graph g {
      task a cost { cpu: 1, fpga: 1 } colocate k
      task b cost { cpu: 1, fpga: 1 } colocate k
    }""")
    from mapper.engine.schedule import Assignment, build_schedule

    bad = build_schedule(cost, Assignment((1, 2), None))
    assert [v.kind for v in validate(bad)] == ["colocation"]


def test_a_device_closed_to_one_member_is_closed_to_its_class():
    cost = table("""graph g {
      task a cost { cpu: 1 } colocate k
      task b cost { cpu: 1, fpga: 1 } colocate k
    }""")
    assert cost.time[1][1] == float("inf") and "colocated with 'a'" in cost.reason(1, 1)


# -- their inputs ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bert24():
    inst = read_instance(BERT24)
    return inst, build_cost_table(inst.graph, parse_platform(instance_platform(inst)))


def test_the_expert_split_scores_what_their_code_scores(bert24):
    inst, cost = bert24
    assert len(inst.graph.tasks) == 64 and sum(t.backward for t in inst.graph.tasks) == 32
    device = read_split(EXPERT, inst)
    assert max(loads(cost, device)) * 1e3 == pytest.approx(EXPERT_MS, rel=1e-12)


@pytest.mark.slow
def test_the_dp_reaches_their_optimum_and_the_milp_does_no_worse(bert24):
    inst, cost = bert24
    device, value = split_dp(cost, task_groups(cost), memory=True)
    assert value * 1e3 == pytest.approx(DP_OPTIMUM_MS, rel=1e-9)
    result = get_mapper("milp").map(cost, MapOptions(objective="throughput", time_limit=5,
                                                    schedule=ScheduleOptions(memory=True)))
    assert result.objective_value * 1e3 <= DP_OPTIMUM_MS * (1 + 1e-9)
    assert not validate(result.schedule)


@pytest.mark.slow
def test_import_then_compile_writes_the_max_load(tmp_path, capsys):
    tg, toml, out = tmp_path / "b.tg", tmp_path / "b.toml", tmp_path / "r.json"
    assert main(["import", "dnn-partitioning", str(BERT24), "-o", str(tg), "--platform-out", str(toml)]) == 0
    assert "6 accelerators, 1 CPU core" in capsys.readouterr().out
    assert 'throughput_model = "max-load"' in toml.read_text()
    assert main(["compile", str(tg), "--platform", str(toml), "--objective", "throughput", "--memory",
                 "--time-limit", "5", "--json", str(out), "-q"]) == 0
    data = json.loads(out.read_text())
    assert data["objective_value"] * 1e3 <= DP_OPTIMUM_MS * (1 + 1e-9)
    # the same graph read back from the DSL: same tasks, flags and costs
    g = graph_from_text(tg.read_text())
    inst = read_instance(BERT24)
    assert [(t.name, t.explicit_cost, t.memory, t.colocate, t.backward) for t in g.tasks] == \
        [(t.name, t.explicit_cost, t.memory, t.colocate, t.backward) for t in inst.graph.tasks]
    assert [(e.src, e.dst, e.comm) for e in g.edges] == [(e.src, e.dst, e.comm) for e in inst.graph.edges]


def test_the_throughput_model_option(tmp_path, capsys):
    tg, toml = tmp_path / "b.tg", tmp_path / "b.toml"
    assert main(["import", "dnn-partitioning", str(BERT24), "-o", str(tg), "--platform-out", str(toml)]) == 0
    assert main(["compile", str(tg), "--platform", str(toml), "--throughput-model", "max-load"]) == 2
    assert "--throughput-model applies only with --objective throughput" in capsys.readouterr().err
    assert main(["compile", str(tg), "--platform", str(toml), "--objective", "throughput", "--mapper", "heft",
                 "--throughput-model", "device-load", "-q"]) == 0


@pytest.mark.parametrize("doc, message", [
    ("{", "invalid JSON"),
    ('{"maxSizePerFPGA": 1, "maxFPGAs": 1, "maxCPUs": 1, "nodes": [], "edges": []}', "no nodes"),
    ('{"maxSizePerFPGA": 1, "maxFPGAs": 0, "maxCPUs": 0, "nodes": [], "edges": []}', "no device"),
    ('{"maxSizePerFPGA": 1, "maxFPGAs": 1.5, "maxCPUs": 1, "nodes": [], "edges": []}', "maxFPGAs"),
    ('{"maxSizePerFPGA": 1, "maxFPGAs": 1, "maxCPUs": 1, "edges": []}', "missing key 'nodes'"),
    ('{"maxSizePerFPGA": 1, "maxFPGAs": 1, "maxCPUs": 1, "nodes": [{"id": 0, "supportedOnFpga": 1, '
     '"cpuLatency": 1, "fpgaLatency": -1, "isBackwardNode": 0}], "edges": []}', "fpgaLatency"),
    ('{"maxSizePerFPGA": 1, "maxFPGAs": 1, "maxCPUs": 1, "nodes": [{"id": 0, "supportedOnFpga": 2, '
     '"cpuLatency": 1, "fpgaLatency": 1, "isBackwardNode": 0}], "edges": []}', "supportedOnFpga"),
    ('{"maxSizePerFPGA": 1, "maxFPGAs": 1, "maxCPUs": 1, "nodes": [{"id": 0, "supportedOnFpga": 1, '
     '"cpuLatency": 1, "fpgaLatency": 1, "isBackwardNode": 0}], "edges": [{"sourceId": 0, "destId": 7, '
     '"cost": 1}]}', "no node has id 7"),
    ('{"maxSizePerFPGA": 1, "maxFPGAs": 1, "maxCPUs": 1, "nodes": [{"id": 0, "supportedOnFpga": 1, '
     '"cpuLatency": 1, "fpgaLatency": 1, "isBackwardNode": 0}, {"id": 1, "supportedOnFpga": 1, '
     '"cpuLatency": 1, "fpgaLatency": 1, "isBackwardNode": 0}], "edges": [{"sourceId": 0, "destId": 1, '
     '"cost": 1}, {"sourceId": 1, "destId": 0, "cost": 1}]}', "cycle"),
])
def test_bad_instances_are_input_errors_without_tracebacks(tmp_path, capsys, doc, message):
    path = tmp_path / "bad.json"
    path.write_text(doc)
    assert main(["import", "dnn-partitioning", str(path), "-o", str(tmp_path / "o.tg"),
                 "--platform-out", str(tmp_path / "o.toml")]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "o.tg").exists() and not (tmp_path / "o.toml").exists()


def test_import_refuses_to_overwrite_its_input_and_other_formats_refuse_platform_out(tmp_path, capsys):
    copy = tmp_path / "in.json"
    copy.write_bytes(BERT24.read_bytes())
    assert main(["import", "dnn-partitioning", str(copy), "--platform-out", str(copy)]) == 2
    assert copy.read_bytes() == BERT24.read_bytes()
    assert main(["import", "wfcommons", str(copy), "--platform-out", str(tmp_path / "p.toml")]) == 2
    assert "--platform-out applies to dnn-partitioning" in capsys.readouterr().err


def test_the_dsl_text_names_where_it_came_from():
    inst = parse_instance('{"maxSizePerFPGA": 1e9, "maxFPGAs": 2, "maxCPUs": 1, "nodes": ['
                          '{"id": 3, "name": "conv.1", "supportedOnFpga": false, "cpuLatency": 2, "fpgaLatency": 0,'
                          ' "isBackwardNode": false, "colorClass": 4, "size": 10}], "edges": []}', "x.json")
    text = instance_dsl(inst)
    assert "Tarnawski" in text and "task conv_1 cost { cpu: 0.002 } memory 10.0 colocate c4" in text


# -- 1F1B pipelined training -------------------------------------------------------------------------

PIPE = """
name = "pipe"
throughput_model = "1f1b"
micro_batches = 4
[[device]]
name = "g1"
kind = "gpu"
[[device]]
name = "g2"
kind = "gpu"
[[device]]
name = "g3"
kind = "gpu"
"""


def test_a_1f1b_iteration_is_fill_and_drain_plus_m_minus_one_periods():
    cost = table("""graph g {
      task a cost { gpu: 3 }
      task b cost { gpu: 5 }
      a -> b comm 1
    }""", PIPE)
    from mapper.mapping.objectives import period_of

    split = loads(cost, (0, 1))
    assert split == pytest.approx((3.0, 6.0, 0.0))
    assert period_of(cost, split) == pytest.approx((9 + 3 * 6) / 4)  # 6.75: better than 8 on one device
    assert period_of(cost, loads(cost, (0, 0))) == pytest.approx((8 + 3 * 8) / 4)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("micro", [1, 3, 50])
def test_the_milp_optimises_the_1f1b_period(seed, micro):
    rng = random.Random(seed)
    lines = ["graph p {"]
    for t in range(6):
        lines.append(f"  task t{t} cost {{ g1: {rng.randint(2, 9)}, g2: {rng.randint(2, 9)}, g3: {rng.randint(2, 9)} }}")
    for v in range(1, 6):
        for u in rng.sample(range(v), min(v, rng.randint(1, 2))):
            lines.append(f"  t{u} -> t{v} comm {rng.randint(0, 3)}")
    lines.append("}")
    cost = table("\n".join(lines), PIPE.replace("micro_batches = 4", f"micro_batches = {micro}"))
    from mapper.mapping.objectives import period_of

    best = min(period_of(cost, loads(cost, dev)) for dev in itertools.product(range(3), repeat=6))
    result = get_mapper("milp").map(cost, MapOptions(objective="throughput", time_limit=20))
    assert result.status == "optimal" and result.objective_value == pytest.approx(best, rel=1e-6)
    assert result.lower_bound <= best * (1 + 1e-9)
    assert any(n.startswith("1F1B pipeline of") for n in result.notes)


def test_micro_batch_options_are_checked(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text(PIPE.replace("micro_batches = 4", "micro_batches = 0"))
    tg = tmp_path / "g.tg"
    tg.write_text("graph g {\n  task a cost { gpu: 1 }\n}\n")
    assert main(["compile", str(tg), "--platform", str(bad)]) == 2
    assert "micro_batches" in capsys.readouterr().err
    good = tmp_path / "good.toml"
    good.write_text(PIPE)
    assert main(["compile", str(tg), "--platform", str(good), "--micro-batches", "4"]) == 2
    assert "--micro-batches applies only with --objective throughput" in capsys.readouterr().err
    assert main(["compile", str(tg), "--platform", str(good), "--objective", "throughput", "--micro-batches", "0"]) == 2
    assert main(["compile", str(tg), "--platform", str(good), "--objective", "throughput", "--micro-batches", "2",
                 "-q"]) == 0


def test_a_colocation_cycle_is_one_unit_of_a_contiguous_split():
    cost = table("""graph g {
      task a cost { cpu: 10, fpga: 1 } colocate k
      task b cost { cpu: 10, fpga: 4 }
      task c cost { cpu: 10, fpga: 1 } colocate k
      task d cost { cpu: 10, fpga: 2 }
      a -> b comm 0
      b -> c comm 0
      c -> d comm 0
    }""", PLATFORM.replace("memory_gib = 1", "memory_gib = 8"))
    assert task_groups(cost).n == 3 and task_groups(cost, fuse_cycles=True).n == 2
    free = get_mapper("milp").map(cost, MapOptions(objective="throughput", time_limit=10))
    contiguous = get_mapper("milp").map(cost, MapOptions(objective="throughput", time_limit=10, contiguous=True))
    assert free.objective_value == pytest.approx(4.0)  # {a, c, d} and {b}: a -> b -> c leaves and re-enters
    assert non_contiguous(cost, free.schedule.device_of)
    assert contiguous.objective_value == pytest.approx(6.0) and not non_contiguous(cost, contiguous.schedule.device_of)
