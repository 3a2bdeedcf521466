"""Cluster platforms: one node's devices, ``nodes`` times, joined by a fabric (docs/platforms.md, Clusters).

A platform file with a ``[cluster]`` table describes one node (its devices and
switches) and how many such nodes a network joins: NICs per node, bandwidth per
NIC and direction, latency, topology. :func:`read_cluster` reads that table;
:func:`with_nodes` applies ``--nodes``; :func:`flat_platform` builds every
node's devices when a graph is mapped task by task (small clusters only: the
cluster planner, :mod:`mapper.cluster`, never needs them). ``domain_nodes``: a
scale-up switch larger than a node (GB200 NVL72: 18 trays of 4 GPUs on one NVLink
domain); :func:`domain_view` is the cluster as its collectives see it, one node
per domain.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from mapper.errors import OptionsError, PlatformError
from mapper.platform.devices import TOPOLOGIES, Cluster, Device, FleetKind, Link, Platform, Switch

#: The most nodes a cluster platform may have.
MAX_NODES = 1_000_000
#: The most nodes mapped task by task (every device pair gets a route in the cost table).
MAX_FLAT_NODES = 16
#: The most devices a cluster's node may have (the largest NVLink domain, NVIDIA's GB200 NVL72, has 72
#: GPUs and 36 CPUs).
MAX_NODE_DEVICES = 256
#: The most network adapters one node may have (the most copies a ``[[device]]`` table stands for).
MAX_NICS = 1024
#: The longest latency a fabric step may have, in microseconds: one second, longer than any
#: network's round trip across the earth (a larger value is a unit slip: the key is in microseconds).
MAX_LATENCY_US = 1e6
#: The most node kinds a fleet may have: the planner tries every kind alone and every order of every
#: set of two or more kinds as a pipeline (12 orders for three kinds, 60 for four, 320 for five).
MAX_KINDS = 3
_KEYS = ("nodes", "nics_per_node", "nic_bandwidth_gbs", "latency_us", "topology", "bisection",
         "collective_efficiency", "domain_nodes")


def read_cluster(checker: Any, raw: Any, path: str = "cluster") -> Cluster:
    """The ``[cluster]`` table at ``path``, checked (``checker`` is a
    :class:`mapper.platform.schema.Checker`)."""
    tab = checker.table(raw, path)
    checker.keys(tab, path, _KEYS, ("nodes", "nics_per_node", "nic_bandwidth_gbs"))
    ints = {}
    for key, most in (("nodes", MAX_NODES), ("nics_per_node", MAX_NICS), ("domain_nodes", MAX_NODES)):
        v = tab.get(key, 1)
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= most:
            raise checker.fail(f"{path}.{key}", f"expected an integer from 1 to {most:,}, got {_short(v)}")
        ints[key] = v
    topology = checker.string(tab.get("topology", "fat-tree"), f"{path}.topology")
    if topology not in TOPOLOGIES:
        raise checker.fail(f"{path}.topology", f"unknown topology {topology!r}; supported: {', '.join(TOPOLOGIES)}")
    return Cluster(
        nodes=ints["nodes"], nics=ints["nics_per_node"],
        nic_bandwidth_gbs=checker.number(tab["nic_bandwidth_gbs"], f"{path}.nic_bandwidth_gbs", "pos", "GB/s"),
        latency_us=_latency(checker, tab.get("latency_us", 0.0), f"{path}.latency_us"),
        topology=topology,
        bisection=checker.fraction(tab.get("bisection", 1.0), f"{path}.bisection"),
        collective_efficiency=checker.fraction(tab.get("collective_efficiency", 1.0),
                                               f"{path}.collective_efficiency"),
        domain_nodes=ints["domain_nodes"],
    )


def read_between(checker: Any, raw: Any) -> tuple[float, float]:
    """A fleet's ``[between]`` table: ``bandwidth_gbs`` a node reaches a node of another kind at,
    and ``latency_us``."""
    tab = checker.table(raw, "between")
    checker.keys(tab, "between", ("bandwidth_gbs", "latency_us"), ("bandwidth_gbs",))
    return (checker.number(tab["bandwidth_gbs"], "between.bandwidth_gbs", "pos", "GB/s"),
            _latency(checker, tab.get("latency_us", 0.0), "between.latency_us"))


def _latency(checker: Any, value: Any, path: str) -> float:
    """A fabric's ``latency_us``: from 0 to :data:`MAX_LATENCY_US`."""
    x = checker.number(value, path, "nonneg", "microseconds")
    if x > MAX_LATENCY_US:
        raise checker.fail(path, f"expected at most {MAX_LATENCY_US:,.0f} microseconds (one second) a network "
                                 f"step, got {x:g} (the unit is microseconds)")
    return x


