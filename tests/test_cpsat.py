"""The `cpsat` mapper (OR-Tools CP-SAT) agrees with the MILP where both prove optima."""

from __future__ import annotations

import random
import time
from dataclasses import replace
from pathlib import Path

import pytest
from randdag import heft_paper_example, make_cost, make_graph, make_platform, random_edges, random_instance

from mapper.cli import main
from mapper.core.graph import Placement
from mapper.engine.schedule import ScheduleOptions
from mapper.engine.validate import validate
from mapper.mapping import get_mapper
from mapper.mapping.base import MapOptions
from mapper.mapping.cpsat import search
from mapper.mapping.exact import cpsat_model
from mapper.mapping.exact.cpsat_model import solve_cpsat, whole_times
from mapper.mapping.orders import canonical_devices, identical_device_classes, pooled_classes

HEFT = str(Path(__file__).resolve().parent.parent / "examples" / "heft_paper.tg")


@pytest.fixture(autouse=True)
def milp_only(monkeypatch):
    """The milp mapper without its CP-SAT turn, so that the two engines check each other."""
    monkeypatch.setattr("mapper.mapping.milp.CPSAT_SHARE", 0.0)


def identical(seed: int, n: int, procs: int, comm: float | None = 0.0, pin: int | None = None):
    """P|prec|Cmax as in the Standard Task Graph set: whole task times on
    ``procs`` identical processors; edges with a whole transfer time ``comm``
    between any two of them (or none); task ``pin`` pinned to the first."""
    rng = random.Random(seed)
    edges = [(u, v, 0.0, comm) for u, v in random_edges(rng, n, "layered")]
    placement = [Placement(allow=("cpu0",)) if t == pin else Placement() for t in range(n)]
    graph = make_graph(n, edges, placement=placement, name=f"identical{seed}")
    times = [[float(rng.randint(1, 20))] * procs for _ in range(n)]
    links = [(a, b, 1.0, 0.0) for a in range(procs) for b in range(a + 1, procs)]
    return make_cost(graph, make_platform(["cpu"] * procs, links), times)


@pytest.mark.parametrize("seed", range(4))
def test_identical_processors_with_whole_times_are_solved_exactly(seed):
    # whole times give an exact model (one tick per unit); the value-precedence
    # cut over interchangeable processors and the redundant cumulative must
    # keep the MILP's optimum, pinned task or transfer times or not
    cost = identical(seed, 9, 3, comm=None if seed % 2 else 2.0, pin=0 if seed >= 2 else None)
    assert whole_times(cost)
    assert identical_device_classes(cost) == (((1, 2),) if seed >= 2 else ((0, 1, 2),))
    cp, milp = both(cost, MapOptions(time_limit=30, seed=seed))
    assert cp.status == milp.status == "optimal"
    assert cp.objective_value == pytest.approx(milp.objective_value, rel=1e-9)
    assert float(cp.objective_value).is_integer()


def shaped(seed: int, shape: str, n: int, procs: int):
    """A fork, join or fork-join of ``n`` tasks (P|prec,c_ij|Cmax, as in Sinnen's benchmark set):
    whole task and transfer times on ``procs`` identical, fully connected processors."""
    rng = random.Random(seed)
    middle = range(1, n - 1) if shape == "forkjoin" else range(1, n)
    edges = []
    for t in middle:
        if shape in ("fork", "forkjoin"):
            edges.append((0, t, 0.0, float(rng.randint(1, 8))))
        if shape in ("join", "forkjoin"):
            edges.append((t, n - 1, 0.0, float(rng.randint(1, 8))) if shape == "forkjoin"
                         else (t, 0, 0.0, float(rng.randint(1, 8))))
    graph = make_graph(n, edges, name=f"{shape}{seed}")
    times = [[float(rng.randint(2, 12))] * procs for _ in range(n)]
    links = [(a, b, 1.0, 0.0) for a in range(procs) for b in range(a + 1, procs)]
    return make_cost(graph, make_platform(["cpu"] * procs, links), times)


