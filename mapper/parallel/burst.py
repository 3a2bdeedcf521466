"""Burst parallelism: a GPU count per layer of a data-parallel training step (DeepPool).

Park, Fried, Kim, Alizadeh and Belay, "Efficient Strong Scaling Through Burst Parallel
Training", MLSys 2022 (arXiv:2112.10065v3). With the global batch ``B`` held fixed, layer ``i``
runs on ``w_i`` GPUs at ``B / w_i`` samples each (``w_i`` a power of two dividing ``B``, at most
the ``G`` GPUs); the GPU time a step leaves unused, ``G * T - sum(w_i * t_i)``, is lent to a
background job. A layer's time at width ``w`` is its per-sample-batch time (forward and
backward) plus the all-reduce of its weight gradients over its ``w`` GPUs. Its amplification
is ``w * t(w) / t(1)`` (DeepPool's ``parallelizationPlanner.py``: layer time times GPUs used
over the time on one GPU); a width is allowed when its amplification is within the limit, and
the least-amplified width always is. Where consecutive layers' widths differ, the activations
(forward) and their gradients (backward) are scattered or gathered: groups of ``max/min`` GPUs
exchange ``B / min`` samples' activations, priced as an all-gather
(:func:`mapper.parallel.collectives.collective`). Layers form a chain (DeepPool plans
branches; a branchy model is taken in its layers' order). The plan is the chain's shortest
path over (layer, width): exact.

The background job (:func:`background_seconds`) runs on each GPU beside the foreground as
DeepPool's runtime multiplexes it (``csrc/Manager.cpp``, ``GpuManager::DoWork``, in the
artifact): in a low-priority stream, never starting while the foreground has communication
queued on that GPU. So on each GPU it runs at full speed while the foreground leaves the GPU
idle, not at all during the foreground's all-reduces and scatter/gathers, and during the
foreground's compute in the share of the GPU the foreground leaves, ``1 - u``, where ``u`` is
the layer's utilisation at its per-GPU batch (its samples per second there over its best rate in
the profile): the foreground keeps priority and is not slowed.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from mapper.errors import OptionsError
from mapper.parallel.collectives import GB, Network, collective

#: DeepPool's default amplification limit (``searchBestSplits(..., amplificationLimit=2.0)``).
DEFAULT_AMPLIFICATION = 2.0


@dataclass(frozen=True, slots=True)
class Layer:
    """One layer: (per-GPU batch, seconds of forward and backward) points, bytes per sample of
    its input activation, and bytes of its weights."""

    name: str
    times: tuple[tuple[int, float], ...]
    act_bytes: float
    weight_bytes: float

    def time(self, batch: float) -> float:
        """Seconds at ``batch`` samples: the profile's point, linear between points, flat below the
        smallest and proportional above the largest (past it the GPU is taken as saturated)."""
        xs = [b for b, _ in self.times]
        ys = [t for _, t in self.times]
        if batch <= xs[0]:
            return ys[0]
        if batch >= xs[-1]:
            return ys[-1] * batch / xs[-1]
        k = bisect.bisect_left(xs, batch)
        if xs[k] == batch:
            return ys[k]
        f = (batch - xs[k - 1]) / (xs[k] - xs[k - 1])
        return ys[k - 1] + f * (ys[k] - ys[k - 1])


@dataclass(frozen=True, slots=True)
class Fabric:
    """A uniform network: seconds per message and seconds per byte between any two GPUs."""

    alpha: float
    beta: float

    def collective(self, kind: str, nbytes: float, ranks: int) -> float:
        if ranks <= 1:
            return 0.0
        gbs = 1.0 / (self.beta * GB) if self.beta > 0 else math.inf
        net = Network(ranks, gbs, self.alpha, gbs * ranks, self.alpha, 1)  # one switch, no low-latency step
        return collective(net, kind, nbytes, ranks, ranks)[0]


@dataclass(frozen=True, slots=True)
class BurstPlan:
    """Widths per layer and what they cost: ``time`` the step, ``gpu_seconds`` the GPU time the
    foreground uses, ``lent`` the GPU time left to the background job, ``transfer`` the
    scatter/gather seconds."""

    widths: tuple[int, ...]
    layer_times: tuple[float, ...]
    transfers: tuple[float, ...]  # before each layer (0 for the first)
    time: float
    gpu_seconds: float
    gpus: int
    batch: int

    @property
    def lent(self) -> float:
        return self.gpus * self.time - self.gpu_seconds

    @property
    def transfer(self) -> float:
        return sum(self.transfers)


def utilisation(layer: Layer, batch: float) -> float:
    """The share of its GPU ``layer`` keeps busy at ``batch`` samples: its samples per second
    there over its best in the profile (1 for a layer without time)."""
    best = max((b / t for b, t in layer.times if t > 0), default=0.0)
    t = layer.time(batch)
    return 1.0 if best <= 0 or t <= 0 else min(1.0, batch / t / best)


def background_seconds(layers: Sequence[Layer], plan: BurstPlan, multiplex: bool = True) -> float:
    """GPU-seconds of full speed the background job gets in one step of ``plan`` over all its GPUs
    (module docstring); with ``multiplex`` False, only the foreground's idle GPU time."""
    total = 0.0
    for g in range(plan.gpus):
        for i, (layer, w) in enumerate(zip(layers, plan.widths)):
            moving = max(w, plan.widths[i - 1]) if i else w
            if g >= moving:
                total += plan.transfers[i]
            if g >= w:
                total += plan.layer_times[i]
            elif multiplex:
                total += (1.0 - utilisation(layer, plan.batch / w)) * layer.time(plan.batch / w)
    return total


