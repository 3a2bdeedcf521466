"""Burst parallelism replayed on DeepPool's published A100 per-layer profiles.

    python benchmarks/deeppool.py [--amplification X] [--batch B ...]

Profiles: Inception-v3 and a ResNet, per-GPU batches 1-128, forward and backward milliseconds per
layer on an A100, from the DeepPool artifact (tests/data/deeppool/README.md: commit and MIT
license). For each cluster of 8-256 GPUs and a fixed global batch (strong scaling), it prints
plain data parallelism (every layer on every GPU) against the burst plan
(mapper.parallel.burst: per-layer widths within the amplification limit, gradient all-reduce
per layer over its GPUs, scatter/gather where widths change), the foreground's samples per
second and the cluster throughput: the foreground's samples plus the background job's, where
the GPU time the plan lends runs the same model at the profile's batch 128 on one GPU, with no
interference (an upper bound: DeepPool's GPU multiplexing slows the background down). The
network is mapper's Selene platform between two nodes (platforms/selene.toml: 200 Gb/s HDR
InfiniBand per GPU, 5 us a step), the worst GPU pair, for every cluster size. Layers are taken
as a chain in the profile's order (DeepPool plans Inception's branches in parallel).

The paper's claim beside it: "a 1.2 - 2.3x improvement in total cluster throughput over standard
data parallelism with a single task when the cluster scale is large" (Park et al., "Efficient
Strong Scaling Through Burst Parallel Training", MLSys 2022 proceedings abstract, as in
arXiv:2112.10065v3; v1 of the preprint said 2.2 - 2.4x).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from mapper.parallel.burst import DEFAULT_AMPLIFICATION, data_parallel, plan_burst, read_profile
from mapper.parallel.burst_graph import fabric_of
from mapper.platform.cluster import flat_platform
from mapper.platform.loader import load_platform

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "deeppool"
MODELS = (("Inception-v3", "inceptionLayerGpuProfileA100.txt"), ("ResNet", "resnetLayerGpuProfileA100.txt"))
GPUS = (8, 16, 32, 64, 128, 256)
CLAIM = "1.2-2.3x"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--amplification", type=float, default=DEFAULT_AMPLIFICATION,
                    help="DeepPool's amplification limit (default %(default)s, its planner's default)")
    ap.add_argument("--batch", type=int, nargs="+", default=[256, 1024], help="global batches (default 256 1024)")
    args = ap.parse_args()
    if args.amplification < 1:
        ap.error("--amplification must be >= 1")
    selene = load_platform("selene")
    assert selene.cluster is not None
    fabric = fabric_of(flat_platform(replace(selene, cluster=replace(selene.cluster, nodes=2))))
    print(f"network: {fabric.alpha * 1e6:g} us, {1 / fabric.beta / 1e9:g} GB/s between GPUs; "
          f"amplification limit {args.amplification:g}; paper's claim {CLAIM} (MLSys 2022)")
    for label, name in MODELS:
        layers = read_profile((DATA / name).read_text(), name)
        rate = 128 / sum(x.time(128) for x in layers)  # the background's samples per GPU-second
        print(f"\n{label}: {len(layers)} layers, {1e3 / rate:.3f} ms a sample at batch 128, "
              f"{sum(x.time(1) for x in layers) * 1e3:.2f} ms at batch 1")
        print(f"{'gpus':>5} {'batch':>6} {'dp ms':>8} {'dp /s':>9} {'burst ms':>9} {'fg /s':>9} {'fg x':>6} "
              f"{'lent':>6} {'cluster /s':>11} {'cluster x':>10} {'widths':>8}")
        for batch in args.batch:
            for g in GPUS:
                if batch % g:
                    continue
                dp = data_parallel(layers, batch, g, fabric)
                bp = plan_burst(layers, batch, g, fabric, args.amplification)
                fg = batch / bp.time
                cluster = fg + bp.lent / bp.time * rate
                share = bp.lent / (g * bp.time)
                print(f"{g:>5} {batch:>6} {dp.time * 1e3:>8.2f} {batch / dp.time:>9.0f} {bp.time * 1e3:>9.2f} "
                      f"{fg:>9.0f} {dp.time / bp.time:>6.2f} {share:>6.1%} {cluster:>11.0f} "
                      f"{cluster * dp.time / batch:>10.2f} {f'1-{max(bp.widths)}':>8}")


if __name__ == "__main__":
    main()