@pytest.mark.parametrize("seed", range(6))
def test_transfers_and_idle_times_keep_the_brute_force_optimum(seed):
    # one same-device literal per edge (its transfer is uniform) and each processor's idle time
    # before its first task and after its last (cpsat_transfers) cut no schedule off: the
    # proven optimum is brute force's, and the bound never passes it
    shape = ("fork", "join", "forkjoin")[seed % 3]
    cost = shaped(seed, shape, 6 if shape == "forkjoin" else 5, 2 + seed % 2)
    built = cpsat_model._build(cost, "makespan", 1e3, memory=False, area=False, makespan_bound=None, hint=None,
                               micro_batches=1)
    assert built is not None and {"same" in v.name for v in _bool_vars(built.model)} == {True, False}
    proves_brute_force_optimum(cost, seed)


def proves_brute_force_optimum(cost, seed: int) -> None:
    """CP-SAT alone and the ``cpsat`` mapper both prove brute force's makespan, the
    mapper's bound is below it and its schedule validates."""
    from test_milp import _brute

    solved = solve_cpsat(cost, "makespan", 1e3, memory=False, area=False, makespan_bound=None, hint=None,
                         time_limit=30, seed=seed)
    best = _brute(cost, "makespan")
    assert solved.status == "optimal" and solved.objective == pytest.approx(best)
    result = get_mapper("cpsat").map(cost, MapOptions(time_limit=30, seed=seed))
    assert result.status == "optimal" and result.objective_value == pytest.approx(best)
    assert result.lower_bound is not None and result.lower_bound <= best + 1e-9
    assert not validate(result.schedule)


def test_heterogeneous_transfers_keep_a_literal_per_device_pair():
    # an edge whose transfer differs between device pairs keeps its conditional rows: no same literal
    cost = random_instance(3, 6, n_devices=3, ccr=2.0, explicit_comm=False)
    mixed = [e.index for e in cost.graph.edges
             if len({cost.comm(e.index, a, b) for a in range(3) for b in range(3) if a != b}) > 1]
    built = cpsat_model._build(cost, "makespan", 1e3, memory=False, area=False, makespan_bound=None, hint=None,
                               micro_batches=1)
    names = {v.name for v in _bool_vars(built.model)} if built is not None else set()
    assert mixed and not any(f"same{e}" in names for e in mixed)
    # nor idle-time rows, which lean on those literals; explicit (uniform) transfers get both
    assert not any(n.startswith("first") for n in names)
    uniform = cpsat_model._build(random_instance(3, 6, n_devices=3, ccr=2.0), "makespan", 1e3, memory=False,
                                 area=False, makespan_bound=None, hint=None, micro_batches=1)
    names = {v.name for v in _bool_vars(uniform.model)} if uniform is not None else set()
    assert any(n.startswith("first") for n in names) and any(n.startswith("same") for n in names)


def _bool_vars(model):
    """The model's variables with their names (OR-Tools' proto)."""
    proto = model.proto
    return [model.get_int_var_from_proto_index(i) for i in range(len(proto.variables))]


def test_fractional_times_keep_the_scaled_model():
    cost = random_instance(4, 7, n_devices=3)
    assert not whole_times(cost)
    cp, milp = both(cost, MapOptions(time_limit=20))
    assert cp.objective_value == pytest.approx(milp.objective_value, rel=1e-6)


def test_a_hint_on_later_devices_is_relabelled_to_satisfy_the_cut():
    # a heuristic may start on the last of three identical processors; the hint
    # is renamed so that the first used is the first of the class, and the
    # model's answer is no worse than it
    cost = identical(7, 12, 3, comm=1.0)  # transfers: the processors are not pooled
    classes = identical_device_classes(cost)
    assert canonical_devices((2, 2, 0, 1), classes) == (0, 0, 1, 2)
    heft = get_mapper("heft").map(cost).schedule
    mirrored = tuple(2 - d for d in heft.device_of)
    solved = solve_cpsat(cost, "makespan", heft.makespan * (1 + 1e-9), memory=False, area=False,
                         makespan_bound=None, hint=(mirrored, tuple(s.start for s in heft.slots)), time_limit=20,
                         seed=0)
    assert solved.status == "optimal" and solved.objective <= heft.makespan
    assert solved.device is not None and solved.device[0] == 0