def parse_burst(mode: str) -> float:
    """The amplification limit of ``burst`` or ``burst,amplification=X``; OptionsError otherwise."""
    head, _, rest = mode.partition(",")
    if head != "burst":
        raise OptionsError(f"not a burst mode: {mode!r}", obj="--parallel")
    if not rest:
        return DEFAULT_AMPLIFICATION
    key, eq, value = rest.partition("=")
    if key != "amplification" or not eq:
        raise OptionsError(f"--parallel burst takes amplification=X (X >= 1), not {rest!r}", obj="--parallel")
    try:
        limit = float(value)
    except ValueError:
        limit = math.nan
    if not math.isfinite(limit) or limit < 1.0:
        raise OptionsError(f"--parallel burst: amplification must be a number >= 1, not {value!r}",
                           obj="--parallel")
    return limit


def widths_for(batch: int, gpus: int) -> tuple[int, ...]:
    """Powers of two up to ``gpus`` that divide ``batch``."""
    out, w = [], 1
    while w <= gpus and batch % w == 0:
        out.append(w)
        w *= 2
    return tuple(out)


def layer_step(layer: Layer, batch: int, width: int, fabric: Fabric) -> float:
    """Seconds of ``layer`` on ``width`` GPUs: compute at ``batch / width`` plus its gradient all-reduce."""
    return layer.time(batch / width) + fabric.collective("allreduce", layer.weight_bytes, width)


