"""Burst parallelism replayed on DeepPool's published A100 per-layer profiles.

    python benchmarks/deeppool.py [--amplification X] [--batch B ...]

Profiles: Inception-v3 and a ResNet, per-GPU batches 1-128, forward and backward milliseconds per
layer on an A100, from the DeepPool artifact (tests/data/deeppool/README.md: commit and MIT
license). For each cluster of 8-256 GPUs and a fixed global batch (strong scaling), it prints
plain data parallelism (every layer on every GPU) against the burst plan
(mapper.parallel.burst: per-layer widths within the amplification limit, gradient all-reduce
per layer over its GPUs, scatter/gather where widths change), the foreground's samples per
second and the cluster throughput: the foreground's samples plus the background job's. The
background job trains the same model on each GPU at its own batch (default 32: DeepPool's
background jobs train 16 or 32 samples per GPU, ``beModules/*B16.json``, ``*B32.json`` in the
artifact) at that batch's single-GPU rate from the profile, slowed as DeepPool's runtime
multiplexes it (mapper.parallel.burst.background_seconds): stopped while the foreground
communicates on its GPU, and either only in the GPU time the foreground leaves idle (``idle``,
a low estimate) or also beside the foreground's compute in the share of the GPU the layer leaves
unused at its per-GPU batch (``shared``, a high estimate: the foreground is taken as unslowed).
The old upper bound (background at batch 128 in all idle GPU time) is printed too. The network
is mapper's Selene platform between two nodes (platforms/selene.toml: 200 Gb/s HDR InfiniBand
per GPU, 5 us a step), the worst GPU pair, for every cluster size. Layers are taken as a chain in
the profile's order: the profile text names each layer's kind, configuration and input size but
not its producers, so Inception's parallel branches cannot be recovered from it (DeepPool's
planner reads the graph from its own job description).

The paper's claim beside it: "a 1.2 - 2.3x improvement in total cluster throughput over standard
data parallelism with a single task when the cluster scale is large" (Park et al., "Efficient
Strong Scaling Through Burst Parallel Training", MLSys 2022 proceedings abstract, as in
arXiv:2112.10065v3; v1 of the preprint said 2.2 - 2.4x).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from mapper.parallel.burst import DEFAULT_AMPLIFICATION, background_seconds, data_parallel, plan_burst, read_profile
from mapper.parallel.burst_graph import fabric_of
from mapper.platform.cluster import flat_platform
from mapper.platform.loader import load_platform

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "deeppool"
MODELS = (("Inception-v3", "inceptionLayerGpuProfileA100.txt"), ("ResNet", "resnetLayerGpuProfileA100.txt"))
GPUS = (8, 16, 32, 64, 128, 256)
#: The background job's per-GPU batch (DeepPool's background modules: 16 or 32 samples).
BACKGROUND_BATCH = 32
CLAIM = "1.2-2.3x"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--amplification", type=float, default=DEFAULT_AMPLIFICATION,
                    help="DeepPool's amplification limit (default %(default)s, its planner's default)")
    ap.add_argument("--batch", type=int, nargs="+", default=[256, 1024], help="global batches (default 256 1024)")
    ap.add_argument("--background-batch", type=int, default=BACKGROUND_BATCH,
                    help="the background job's per-GPU batch (default %(default)s)")
    args = ap.parse_args()
    if args.amplification < 1:
        ap.error("--amplification must be >= 1")
    selene = load_platform("selene")
    assert selene.cluster is not None
    fabric = fabric_of(flat_platform(replace(selene, cluster=replace(selene.cluster, nodes=2))))
    print(f"network: {fabric.alpha * 1e6:g} us, {1 / fabric.beta / 1e9:g} GB/s between GPUs; "
          f"amplification limit {args.amplification:g}; paper's claim {CLAIM} (MLSys 2022)")
    if not 1 <= args.background_batch <= 128:
        ap.error("--background-batch must be 1 to 128 (the profiles' batches)")
    for label, name in MODELS:
        layers = read_profile((DATA / name).read_text(), name)
        rate = 128 / sum(x.time(128) for x in layers)  # the old bound's samples per GPU-second
        bg = args.background_batch / sum(x.time(args.background_batch) for x in layers)
        print(f"\n{label}: {len(layers)} layers, {1e3 / rate:.3f} ms a sample at batch 128, "
              f"{1e3 / bg:.3f} ms at the background's batch {args.background_batch}, "
              f"{sum(x.time(1) for x in layers) * 1e3:.2f} ms at batch 1")
        print(f"{'gpus':>5} {'batch':>6} {'dp ms':>8} {'dp /s':>8} {'burst ms':>9} {'fg /s':>8} {'fg x':>5} "
              f"{'lent':>6} {'idle x':>7} {'shared x':>9} {'bound x':>8} {'widths':>7}")
        for batch in args.batch:
            for g in GPUS:
                if batch % g:
                    continue
                dp = data_parallel(layers, batch, g, fabric)
                bp = plan_burst(layers, batch, g, fabric, args.amplification)
                fg = batch / bp.time

                dp_rate = batch / dp.time
                idle, shared, bound = ((fg + seconds / bp.time) / dp_rate for seconds in (
                    background_seconds(layers, bp, multiplex=False) * bg, background_seconds(layers, bp) * bg,
                    bp.lent * rate))
                print(f"{g:>5} {batch:>6} {dp.time * 1e3:>8.2f} {batch / dp.time:>8.0f} {bp.time * 1e3:>9.2f} "
                      f"{fg:>8.0f} {dp.time / bp.time:>5.2f} {bp.lent / (g * bp.time):>6.1%} {idle:>7.2f} "
                      f"{shared:>9.2f} {bound:>8.2f} {f'1-{max(bp.widths)}':>7}")
    print(f"\ncluster throughput (foreground + background) over data parallelism's: idle = background in idle GPU "
          f"time only, shared = also beside the foreground's compute, bound = the old upper bound; "
          f"paper's claim {CLAIM}")

if __name__ == "__main__":
    main()
