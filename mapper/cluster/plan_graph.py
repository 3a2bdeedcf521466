"""The chosen layout as a task graph of one pipeline replica (:mod:`mapper.cluster`).

One pipeline rank per device (its tensor-parallel group and data replicas run
the same ops at the same time): a forward and a backward task per chunk and
micro-batch, priced with the plan model's chunk times
(:class:`mapper.cluster.model.Estimate`), joined by the pipeline's
dependencies (the next chunk's forward waits for this one, the backward runs
back) and chained per rank in the schedule's order
(:func:`mapper.cluster.schedule.orders`); after a rank's last backward, its
gradient synchronisation and optimizer step. Scheduled and validated by the
ordinary engine, it shows the 1F1B pattern in every report, and its makespan
checks the closed-form step time. Each rank's synchronisation task carries the bytes the
plan model puts on that rank's GPUs (``memory``), so the reports' peak memory is the plan's.
With context parallelism each forward and backward is followed by its ring task
(``ring.fwd.c0.mb0``): the K/V sends of the chunk's attention that its ring steps do not
hide, or the all-gathers (:mod:`mapper.cluster.context`), out of the chunk's time; with
``cp=a2a`` its all-to-alls (``a2a.fwd.c0.mb0``), with ``cp=a2a+p2p`` its all-to-alls and the
sends its ring does not hide (``a2a_p2p.fwd.c0.mb0``). With ``overlap=p2p`` a forward
of the warm-up or a backward of the cool-down carries its chunk's whole send, the others only what
a steady-state pass leaves exposed (:func:`mapper.cluster.overlap.p2p_sends`), so each chunk's tasks
sum to the plan model's chunk times.
"""

from __future__ import annotations

from dataclasses import replace

from mapper.cluster import overlap
from mapper.cluster.model import Estimate
from mapper.cluster.schedule import Op, deps, orders
from mapper.core.graph import Edge, Placement, Task, TaskGraph
from mapper.platform.devices import Platform


def stage_device(s: int, kinds: tuple[str, ...] = ()) -> str:
    """The device of pipeline rank ``s`` in a plan graph: ``stage3``, or ``stage3_v100`` when the
    ranks sit on several node kinds (the reports' lanes then show the groups)."""
    return f"stage{s}_{kinds[s]}" if len(set(kinds)) > 1 else f"stage{s}"


def replica_platform(node: Platform | list[Platform], gpu: str | None, ranks: int, name: str,
                     kinds: tuple[str, ...] = ()) -> Platform:
    """``ranks`` copies of ``gpu`` (``stage0`` ..), one per pipeline rank, with no links: the
    plan graph's edges carry their own (zero) times, the sends being inside the chunk times.
    With a list of nodes (a fleet's mixed layout), rank ``s`` is the first GPU of ``node[s]``."""
    nodes = node if isinstance(node, list) else [node] * ranks
    devices = []
    for s, n in enumerate(nodes):
        dev = n.devices[n.device_index(gpu)] if gpu is not None and not isinstance(node, list) else next(
            d for d in n.devices if d.kind == "gpu")
        devices.append(replace(dev, index=s, name=stage_device(s, kinds)))
    first = nodes[0]
    return Platform(name=f"{name} (one pipeline replica)", devices=tuple(devices), host=None, source=first.source,
                    description=f"{ranks} pipeline ranks of {', '.join(dict.fromkeys(n.name for n in nodes))}")


def plan_graph(est: Estimate, name: str) -> TaskGraph:
    """The task graph of one pipeline replica under ``est`` (module docstring)."""
    lay = est.layout
    p, v, m = lay.pipeline, lay.interleave, est.micro_batches
    chunks = p * v
    index: dict[Op, int] = {}  # an op's first task
    last: dict[Op, int] = {}  # and its last (its ring task under context parallelism)
    tasks: list[Task] = []
    edges: list[tuple[int, int]] = []
    seqs = orders(est.schedule, p, v, m)
    prefix = {"a2a": "a2a", "a2a+p2p": "a2a_p2p"}.get(lay.cp, "ring")  # the context ranks' exposed communication
    # what each rank's GPUs hold (the plan model's figure): resident on its device for the whole step,
    # carried by the rank's last task, so every report's peak memory is the plan's
    held = est.rank_memory or tuple(est.peak if s == est.fullest else 0.0 for s in range(p))
    for s, seq in enumerate(seqs):
        dev = stage_device(s, est.kinds)
        warm = sum(overlap.phases(p, v, m, s)[0]) if est.chunk_sends else 0
        for i, op in enumerate(seq):
            kind, c, mb = op
            f, b = est.chunk_times[c]
            seconds = f if kind == "F" else b
            if est.chunk_sends:  # overlap=p2p: the send whole in the warm-up and cool-down, else its exposed part
                hop, sf, sb, hf, hb = est.chunk_sends[c]
                ends = i < warm if kind == "F" else i >= len(seq) - warm
                seconds += (hop if ends else sf if kind == "F" else sb) - (hf if kind == "F" else hb)
            ring = est.chunk_ring[c][0 if kind == "F" else 1] if est.chunk_ring else None
            name = f"{'fwd' if kind == 'F' else 'bwd'}.c{c}.mb{mb}"
            index[op] = last[op] = len(tasks)
            tasks.append(Task(len(tasks), name, "task", placement=Placement(allow=(dev,)),
                              explicit_cost=((dev, seconds - (ring or 0.0)),), backward=kind == "B"))
            if ring is not None:
                last[op] = len(tasks)
                tasks.append(Task(len(tasks), f"{prefix}.{name}", "task", placement=Placement(allow=(dev,)),
                                  explicit_cost=((dev, ring),), backward=kind == "B"))
                edges.append((index[op], last[op]))
    for s, seq in enumerate(seqs):
        for a, b_ in zip(seq, seq[1:]):
            edges.append((last[a], index[b_]))  # the rank runs them in this order
        for op in seq:
            for d in deps(op, chunks):
                edges.append((last[d], index[op]))
        dev = stage_device(s, est.kinds)
        sync = len(tasks)
        tasks.append(Task(sync, f"sync.stage{s}", "task", placement=Placement(allow=(dev,)),
                          explicit_cost=((dev, est.rank_sync[s]),), backward=True, memory=held[s]))
        edges.append((last[seq[-1]], sync))
    unique = sorted(set(edges), key=lambda e: (e[1], e[0]))
    return TaskGraph(f"{name}.pipeline", tuple(tasks),
                     tuple(Edge(i, a, b, 0.0, 0.0, "") for i, (a, b) in enumerate(unique)), (),
                     tuple(f"sync.stage{s}" for s in range(p)))
