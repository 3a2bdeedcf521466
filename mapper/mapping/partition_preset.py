"""Mt-KaHyPar's deterministic preset as a configuration file, with the changes mapper makes.

:data:`DETERMINISTIC` is the preset of Mt-KaHyPar 1.4 and later (``config/deterministic_preset.ini``
of the Mt-KaHyPar repository, MIT; Gottesbüren, Hamann, "Deterministic parallel hypergraph
partitioning", Euro-Par 2022): deterministic coarsening, initial partitioning by recursive
bipartitioning, deterministic label propagation and Jet refinement (Gilbert, Madduri, Boman,
Rajamanickam, "Jet: multilevel graph partitioning on GPUs", SIAM J. Sci. Comput. 2024), so the
same input and seed give the same partition whatever the thread count. :data:`CHANGES` are the
settings mapper changes (:func:`preset_text`); the preset stays deterministic.
"""

from __future__ import annotations

#: The stock deterministic preset, one ``key=value`` a line.
DETERMINISTIC = """\
mode=direct
preset-type=deterministic
deterministic=true
maxnet-removal-factor=0.01
smallest-maxnet-threshold=50000
maxnet-ignore=1000
num-vcycles=0
s-use-localized-random-shuffle=false
s-static-balancing-work-packages=128
p-enable-community-detection=true
p-louvain-edge-weight-function=hybrid
p-max-louvain-pass-iterations=5
p-louvain-min-vertex-move-fraction=0.01
p-vertex-degree-sampling-threshold=200000
p-louvain-low-memory-contraction=true
p-num-sub-rounds=16
c-type=deterministic_multilevel_coarsener
c-use-adaptive-edge-size=false
c-resolve-swaps=true
c-min-shrink-factor=1.01
c-max-shrink-factor=2.5
c-s=1
c-t=160
c-vertex-degree-sampling-threshold=200000
c-num-sub-rounds=3
c-rating-score=heavy_edge
c-rating-heavy-node-penalty=no_penalty
c-rating-acceptance-criterion=best_prefer_unmatched
i-mode=rb
i-runs=20
i-use-adaptive-ip-runs=false
i-perform-refinement-on-best-partitions=false
i-fm-refinement-rounds=3
i-lp-maximum-iterations=20
i-lp-initial-block-size=5
i-r-refine-until-no-improvement=false
i-r-rebalancer-type=deterministic
i-r-lp-type=deterministic
i-r-lp-maximum-iterations=5
i-r-sync-lp-sub-rounds=1
i-r-lp-he-size-activation-threshold=100
i-r-sync-lp-active-nodeset=true
i-r-fm-type=do_nothing
i-population-size=64
r-refine-until-no-improvement=false
r-rebalancer-type=deterministic
r-max-det-rebalancing-rounds=0
r-det-rebalancing-deadzone=0.1
r-det-rebalancing-heavy-vertex-exclusion=1.5
r-lp-type=do_nothing
r-lp-maximum-iterations=5
r-sync-lp-sub-rounds=1
r-lp-he-size-activation-threshold=100
r-sync-lp-active-nodeset=true
r-jet-type=deterministic
r-jet-num-iterations=8
r-jet-relative-improvement-threshold=0.001
r-jet-dynamic-rounds=3
r-jet-initial-negative-gain=0.75
r-jet-final-negative-gain=0.0
r-fm-type=do_nothing
r-flow-algo=do_nothing
one-to-one-mapping-strategy=greedy_mapping
mapping-use-local-search=true
"""

#: What mapper changes, and why: the Louvain community detection before coarsening is a pass over
#: the whole hypergraph that task graphs (their locality already in their edges) gain little from;
#: 5 initial-partitioning runs per bisection in place of 20 find as good a coarsest partition; and
#: Jet refinement with 4 iterations and one round of its dynamic negative-gain schedule in place of
#: 8 and 3 takes about half the refinement time. On ``benchmarks/huge.py``'s graphs the partition
#: takes a third to a half of the stock preset's time, km1 from 0.3 % below to 4.4 % above it (the
#: benchmark prints both).
CHANGES = {"p-enable-community-detection": "false", "i-runs": "5", "r-jet-num-iterations": "4",
           "r-jet-dynamic-rounds": "1"}


def preset_text(changes: dict[str, str] = CHANGES) -> str:
    """The configuration file: :data:`DETERMINISTIC` with ``changes`` applied (each key must be one of it)."""
    lines = DETERMINISTIC.splitlines()
    keys = [line.split("=", 1)[0] for line in lines]
    for key, value in changes.items():
        lines[keys.index(key)] = f"{key}={value}"
    return "\n".join(lines) + "\n"