def test_identical_processors_without_transfers_are_one_pool():
    # P|prec|Cmax: one literal and interval per task, a cumulative of capacity 3
    # for the class; with transfers, or a colocation, the devices stay apart
    free = identical(5, 14, 3, comm=None)
    assert pooled_classes(free, identical_device_classes(free)) == ((0, 1, 2),)
    for cost in (identical(5, 14, 3, comm=1.0),
                 replace(free, graph=replace(free.graph, tasks=tuple(
                     replace(t, colocate="c" if t.index < 2 else None) for t in free.graph.tasks))),
                 make_cost(free.graph, make_platform(["cpu"] * 3), [list(row) for row in free.time])):  # no route
        assert identical_device_classes(cost) == ((0, 1, 2),)
        assert pooled_classes(cost, identical_device_classes(cost)) == ()
    heft = get_mapper("heft").map(free).schedule
    solved = solve_cpsat(free, "makespan", heft.makespan * (1 + 1e-9), memory=False, area=False, makespan_bound=None,
                         hint=(heft.device_of, tuple(s.start for s in heft.slots)), time_limit=20, seed=0)
    assert solved.n_literals == free.n_tasks and solved.status == "optimal"
    assert solved.device is not None and solved.start is not None
    for d in range(3):  # the assignment keeps each device's tasks apart
        spans = sorted((solved.start[t], solved.start[t] + free.time[t][d]) for t in range(free.n_tasks)
                       if solved.device[t] == d)
        assert all(a[1] <= b[0] + 1e-9 for a, b in zip(spans, spans[1:]))
    cp, milp = both(free, MapOptions(time_limit=30))
    assert cp.status == milp.status == "optimal" and cp.objective_value == pytest.approx(milp.objective_value)


@pytest.mark.parametrize("seed", range(4))
def test_a_pool_with_zero_length_tasks_keeps_the_milp_optimum(seed):
    # the cumulative does not count zero-length tasks; their devices come from
    # the starts all the same, and the re-timed schedule is the MILP's optimum
    rng = random.Random(seed)
    graph = make_graph(16, [(u, v, 0.0, None) for u, v in random_edges(rng, 16, ("random", "forkjoin")[seed % 2])])
    links = [(a, b, 1.0, 0.0) for a in range(3) for b in range(a + 1, 3)]
    cost = make_cost(graph, make_platform(["cpu"] * 3, links), [[float(rng.choice((0, 0, 1, 3, 5, 8)))] * 3
                                                              for _ in range(16)])
    notes: list[str] = []  # CP-SAT without a hint or a bound, so that it searches
    cp = search(cost, MapOptions(time_limit=20), None, notes, time.perf_counter(), 20, None)
    milp = get_mapper("milp").map(cost, MapOptions(time_limit=20))
    assert any("pooled" in n for n in notes) and not validate(cp.schedule)
    assert cp.status == milp.status == "optimal"
    assert cp.objective_value == pytest.approx(milp.objective_value, rel=1e-9)


def test_a_pool_assignment_gives_each_task_a_free_device():
    # never more than two at once: in order of start, each to the lowest free device
    lengths = {(t, 0): x for t, x in enumerate((4, 2, 3, 0, 5, 1))}
    start = (0, 0, 2, 2, 4, 5)
    device = cpsat_model.assign_pools((0,) * 6, start, lengths, ((0, 1),))
    assert device == (1, 0, 0, 0, 1, 0)
    for d in (0, 1):
        spans = sorted((start[t], start[t] + lengths[t, 0]) for t in range(6) if device[t] == d)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    # a zero-length task while both devices are busy goes to the one free first
    busy = cpsat_model.assign_pools((0, 0, 0), (0, 0, 1), {(0, 0): 3, (1, 0): 2, (2, 0): 0}, ((0, 1),))
    assert busy == (1, 0, 0)


