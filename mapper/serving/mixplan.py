"""``mapper serve --gpus KIND=N,...``: profile each GPU kind with the simulator, then solve
Melange's programme (:mod:`mapper.serving.mix`) for the cheapest mix at ``--rate``."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

from mapper.core.opdefs.dnn import held_positions
from mapper.errors import InfeasibleError, OptionsError
from mapper.serving.inflight import Scheduler, simulate
from mapper.serving.metrics import Slo
from mapper.serving.mix import Offer, buckets, capacity, cheapest_mix
from mapper.serving.workload import Arrival


def _serve(step, sched: Scheduler, reqs: list[Arrival]) -> tuple:
    return simulate(reqs, step, sched).served


def _instances(server, longest: int, most: int) -> list[tuple[int, Callable[[list[Arrival]], tuple]]]:
    """Each tensor degree (powers of two up to ``most`` GPUs and the platform's; pipeline 1)
    whose replica caches ``longest`` tokens, with a function serving arrivals on one such replica."""
    rt = server.runtime
    capacity_bytes = (server.prices.gpu.memory_gib or 0.0) * 2.0 ** 30
    out: list[tuple[int, Callable[[list[Arrival]], tuple]]] = []
    t = 1
    while t <= min(server.gpus, most):
        try:
            model = server.step_model(t, 1, rt.chunk)
        except OptionsError:
            break
        _, tokens = model.memory(capacity_bytes, rt)
        if tokens >= max(held_positions(longest, model.window), rt.block):
            sched = Scheduler(tokens, rt.block, rt.max_batch, rt.chunk, rt.reserve_output, rt.overhead,
                              model.window, mixed=rt.mixed, steps=rt.steps, lag=rt.lag,
                              front=rt.front, stream=rt.stream)
            out.append((t, partial(_serve, model.step, sched)))
        t *= 2
    return out


def plan_mix(servers: dict[str, Any], offers: list[Offer], requests: list[Arrival], rate: float, slo: Slo,
             seed: int, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """JSON ``serving`` of the cheapest mix (module docstring); ``servers`` by kind."""
    if not math.isfinite(rate):
        raise OptionsError("--gpus needs a finite --rate QPS: the mix is sized for a request rate", obj="--rate")
    if not slo.any:
        raise OptionsError("--gpus needs --slo-ttft or --slo-tpot: the mix is the cheapest that meets them",
                           obj="--gpus")
    groups = buckets(requests)
    loads = [rate * len(reqs) / len(requests) for _, reqs in groups]
    longest = max(r.input_tokens + r.output_tokens - 1 for r in requests)
    caps: dict[str, list[float]] = {}
    prices: dict[str, float] = {}
    sizes: dict[str, tuple[str, int]] = {}
    per_gpu: dict[str, float] = {}
    for offer in offers:
        server = servers[offer.kind]
        price = offer.price if offer.price is not None else server.prices.gpu.price_per_hour
        if price is None:
            raise OptionsError(f"{offer.kind}: its platform gives no price_per_hour; give one as "
                               f"{offer.kind}={offer.count}@DOLLARS_PER_GPU_HOUR", obj="--gpus")
        per_gpu[offer.kind] = price
        for t, serve_one in _instances(server, longest, offer.count):
            name = f"{offer.kind}/tensor{t}"
            caps[name] = []
            for b, (_, reqs) in enumerate(groups):
                if progress is not None:
                    progress(f"serve: profiling {offer.kind} (tensor {t}), bucket {b + 1}/{len(groups)}")
                caps[name].append(capacity(serve_one, reqs, slo, seed))
            prices[name] = price * t
            sizes[name] = (offer.kind, t)
    if not any(c > 0 for cs in caps.values() for c in cs):
        raise InfeasibleError("no GPU kind given holds the model with a KV cache and meets the SLOs")
    mix = cheapest_mix(loads, caps, prices, sizes, {o.kind: o.count for o in offers})
    out_tokens = rate * sum(r.output_tokens for r in requests) / len(requests)
    return {
        "rate": rate,
        "mix": [{"kind": sizes[g][0], "platform": next(o.platform for o in offers if o.kind == sizes[g][0]),
                 "tensor": sizes[g][1], "replicas": mix.counts[g], "gpus": mix.counts[g] * sizes[g][1],
                 "price_per_gpu_hour": per_gpu[sizes[g][0]], "capacity_requests_per_s": caps[g]} for g in caps],
        "available": {o.kind: o.count for o in offers},
        "buckets": [{"input_tokens_max": 2 ** k[0], "output_tokens_max": 2 ** k[1], "requests_per_s": load}
                    for (k, _), load in zip(groups, loads)],
        "cost_per_hour": mix.cost,
        "cost_bound": mix.bound,
        "solver_status": mix.status,
        "cost_per_million_tokens": mix.cost / 3600.0 / out_tokens * 1e6 if out_tokens > 0 else None,
    }


def render_mix(doc: dict[str, Any]) -> str:
    lines = [f"gpu mix      the cheapest that meets the SLOs at {doc['rate']:,.2f} requests/s "
             f"(Melange's programme, {doc['solver_status']}; bound "
             + ("-" if doc["cost_bound"] is None else f"${doc['cost_bound']:,.2f}") + " per hour)"]
    for m in doc["mix"]:
        caps = ", ".join(f"{c:,.2f}" for c in m["capacity_requests_per_s"])
        lines.append(f"  {m['kind']:<10} {m['replicas']:,} x tensor {m['tensor']} = {m['gpus']:,} of "
                     f"{doc['available'][m['kind']]:,} GPUs ({m['platform']}) at "
                     f"${m['price_per_gpu_hour']:,.2f}/GPU-hour; one replica serves {caps} requests/s per bucket")
    cost = doc["cost_per_million_tokens"]
    lines.append(f"cost         ${doc['cost_per_hour']:,.2f} per hour, "
                 + ("-" if cost is None else f"${cost:,.3f}") + " per million output tokens")
    return "\n".join(lines) + "\n"
