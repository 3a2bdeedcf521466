"""A small Llama (``examples/llama.tg`` at sizes a test gives) planned on DGX H100 SuperPOD nodes,
and the check that a plan's task graph passes the validator, shared by the context-parallel tests."""

from __future__ import annotations

import pytest

from mapper.cluster.plan_graph import plan_graph, replica_platform
from mapper.cluster.search import ClusterChoice, plan_cluster
from mapper.costing.fusion import fuse_for
from mapper.frontend.load import load_graph
from mapper.frontend.sources import ModelFile
from mapper.parallel.layout import LayoutSpec
from mapper.pipeline import compile_graph
from mapper.platform.cluster import with_nodes
from mapper.platform.loader import load_platform

LLAMA = "examples/llama.tg"


def llama_graph(sizes, **over):
    """The Llama at ``sizes`` with the parameters in ``over`` changed."""
    return load_graph(ModelFile(LLAMA, params=tuple({**sizes, **over}.items())))


def superpod(nodes=2):
    """The DGX H100 SuperPOD platform at ``nodes`` nodes."""
    return with_nodes(load_platform("dgx-h100-superpod"), nodes)


def plan_on(graph, given, nodes=2):
    """The platform and the training plan (Adam) of ``graph`` for the layout keys ``given``."""
    plat = superpod(nodes)
    return plat, plan_cluster(graph, plat, LayoutSpec(**given), "adam", lambda x: fuse_for(x, plat))


def assert_plan_graph_validates(plat, choice: ClusterChoice, prefix: str) -> None:
    """The best plan's task graph has one ``prefix`` task per pass, micro-batch and chunk (forward and
    backward), maps with HEFT through the validator, and its makespan is the plan's step within 5 %."""
    est = choice.best
    graph = plan_graph(est, "llama")
    tasks = [t for t in graph.tasks if t.name.startswith(prefix)]
    assert len(tasks) == 2 * est.micro_batches * est.layout.pipeline * est.layout.interleave
    result = compile_graph(graph, replica_platform(plat, "gpu0", est.layout.pipeline, plat.name), mapper="heft",
                           fuse="none")  # validated inside
    assert result.result.schedule.makespan == pytest.approx(est.step, rel=0.05)
