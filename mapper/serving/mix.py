"""The cheapest GPU mix that meets the SLOs at a request rate (``mapper serve --gpus KIND=N,...``).

Melange's formulation (Griggs et al., "Mélange: Cost Efficient Large Language Model Serving by
Exploiting GPU Heterogeneity", 2024, section 5): requests fall in buckets by size (here by the
powers of two above their prompt and output lengths); profiling gives, for each GPU type and
bucket, the largest request rate one instance serves with the SLOs met; each bucket's load (its
share of the rate) is cut into ``slices`` equal slices; an integer linear programme assigns every
slice to one instance type and counts instances,

    minimise    sum_g price_g n_g
    subject to  sum_g x_sg = 1                            for every slice s
                sum_s (load_s / cap_{b(s) g}) x_sg <= n_g    for every type g
                sum_{g of kind k} gpus_g n_g <= available_k  for every GPU kind k
                x_sg binary,  n_g whole.

Melange's instances are single GPUs; here an instance type is a GPU kind with a tensor degree
(one replica of ``t`` GPUs, pipeline 1, every power of two whose weights leave room for the KV
cache), priced at ``t`` GPUs' ``price_per_hour``, and the kind's GPUs bound the types together.
Each capacity comes from the simulator (:func:`capacity`: the largest Poisson rate whose run on one replica
meets the SLOs at ``--slo-percentile``, by bisection). The programme is solved exactly by
:mod:`mapper.mapping.exact.solver` (HiGHS, or CBC), which also reports its dual bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mapper.errors import InfeasibleError, OptionsError
from mapper.serving.metrics import Slo, attainment
from mapper.serving.workload import Arrival, arrivals

#: Melange's default slice factor: slices per bucket.
SLICES = 8
#: Bisection steps of a capacity search (the rate is found to 2^-steps of the offline rate).
STEPS = 8
#: Requests a capacity search simulates per bucket (the first ones of the bucket, repeated).
PROFILE_REQUESTS = 200
#: Short names of the shipped single-node platforms' GPUs (any platform name or TOML path works too).
KINDS = {"a100": "dgx-a100", "h100": "dgx-h100", "h200": "dgx-h200", "b200": "dgx-b200", "l4": "l4-node",
         "l40s": "l40s-node"}
#: Seconds the solver may take.
TIME_LIMIT = 30.0


@dataclass(frozen=True, slots=True)
class Offer:
    """``--gpus`` item: a GPU kind (a platform), how many GPUs, and a price per GPU hour if given."""

    kind: str
    platform: str
    count: int
    price: float | None


def parse_gpus(text: str) -> list[Offer]:
    """``KIND=N[@PRICE],...``: KIND a short name (:data:`KINDS`), a platform name or a TOML path."""
    out: list[Offer] = []
    for item in (p.strip() for p in text.split(",")):
        kind, eq, rest = item.partition("=")
        kind = kind.strip()
        count_text, at, price_text = rest.partition("@")
        count_text = count_text.strip()
        if not eq or not kind or not (count_text.isascii() and count_text.isdigit()) or len(count_text) > 6 \
                or int(count_text) < 1:
            raise OptionsError(f"expected KIND=N[@PRICE],... with N a positive whole number, got {item!r}",
                               obj="--gpus")
        price = None
        if at:
            try:
                price = float(price_text)
            except ValueError:
                price = math.nan
            if not (price > 0 and math.isfinite(price)):
                raise OptionsError(f"the price per GPU hour after @ must be a positive number, got {price_text!r}",
                                   obj="--gpus")
        if any(o.kind == kind for o in out):
            raise OptionsError(f"{kind} is given twice", obj="--gpus")
        out.append(Offer(kind, KINDS.get(kind.lower(), kind), int(count_text), price))
    return out


def buckets(requests: list[Arrival]) -> list[tuple[tuple[int, int], list[Arrival]]]:
    """The requests by size bucket (powers of two above prompt and output lengths), in order."""
    got: dict[tuple[int, int], list[Arrival]] = {}
    for r in requests:
        key = (max(r.input_tokens - 1, 0).bit_length(), max(r.output_tokens - 1, 0).bit_length())
        got.setdefault(key, []).append(r)
    return sorted(got.items())


def capacity(serve_one, requests: list[Arrival], slo: Slo, seed: int) -> float:
    """The largest request rate one replica serves ``requests``' sizes at with the SLOs met
    (``serve_one(arrivals)`` gives the replica's served requests); 0 when not even one at a
    time meets them."""
    base = [Arrival(None, r.input_tokens, r.output_tokens) for r in requests]
    reps = -(-PROFILE_REQUESTS // len(base))
    base = (base * reps)[:PROFILE_REQUESTS]

    def ok(rate: float) -> tuple[bool, float]:
        served = serve_one(arrivals(base, rate, seed))
        span = max(s.done for s in served) - min(s.arrival for s in served)
        return attainment(served, slo) * 100.0 >= slo.percentile - 1e-9, len(served) / span if span > 0 else 0.0

    _, top = ok(math.inf)  # the offline rate bounds what any arrival rate can sustain
    lo, hi = 0.0, top
    if not (top > 0 and math.isfinite(top)) or not ok(hi / 2 ** STEPS)[0]:
        return 0.0
    lo = hi / 2 ** STEPS
    for _ in range(STEPS):
        mid = (lo + hi) / 2
        if ok(mid)[0]:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True, slots=True)
class Mix:
    counts: dict[str, int]  # instances of each kind
    cost: float  # dollars per hour
    bound: float | None  # the solver's dual bound on the cost
    status: str
    assignment: tuple[str, ...]  # the kind of each slice


def cheapest_mix(loads: list[float], caps: dict[str, list[float]], prices: dict[str, float],
                 sizes: dict[str, tuple[str, int]], limits: dict[str, int], slices: int = SLICES) -> Mix:
    """Melange's programme (module docstring): ``loads[b]`` the bucket's rate (requests/s),
    ``caps[g][b]`` one instance's capacity, ``prices[g]`` an instance's price per hour,
    ``sizes[g]`` its GPU kind and GPUs, ``limits[k]`` the GPUs of kind ``k``. Raises
    :class:`InfeasibleError` when no mix serves."""
    from mapper.mapping.exact.solver import Problem, run, value

    kinds = list(caps)
    prob = Problem("melange")
    n = {g: prob.integer(f"n_{i}", 0, limits[sizes[g][0]] // sizes[g][1]) for i, g in enumerate(kinds)}
    use: dict[str, dict] = {g: {n[g]: -1.0} for g in kinds}
    x: list[dict] = []
    binaries = 0
    for b, load in enumerate(loads):
        if load <= 0:
            continue
        share = load / slices
        for s in range(slices):
            row = {}
            for i, g in enumerate(kinds):
                if caps[g][b] > 0:
                    v = prob.binary(f"x_{b}_{s}_{i}")
                    row[g] = v
                    use[g][v] = share / caps[g][b]
                    binaries += 1
            if not row:
                raise InfeasibleError(f"no GPU kind meets the SLOs on requests of bucket {b + 1}, even one at a time")
            prob.add_row({v: 1.0 for v in row.values()}, 0.0, "==", 1.0)
            x.append(row)
    for g in kinds:
        prob.add_row(use[g], 0.0, "<=", 0.0)
    for k, available in limits.items():
        prob.add_row({n[g]: float(sizes[g][1]) for g in kinds if sizes[g][0] == k}, 0.0, "<=", float(available))
    prob.minimise({n[g]: prices[g] for g in kinds})
    out = run(prob, None, TIME_LIMIT, 0, binaries, lambda *a: None, False)
    if not out.has_solution:
        raise InfeasibleError("no mix of the GPUs given meets the SLOs at this rate: give more GPUs or a lower "
                              "--rate")
    counts = {g: round(value(n[g])) for g in kinds}
    chosen = tuple(next(g for g, v in row.items() if value(v) > 0.5) for row in x)
    return Mix(counts, sum(prices[g] * counts[g] for g in kinds), out.bound, out.status, chosen)
