"""Cluster platforms: one node's devices, ``nodes`` times, joined by a fabric (docs/platforms.md, Clusters).

A platform file with a ``[cluster]`` table describes one node (its devices and
switches) and how many such nodes a network joins: NICs per node, bandwidth per
NIC and direction, latency, topology. :func:`read_cluster` reads that table;
:func:`with_nodes` applies ``--nodes``; :func:`flat_platform` builds every
node's devices when a graph is mapped task by task (small clusters only: the
cluster planner, :mod:`mapper.cluster`, never needs them).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from mapper.devices import TOPOLOGIES, Cluster, Device, Link, Platform, Switch
from mapper.errors import OptionsError, PlatformError

#: The most nodes a cluster platform may have.
MAX_NODES = 1_000_000
#: The most nodes mapped task by task (every device pair gets a route in the cost table).
MAX_FLAT_NODES = 16
_KEYS = ("nodes", "nics_per_node", "nic_bandwidth_gbs", "latency_us", "topology", "bisection",
         "collective_efficiency")


def read_cluster(checker: Any, raw: Any) -> Cluster:
    """The ``[cluster]`` table, checked (``checker`` is a :class:`mapper.platform_schema.Checker`)."""
    tab = checker.table(raw, "cluster")
    checker.keys(tab, "cluster", _KEYS, ("nodes", "nics_per_node", "nic_bandwidth_gbs"))
    ints = {}
    for key in ("nodes", "nics_per_node"):
        v = tab[key]
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_NODES:
            raise checker.fail(f"cluster.{key}", f"expected an integer from 1 to {MAX_NODES:,}, got {v!r}")
        ints[key] = v
    topology = checker.string(tab.get("topology", "fat-tree"), "cluster.topology")
    if topology not in TOPOLOGIES:
        raise checker.fail("cluster.topology", f"unknown topology {topology!r}; supported: {', '.join(TOPOLOGIES)}")
    return Cluster(
        nodes=ints["nodes"], nics=ints["nics_per_node"],
        nic_bandwidth_gbs=checker.number(tab["nic_bandwidth_gbs"], "cluster.nic_bandwidth_gbs", "pos", "GB/s"),
        latency_us=checker.number(tab.get("latency_us", 0.0), "cluster.latency_us", "nonneg", "microseconds"),
        topology=topology,
        bisection=checker.fraction(tab.get("bisection", 1.0), "cluster.bisection"),
        collective_efficiency=checker.fraction(tab.get("collective_efficiency", 1.0), "cluster.collective_efficiency"),
    )


def with_nodes(platform: Platform, nodes: int | None) -> Platform:
    """``platform`` with ``nodes`` nodes (``--nodes``); unchanged for None. An OptionsError for a
    platform that is not a cluster or a count out of range."""
    if nodes is None:
        return platform
    if platform.cluster is None:
        raise OptionsError(f"--nodes applies to cluster platforms; {platform.name} is one machine "
                           "(a cluster platform file has a [cluster] table)", obj="--nodes")
    if not 1 <= nodes <= MAX_NODES:
        raise OptionsError(f"expected a node count from 1 to {MAX_NODES:,}, got {nodes}", obj="--nodes")
    return replace(platform, cluster=replace(platform.cluster, nodes=nodes))


def node_name(node: int, device: str) -> str:
    """A device's name on node ``node`` of a flat cluster platform: ``n3_gpu5``."""
    return f"n{node}_{device}"


def flat_platform(platform: Platform) -> Platform:
    """Every node's devices and switches, the nodes' GPUs joined through the fabric (one switch
    port per GPU of the node's NIC share): the platform a graph is mapped on task by task. A
    platform that is not a cluster is returned as it is."""
    cluster = platform.cluster
    if cluster is None:
        return platform
    if cluster.nodes > MAX_FLAT_NODES:
        raise PlatformError(
            f"platform {platform.name} has {cluster.nodes} nodes; a graph is mapped task by task on at most "
            f"{MAX_FLAT_NODES} nodes (every device pair gets a route): plan it with --parallel (the cluster "
            f"planner), or give --nodes {MAX_FLAT_NODES} or fewer", obj="--nodes")
    from mapper.platform_schema import switch_links

    devices: list[Device] = []
    switches: list[Switch] = []
    links: list[Link] = []
    for n in range(cluster.nodes):
        for d in platform.devices:
            devices.append(replace(d, index=len(devices), name=node_name(n, d.name)))
        for sw in platform.switches:
            switches.append(replace(sw, name=node_name(n, sw.name), ports=tuple(node_name(n, p) for p in sw.ports)))
        for link in (x for x in platform.links if not x.switch):  # declared links; switches make theirs
            links.append(replace(link, index=len(links), src=node_name(n, link.src), dst=node_name(n, link.dst)))
    gpus = [d.name for d in platform.devices if d.kind == "gpu"] or [d.name for d in platform.devices]
    if cluster.nodes > 1:
        share = cluster.nics * cluster.nic_bandwidth_gbs * cluster.bisection / len(gpus)
        switches.append(Switch("fabric", tuple(node_name(n, g) for n in range(cluster.nodes) for g in gpus),
                               share, cluster.latency_us, cluster.collective_efficiency))
    host = node_name(0, platform.host) if platform.host is not None else None
    return replace(platform, devices=tuple(devices), links=switch_links(tuple(links), tuple(switches)),
                   switches=tuple(switches), host=host, cluster=None,
                   description=f"{platform.description} ({cluster.nodes} nodes)")
