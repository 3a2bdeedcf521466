"""What ``mapper serve`` reports of a simulated run (JSON ``serving``, docs/serving.md).

Throughputs are over the run: from the first arrival to the last request's end, as
``trtllm-bench throughput`` and vLLM's ``benchmark_serving.py`` measure them. Per request: time
to first token (``ttft``, from its arrival), time per output token after the first (``tpot``,
also called inter-token latency: ``(e2e - ttft) / (output - 1)``, requests of one output token
left out, as vLLM's benchmark does) and ``e2e``. Percentiles interpolate linearly between
order statistics (NumPy's default, which both benchmarks use).

Goodput follows DistServe (Zhong et al., OSDI 2024): a request meets its SLOs when its time to
first token is at most ``--slo-ttft`` and its time per output token at most ``--slo-tpot``; the
SLO attainment is the fraction of requests that do; the run's requests per second count as
goodput when the attainment is at least ``--slo-percentile`` per cent, and as 0 otherwise
(DistServe's goodput is the highest rate that keeps this attainment; ``--parallel auto``
ranks layouts by it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from mapper.serving.inflight import Served


@dataclass(frozen=True, slots=True)
class Slo:
    ttft: float | None = None
    tpot: float | None = None
    percentile: float = 99.0

    @property
    def any(self) -> bool:
        return self.ttft is not None or self.tpot is not None

    def met(self, r: Served) -> bool:
        return ((self.ttft is None or r.first - r.arrival <= self.ttft)
                and (self.tpot is None or r.output_tokens <= 1 or tpot(r) <= self.tpot))


def tpot(r: Served) -> float:
    return (r.done - r.first) / (r.output_tokens - 1)


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile of ``values``, linear between order statistics (NumPy's default)."""
    xs = sorted(values)
    if not xs:
        return math.nan
    pos = (len(xs) - 1) * p / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summary(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    return {"mean": sum(values) / len(values), "p50": percentile(values, 50), "p90": percentile(values, 90),
            "p99": percentile(values, 99)}


def attainment(served: Sequence[Served], slo: Slo) -> float:
    """The fraction of ``served`` meeting both SLOs."""
    return sum(1 for r in served if slo.met(r)) / len(served) if served else 0.0


def goodput(served: Sequence[Served], slo: Slo, requests_per_s: float) -> float | None:
    """Requests per second that count as goodput (module docstring); None without SLOs."""
    if not slo.any:
        return None
    return requests_per_s if attainment(served, slo) * 100.0 >= slo.percentile - 1e-9 else 0.0


def max_concurrency(served: Sequence[Served]) -> int:
    """The most requests admitted and not yet ended at any one time (all replicas together)."""
    events = sorted([(r.admitted, 1) for r in served] + [(r.done, -1) for r in served],
                    key=lambda e: (e[0], e[1]))
    level = best = 0
    for _, d in events:
        level += d
        best = max(best, level)
    return best


def metrics(served: Sequence[Served], slo: Slo) -> dict[str, object]:
    """The throughputs, latency summaries and goodput of a run (module docstring)."""
    start = min(r.arrival for r in served)
    span = max(r.done for r in served) - start
    out_tokens = sum(r.output_tokens for r in served)
    all_tokens = out_tokens + sum(r.input_tokens for r in served)
    rate = len(served) / span if span > 0 else math.inf
    result: dict[str, object] = {
        "output_tokens_per_s": out_tokens / span if span > 0 else math.inf,
        "total_tokens_per_s": all_tokens / span if span > 0 else math.inf,
        "requests_per_s": rate,
        "ttft": summary([r.first - r.arrival for r in served]),
        "tpot": summary([tpot(r) for r in served if r.output_tokens > 1]),
        "e2e": summary([r.done - r.arrival for r in served]),
        "goodput": goodput(served, slo, rate),
        "slo_attainment": attainment(served, slo) if slo.any else None,
        "duration_s": span,
        "requests": len(served),
    }
    return result
