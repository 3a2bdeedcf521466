"""A cluster's ``node`` resolves in the platform file's own folder or names a shipped platform
(docs/platforms.md, Clusters), and the cluster planner's bounds hold before any work (the CLI
cases are in tests/data/hostile/cases_references_and_limits.toml)."""

from __future__ import annotations

import heapq
import random

import pytest

from mapper.cluster.mixed import _shares
from mapper.cluster.space import MAX_SCHEDULE_OPS, layouts
from mapper.cluster.space import divisors as _divisors
from mapper.errors import PlatformError
from mapper.parallel.layout import LayoutSpec
from mapper.platform.loader import load_platform, parse_platform

NODE = ('name = "n"\n[[device]]\nname = "gpu"\ncount = 2\nkind = "gpu"\npeak_gflops = { f32 = 1000.0 }\n'
        '[[switch]]\nname = "s"\nports = ["gpu"]\nbandwidth_gbs = 100.0\n')


def _cluster(folder, node: str) -> str:
    path = folder / "c.toml"
    path.write_text(f'name = "c"\nnode = "{node}"\n[cluster]\nnodes = 2\nnics_per_node = 1\n'
                    'nic_bandwidth_gbs = 25.0\n')
    return str(path)


def test_a_node_beside_the_file_or_below_it_is_read(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "n.toml").write_text(NODE)
    (tmp_path / "alias.toml").symlink_to(tmp_path / "sub" / "n.toml")  # a link that stays inside
    monkeypatch.chdir("/")  # the working folder plays no part
    for ref in ("sub/n.toml", "./sub/n.toml", "alias.toml"):
        plat = load_platform(_cluster(tmp_path, ref))
        assert plat.cluster is not None and [d.name for d in plat.devices] == ["gpu0", "gpu1"]


@pytest.mark.parametrize("ref, why", [
    ("/etc/passwd", "relative path inside"),
    ("../out/n.toml", "relative path inside"),
    ("sub/../../out/n.toml", "relative path inside"),
    ("link/n.toml", "symbolic link"),
    ("", "relative path inside"),
])
def test_a_node_outside_the_folder_is_refused_unopened(tmp_path, ref, why):
    inside, outside = tmp_path / "in", tmp_path / "out"
    inside.mkdir()
    outside.mkdir()
    (outside / "n.toml").write_text(NODE.replace('name = "n"', 'name = "n"\nSECRET = 1'))
    (inside / "link").symlink_to(outside)
    with pytest.raises(PlatformError) as err:
        load_platform(_cluster(inside, ref))
    assert why in err.value.message and "SECRET" not in err.value.message
    assert str(err.value.obj).endswith("c.toml: node")


def test_a_platform_given_as_text_names_a_shipped_node_only(tmp_path, monkeypatch):
    (tmp_path / "n.toml").write_text(NODE)
    monkeypatch.chdir(tmp_path)  # a file where the user stands is not a node of text
    with pytest.raises(PlatformError, match="not a shipped platform"):
        parse_platform('name = "c"\nnode = "n.toml"\n[cluster]\nnodes = 2\nnics_per_node = 1\n'
                       'nic_bandwidth_gbs = 25.0\n', "c.toml")


def test_a_node_whose_gpus_are_not_joined_is_refused(tmp_path):
    (tmp_path / "n.toml").write_text(NODE.split("[[switch]]")[0])
    with pytest.raises(PlatformError, match="does not join gpu0 and gpu1"):
        load_platform(_cluster(tmp_path, "n.toml"))


def test_the_pipeline_divisors_and_the_schedule_bound():
    for n in (1, 2, 12, 97, 3072, 1 << 20):
        assert _divisors(n, 64) == [k for k in range(1, min(n, 64) + 1) if n % k == 0]
    found = layouts(32, 8, 1 << 20, 48, LayoutSpec())
    assert found and all(2 * (1 << 20) // (lay.data * lay.micro_batch) * lay.interleave * lay.pipeline
                         <= MAX_SCHEDULE_OPS for lay in found)


def _shares_by_replica(rates, micro_batches):
    """The greedy of :func:`_shares` one replica at a time (its definition)."""
    heap = [(t, k) for k, (r, t) in enumerate(rates) for _ in range(r)]
    heapq.heapify(heap)
    given = [[0] * r for r, _ in rates]
    slot = [0] * len(rates)
    for _ in range(micro_batches):
        end, k = heapq.heappop(heap)
        given[k][slot[k] % rates[k][0]] += 1
        slot[k] += 1
        heapq.heappush(heap, (end + rates[k][1], k))
    return [max(g) if g else 0 for g in given], [sum(g) for g in given]


def test_shares_by_rounds_choose_as_replica_by_replica():
    rng = random.Random(45)
    for _ in range(500):
        rates = [(rng.randint(0, 9), rng.choice([0.1, 0.3, 1.0, 1 / 3, rng.random()])) for _ in range(rng.randint(1, 4))]
        if any(r for r, _ in rates):
            m = rng.randint(0, 200)
            assert _shares(rates, m) == _shares_by_replica(rates, m)