def _short(v: Any) -> str:
    """``v`` for a message, a long number cut."""
    text = repr(v)
    return text if len(text) <= 30 else f"{text[:12]}...({len(text)} characters)"


def check_kinds(checker: Any, count: int, kinds: Sequence[str] = ()) -> None:
    """A fleet's ``count`` kinds: at most :data:`MAX_KINDS` (checked before any node is read), and
    none of ``kinds`` another followed by digits, whose devices' names on the flat platform could
    clash (``g`` node 10 and ``g1`` node 0 are both ``g10``; :func:`node_prefix`)."""
    if count > MAX_KINDS:
        raise checker.fail("fleet", f"{count} node kinds; a fleet has at most {MAX_KINDS} (the planner tries "
                                    "every order of every set of kinds: 12 for three kinds, 60 for four)")
    for i, a in enumerate(kinds):
        for j, b in enumerate(kinds):
            rest = b[len(a):]
            if i != j and b.startswith(a) and rest.isdigit() and rest[0] != "0":
                raise checker.fail(f"fleet[{j}].kind", f"kinds {a!r} and {b!r} would name devices alike "
                                                       f"({node_prefix(a, int(rest + '0'))} is node {rest}0 of {a!r} "
                                                       f"and node 0 of {b!r}): rename one")


def parse_nodes(text: str) -> int | dict[str, int]:
    """``--nodes``: ``N``, or ``KIND=N,...`` for a fleet (0 leaves a kind out)."""
    def count(item: str, low: int) -> int:
        if not (item.isascii() and item.isdigit()) or len(item) > 9 or int(item) < low:
            raise OptionsError(f"expected a node count of at least {low}, got {item!r}", obj="--nodes")
        return int(item)

    text = text.strip()
    if "=" not in text:
        return count(text, 1)
    out: dict[str, int] = {}
    for item in text.split(","):
        kind, sep, n = (x.strip() for x in item.partition("="))
        if not sep or not kind:
            raise OptionsError(f"expected KIND=N items separated by commas, got {item!r}", obj="--nodes")
        if kind in out:
            raise OptionsError(f"kind {kind!r} is given twice", obj="--nodes")
        out[kind] = count(n, 0)
    return out


def with_nodes(platform: Platform, nodes: int | dict[str, int] | None) -> Platform:
    """``platform`` with ``nodes`` nodes (``--nodes``; per kind for a fleet); unchanged for None.
    An OptionsError for a platform that is not a cluster, or counts that do not fit it."""
    if nodes is None:
        return platform
    fleet = platform.fleet
    if fleet is not None:
        if not isinstance(nodes, dict):
            raise OptionsError(f"{platform.name} is a fleet: give each kind's nodes, --nodes "
                               + ",".join(f"{k.kind}=N" for k in fleet.kinds), obj="--nodes")
        names = [k.kind for k in fleet.kinds]
        for kind in nodes:
            if kind not in names:
                raise OptionsError(f"{platform.name} has no node kind {kind!r}; kinds: {', '.join(names)}",
                                   obj="--nodes")
        kinds = [FleetKind(k.kind, with_nodes(k.platform, nodes.get(k.kind, k.platform.cluster.nodes)))
                 for k in fleet.kinds if nodes.get(k.kind, 1) > 0 and k.platform.cluster is not None]
        if not kinds:
            raise OptionsError("--nodes leaves no node at all", obj="--nodes")
        first = kinds[0].platform
        return replace(platform, devices=first.devices, links=first.links, switches=first.switches,
                       host=first.host, cluster=first.cluster, fleet=replace(fleet, kinds=tuple(kinds)))
    if platform.cluster is None:
        raise OptionsError(f"--nodes applies to cluster platforms; {platform.name} is one machine "
                           "(a cluster platform file has a [cluster] table)", obj="--nodes")
    if isinstance(nodes, dict):
        raise OptionsError(f"{platform.name} has one kind of node: give --nodes N", obj="--nodes")
    if not 1 <= nodes <= MAX_NODES:
        raise OptionsError(f"expected a node count from 1 to {MAX_NODES:,}, got {nodes}", obj="--nodes")
    return replace(platform, cluster=replace(platform.cluster, nodes=nodes))