def transfer(layer: Layer, batch: int, a: int, b: int, fabric: Fabric) -> float:
    """Seconds to move ``layer``'s input from width ``a`` to ``b``, forward and backward (module docstring)."""
    if a == b:
        return 0.0
    lo, hi = min(a, b), max(a, b)
    return 2 * fabric.collective("allgather", batch / lo * layer.act_bytes, hi // lo)


def allowed(layer: Layer, batch: int, widths: Sequence[int], fabric: Fabric, limit: float) -> tuple[int, ...]:
    """The widths whose amplification is within ``limit``, and the least amplified one."""
    base = layer_step(layer, batch, 1, fabric)
    amp = {w: w * layer_step(layer, batch, w, fabric) / base if base > 0 else float(w) for w in widths}
    least = min(widths, key=lambda w: (amp[w], w))
    return tuple(w for w in widths if amp[w] <= limit or w == least)


def evaluate(layers: Sequence[Layer], widths: Sequence[int], batch: int, gpus: int, fabric: Fabric) -> BurstPlan:
    """The cost of running ``layers`` at ``widths``."""
    steps = tuple(layer_step(x, batch, w, fabric) for x, w in zip(layers, widths))
    moves = tuple(0.0 if i == 0 else transfer(x, batch, widths[i - 1], widths[i], fabric)
                  for i, x in enumerate(layers))
    used = sum(w * s for w, s in zip(widths, steps)) + sum(
        max(widths[i - 1], widths[i]) * m for i, m in enumerate(moves) if i)
    return BurstPlan(tuple(widths), steps, moves, sum(steps) + sum(moves), used, gpus, batch)


def data_parallel(layers: Sequence[Layer], batch: int, gpus: int, fabric: Fabric) -> BurstPlan:
    """Plain data parallelism: every layer on all ``gpus`` (which must divide ``batch``)."""
    if batch % gpus:
        raise OptionsError(f"the global batch {batch} must divide among the {gpus} GPUs", obj="--parallel burst")
    return evaluate(layers, [gpus] * len(layers), batch, gpus, fabric)


def plan_burst(layers: Sequence[Layer], batch: int, gpus: int, fabric: Fabric,
               limit: float = DEFAULT_AMPLIFICATION) -> BurstPlan:
    """The fastest step with each layer at an allowed width: a shortest path over (layer, width);
    ties go to the plan with fewer GPUs (less GPU time taken from the background job)."""
    if not layers:
        raise OptionsError("--parallel burst needs at least one layer", obj="--parallel")
    widths = widths_for(batch, gpus)
    # best[w] = (seconds, gpu-seconds, widths) of the best prefix ending at width w
    best: dict[int, tuple[float, float, tuple[int, ...]]] = {}
    for i, layer in enumerate(layers):
        nxt: dict[int, tuple[float, float, tuple[int, ...]]] = {}
        for w in allowed(layer, batch, widths, fabric, limit):
            s = layer_step(layer, batch, w, fabric)
            if i == 0:
                nxt[w] = (s, w * s, (w,))
                continue
            cands = []
            for v, (t, u, ws) in best.items():
                m = transfer(layer, batch, v, w, fabric)
                cands.append((t + m + s, u + max(v, w) * m + w * s, (*ws, w)))
            nxt[w] = min(cands)
        best = nxt
    return evaluate(layers, min(best.values())[2], batch, gpus, fabric)


_LINE = re.compile(r"^\s*([A-Za-z]\w*)(\{.*\})\[(\d+)\](\S*)\s+([0-9.eE+-]+)")


def read_profile(text: str, name: str = "profile") -> tuple[Layer, ...]:
    """Layers from a DeepPool per-layer profile (``gpuProfiler.py``'s text: one line per layer and
    batch, ``kind{json}[batch][dims] avg_ms p50 p90 p99``; a layer's position in its batch's block
    names it). Weights: a conv2d's ``in * out * kh * kw`` and a linear's ``in * out (+ out)`` at 4
    bytes; activations 4 bytes per input element. OptionsError on text that is not one."""
    import json

    blocks: dict[int, list[tuple[str, dict[str, object], str, float]]] = {}
    for n, line in enumerate(text.splitlines(), 1):
        m = _LINE.match(line)
        if m is None:
            continue
        kind, cfg, batch, dims, avg = m.groups()
        try:
            conf = json.loads(cfg)
            ms = float(avg)
        except ValueError:
            raise OptionsError(f"{name} line {n}: unreadable layer {kind}", obj=name) from None
        blocks.setdefault(int(batch), []).append((kind, conf, dims, ms))
    if not blocks:
        raise OptionsError(f"{name} holds no DeepPool profile lines (kind{{json}}[batch][dims] ms ...)", obj=name)
    sizes = {len(v) for v in blocks.values()}
    if len(sizes) != 1:
        raise OptionsError(f"{name}: the batches' blocks list different numbers of layers", obj=name)
    batches = sorted(blocks)
    first = blocks[batches[0]]
    out = []
    for k, (kind, conf, dims, _) in enumerate(first):
        elems = math.prod(int(d) for d in re.findall(r"\d+", dims)) if dims else 0
        w = 0.0
        if kind == "conv2d":
            ks = conf["kernel_size"]
            area = math.prod(int(x) for x in ks) if isinstance(ks, list) else int(ks) ** 2  # type: ignore[call-overload]
            w = 4.0 * int(conf["in_channels"]) * int(conf["out_channels"]) * area  # type: ignore[call-overload]
        elif kind == "linear":
            i, o = int(conf["in_features"]), int(conf["out_features"])  # type: ignore[call-overload]
            w = 4.0 * (i * o + (o if conf.get("bias") else 0))
        times = tuple((b, blocks[b][k][3] * 1e-3) for b in batches)
        out.append(Layer(f"{k}.{kind}", times, 4.0 * elems, w))
    return tuple(out)