def both(cost, options: MapOptions):
    out = []
    for name in ("cpsat", "milp"):
        result = get_mapper(name).map(cost, options)
        assert not validate(result.schedule), name
        assert result.mapper == name
        out.append(result)
    return out


def test_the_heft_paper_example_is_solved_to_the_milp_optimum():
    cp, milp = both(heft_paper_example(), MapOptions(time_limit=20))
    assert cp.status == milp.status == "optimal"
    assert cp.objective_value == pytest.approx(milp.objective_value, rel=1e-6)
    assert cp.lower_bound == pytest.approx(cp.objective_value, rel=1e-6)


@pytest.mark.parametrize("seed", range(6))
def test_random_instances_match_the_milp(seed):
    cost = random_instance(seed, 6 + seed % 3, n_devices=3, explicit_comm=seed % 2 == 0)
    cp, milp = both(cost, MapOptions(time_limit=20, seed=seed))
    assert cp.status == "optimal" and milp.status == "optimal"
    assert cp.objective_value == pytest.approx(milp.objective_value, rel=1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_budgets_are_kept(seed):
    cost = random_instance(seed + 10, 8, n_devices=3, budgets=True)
    options = MapOptions(time_limit=20, schedule=ScheduleOptions(memory=True, area=True))
    cp, milp = both(cost, options)
    assert cp.objective_value == pytest.approx(milp.objective_value, rel=1e-6)


@pytest.mark.parametrize("model", ["device-load", "1f1b"])
def test_throughput_models(model):
    cost = random_instance(3, 7, n_devices=3)
    cost = replace(cost, platform=replace(cost.platform, throughput_model=model, micro_batches=4))
    cp, milp = both(cost, MapOptions(objective="throughput", time_limit=20))
    assert cp.status == milp.status == "optimal"
    assert cp.objective_value == pytest.approx(milp.objective_value, rel=1e-6)


def test_energy_under_a_makespan_bound():
    cost = random_instance(5, 7, n_devices=3)
    fastest = get_mapper("milp").map(cost, MapOptions(time_limit=20)).objective_value
    options = MapOptions(objective="energy", makespan_bound=1.3 * fastest, time_limit=20)
    cp, milp = both(cost, options)
    assert cp.schedule.makespan <= 1.3 * fastest * (1 + 1e-9)
    assert cp.objective_value == pytest.approx(milp.objective_value, rel=1e-6)


def test_the_cli_lists_and_runs_it(capsys, tmp_path):
    assert main(["mappers"]) == 0
    assert "cpsat" in capsys.readouterr().out
    assert main(["compile", HEFT, "--platform", "heft3", "--mapper", "cpsat", "-q",
                 "--json", str(tmp_path / "r.json")]) == 0


def _sigint_of_a_new_process() -> str:
    import subprocess
    import sys

    code = ("import signal; print(signal.getsignal(signal.SIGINT)); print(''.join(l for l in "
            "open('/proc/self/status') if l.startswith(('SigBlk', 'SigIgn'))))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout


def test_ctrl_c_stays_with_the_caller():
    """CP-SAT's own SIGINT handling is off: a solve (the CLI's way, with its interrupt
    handler) changes neither this process's Ctrl-C nor that of a process started later."""
    import signal

    before, child_before = signal.getsignal(signal.SIGINT), _sigint_of_a_new_process()
    assert main(["compile", HEFT, "--platform", "heft3", "--mapper", "cpsat", "-q"]) == 0
    assert signal.getsignal(signal.SIGINT) is before
    assert _sigint_of_a_new_process() == child_before


@pytest.mark.parametrize("seed", range(4))
def test_two_searches_answer_as_the_first_would_alone(seed, monkeypatch):
    # where there are two cores a second search runs beside the default one; whichever
    # proves first, the answer is the default search's own (the same inputs give the same schedule)
    import mapper.mapping.exact.cpsat_model as cm

    cost = identical(seed, 14, 3, comm=2.0) if seed % 2 else random_instance(seed, 9, n_devices=3)
    heft = get_mapper("heft").map(cost).schedule
    answers = []
    for cores in (1, 2):
        monkeypatch.setattr(cm, "_cores", lambda c=cores: c)
        answers.append(solve_cpsat(cost, "makespan", heft.makespan * (1 + 1e-9), memory=False, area=False,
                                   makespan_bound=None, hint=(heft.device_of, tuple(s.start for s in heft.slots)),
                                   time_limit=30, seed=seed))
    alone, side_by_side = answers
    assert alone.status == side_by_side.status == "optimal"
    assert (side_by_side.device, side_by_side.start, side_by_side.objective) == \
        (alone.device, alone.start, alone.objective)


class _FakeRun:
    """A search for :func:`_race` that finds ``finds`` (seconds, value) in turn,
    then proves its last value optimal when ``proves``, else runs to its time."""

    def __init__(self, finds, proves=False):
        import threading

        from mapper.mapping.exact import cpsat_model as cm

        self.cm, self.finds, self.proves = cm, finds, proves
        self.cap = self.status = self.value = self.incumbent = None
        self.done, self.cancelled = threading.Event(), False

    proof = cpsat_model._Run.proof

    def solve(self, deadline):
        import time

        t0, status = time.perf_counter(), self.cm.cp_model
        try:
            for at, value in self.finds:
                while time.perf_counter() - t0 < at:
                    if self.cancelled or time.perf_counter() >= deadline:
                        self.status = status.FEASIBLE if self.value is not None else status.UNKNOWN
                        return
                    time.sleep(0.005)
                self.incumbent = self.value = value
                if self.cap is not None and value <= self.cap:
                    self.status = status.FEASIBLE
                    return
            while not self.proves and not self.cancelled and time.perf_counter() < deadline:
                time.sleep(0.005)
            self.status = status.OPTIMAL if self.proves else status.FEASIBLE
        finally:
            self.done.set()

    def cancel(self):
        self.cancelled = True


@pytest.mark.parametrize("first_finds_it", [True, False])
def test_a_proof_by_the_second_search_waits_for_the_first(first_finds_it, monkeypatch):
    # the second search proves 5 at once; the first, which has 9, runs on to its
    # own first solution within 5 (its answer, as alone), or for the grace time
    import time

    from mapper.mapping.exact import cpsat_model as cm

    monkeypatch.setattr(cm, "GRACE", 0.3)
    first = _FakeRun([(0.0, 9)] + ([(0.15, 5), (0.2, 4)] if first_finds_it else []))
    second = _FakeRun([(0.0, 5)], proves=True)
    t0 = time.perf_counter()
    cm._race([first, second], t0 + 30, None)
    took = time.perf_counter() - t0
    assert second.proof() == 5
    assert first.value == (5 if first_finds_it else 9)
    assert first.cancelled is not first_finds_it  # found it: stopped by the value, not cancelled
    assert took < 5


def test_a_proof_by_the_first_search_stops_the_second():
    import time

    from mapper.mapping.exact import cpsat_model as cm

    first = _FakeRun([(0.0, 7)], proves=True)
    second = _FakeRun([(0.0, 9)])
    t0 = time.perf_counter()
    cm._race([first, second], t0 + 30, None)
    assert first.proof() == 7 and second.cancelled and time.perf_counter() - t0 < 5


@pytest.mark.parametrize("finds", [True, False])
def test_searches_without_a_solution_give_up(finds):
    # past ``give_up``, searches that have found nothing (on large models, not even
    # the hint's solution) stop; once one has a solution they run on
    import time

    from mapper.mapping.exact import cpsat_model as cm

    first = _FakeRun(([(0.05, 9)] if finds else []) + [(0.6, 7)], proves=True)
    second = _FakeRun([(1.0, 9)])
    t0 = time.perf_counter()
    gave_up = cm._race([first, second], t0 + 30, None, give_up=t0 + 0.2)
    took = time.perf_counter() - t0
    assert gave_up is not finds
    assert first.value == (7 if finds else None) and first.cancelled is not finds
    assert took < 5