def domain_size(cluster: Cluster) -> int:
    """Nodes a job of ``cluster.nodes`` nodes has on each NVLink domain: the largest divisor of the
    node count not above ``domain_nodes``, as NVIDIA's training launcher asks Slurm's topology/block
    plugin for them (``--segment``: that many nodes inside one domain, the job an equal number of
    such segments; NVIDIA-NeMo/Megatron-Bridge ``scripts/performance/utils/executors.py``, nodes of
    4 GPUs): 32 GB200 trays run as two segments of 16 (64 GPUs each), not a rack of 18 and one of 14."""
    most = max(1, cluster.domain_nodes)
    return next(k for k in range(min(most, cluster.nodes), 0, -1) if cluster.nodes % k == 0)


def domain_view(platform: Platform) -> Platform:
    """``platform`` as collectives see it when a scale-up switch joins several nodes (a cluster whose
    ``domain_nodes`` > 1: GB200 NVL72's 18 trays of 4 GPUs on one NVLink switch system): one node
    per domain, holding the domain's GPUs on the node's fastest GPU switch (every GPU keeps its
    port's bandwidth across the domain: NVLink switch trays give each GPU its full NVLink bandwidth
    to any other of the 72), with the domain's NICs, and ``ceil(nodes / domain_nodes)`` such nodes on
    the fabric (the job's nodes in equal segments of :func:`domain_size` nodes, each inside one domain).
    Any other platform is returned as it is."""
    c = platform.cluster
    if c is None or c.domain_nodes <= 1 or platform.fleet is not None:
        return platform
    k = domain_size(c)
    gpus = [d for d in platform.devices if d.kind == "gpu"]
    names = {d.name for d in gpus}
    fast = max((sw for sw in platform.switches if names <= set(sw.ports)), key=lambda sw: sw.bandwidth_gbs,
               default=None)
    if fast is None:
        raise PlatformError(f"platform {platform.name}: an NVLink domain (domain_nodes) needs a switch that "
                            "joins every GPU of its node", obj="cluster.domain_nodes")
    devices = tuple(replace(d, index=i * len(gpus) + j, name=flat_name("", i, d.name))
                    for i in range(k) for j, d in enumerate(gpus))
    switch = replace(fast, ports=tuple(d.name for d in devices))
    from mapper.platform.schema import switch_links

    cluster = replace(c, nodes=-(-c.nodes // k), nics=c.nics * k, domain_nodes=1)
    return replace(platform, devices=devices, switches=(switch,), links=switch_links((), (switch,)), host=None,
                   cluster=cluster, description=f"{platform.description} (one NVLink domain of {k} nodes per node)")


def without(platform: Platform, text: str) -> Platform:
    """``platform`` less what ``--without`` names: a node kind (all its nodes), ``KIND=N`` (N of
    its nodes) or ``N`` (N nodes of a one-kind cluster), comma-separated."""
    if platform.cluster is None:
        raise OptionsError(f"--without applies to cluster platforms; {platform.name} is one machine",
                           obj="--without")
    counts = {k.kind: k.platform.cluster.nodes for k in kinds_of(platform) if k.platform.cluster is not None}
    for item in text.split(","):
        name, sep, n = (x.strip() for x in item.partition("="))
        if not sep and name.isdigit() and platform.fleet is None:
            name, n = "", name
        elif not sep:
            n = str(counts.get(name, 0))
        if name not in counts:
            raise OptionsError(f"no node kind {name!r} to leave out; kinds: {', '.join(k for k in counts if k)}"
                               if name else f"expected KIND or KIND=N, got {item!r}", obj="--without")
        if not (n.isascii() and n.isdigit()) or len(n) > 9 or not 1 <= int(n) <= counts[name]:
            raise OptionsError(f"{item.strip()!r}: expected from 1 to the {counts[name]} nodes there are",
                               obj="--without")
        counts[name] -= int(n)
    if platform.fleet is None:
        if counts[""] < 1:
            raise OptionsError("--without leaves no node at all", obj="--without")
        return with_nodes(platform, counts[""])
    return with_nodes(platform, counts)


def kinds_of(platform: Platform) -> tuple[FleetKind, ...]:
    """A fleet's node kinds, or the one cluster (or machine) a platform is."""
    return platform.fleet.kinds if platform.fleet is not None else (FleetKind("", platform),)


def node_prefix(kind: str, node: int) -> str:
    """What :func:`flat_platform` puts before the names of node ``node`` of ``kind`` (``n0``, ``a1000``)."""
    return f"{kind or 'n'}{node}"


def flat_name(kind: str, node: int, name: str) -> str:
    """The name device ``name`` of node ``node`` of ``kind`` has on :func:`flat_platform`'s platform."""
    return f"{node_prefix(kind, node)}_{name}"


def flat_platform(platform: Platform) -> Platform:
    """Every node's devices and switches, the nodes' GPUs joined through the fabric (one switch
    port per GPU of the node's NIC share; in a fleet, a further switch for the fabric between
    kinds): the platform a graph is mapped on task by task. A platform that is not a cluster is
    returned as it is."""
    if platform.cluster is None:
        return platform
    kinds = kinds_of(platform)
    total = sum(k.platform.cluster.nodes for k in kinds if k.platform.cluster is not None)
    if total > MAX_FLAT_NODES:
        raise PlatformError(
            f"platform {platform.name} has {total} nodes; a graph is mapped task by task on at most "
            f"{MAX_FLAT_NODES} nodes (every device pair gets a route): plan it with --parallel (the cluster "
            f"planner), or give --nodes with {MAX_FLAT_NODES} or fewer", obj="--nodes")
    from mapper.platform.schema import MAX_DEVICES, switch_links

    count = sum(k.platform.cluster.nodes * len(k.platform.devices) for k in kinds if k.platform.cluster is not None)
    if count > MAX_DEVICES:
        raise PlatformError(
            f"platform {platform.name} has {count:,} devices over its {total} nodes; a graph is mapped task by "
            f"task on at most {MAX_DEVICES:,} devices (every device pair gets a route): plan it with --parallel "
            "(the cluster planner), or give fewer --nodes", obj="--nodes")

    devices: list[Device] = []
    switches: list[Switch] = []
    links: list[Link] = []
    everyone: list[str] = []
    share_between = 0.0
    for k in kinds:
        node, cluster = k.platform, k.platform.cluster
        assert cluster is not None
        gpus = [d.name for d in node.devices if d.kind == "gpu"] or [d.name for d in node.devices]
        names = [node_prefix(k.kind, n) for n in range(cluster.nodes)]
        for prefix in names:
            for d in node.devices:
                devices.append(replace(d, index=len(devices), name=f"{prefix}_{d.name}"))
            for sw in node.switches:
                switches.append(replace(sw, name=f"{prefix}_{sw.name}", ports=tuple(f"{prefix}_{p}" for p in sw.ports)))
            for link in (x for x in node.links if not x.switch):  # declared links; switches make theirs
                links.append(replace(link, index=len(links), src=f"{prefix}_{link.src}", dst=f"{prefix}_{link.dst}"))
        ports = tuple(f"{prefix}_{g}" for prefix in names for g in gpus)
        everyone += ports
        fast = max((sw for sw in node.switches if set(gpus) <= set(sw.ports)), key=lambda sw: sw.bandwidth_gbs,
                   default=None)
        span = domain_size(cluster)  # nodes on one scale-up switch: a switch per domain joins their GPUs
        for start in range(0, cluster.nodes, span) if span > 1 else ():
            members = tuple(f"{prefix}_{g}" for prefix in names[start:start + span] for g in gpus)
            if fast is not None:
                switches.append(replace(fast, name=f"{k.kind + '_' if k.kind else ''}domain{start // span}",
                                        ports=members))
        if cluster.nodes > 1:
            share = cluster.nics * cluster.nic_bandwidth_gbs * cluster.bisection / len(gpus)
            switches.append(Switch(f"{k.kind or 'fabric'}_fabric" if k.kind else "fabric", ports, share,
                                   cluster.latency_us, cluster.collective_efficiency))
        if platform.fleet is not None:
            share_between = max(share_between, platform.fleet.bandwidth_gbs / len(gpus))
    if platform.fleet is not None and len(kinds) > 1:
        switches.append(Switch("between", tuple(everyone), share_between, platform.fleet.latency_us))
    first = kinds[0].platform
    host = flat_name(kinds[0].kind, 0, first.host) if first.host is not None else None
    return replace(platform, devices=tuple(devices), links=switch_links(tuple(links), tuple(switches)),
                   switches=tuple(switches), host=host, cluster=None, fleet=None,
                   description=f"{platform.description} ({total} nodes)")
