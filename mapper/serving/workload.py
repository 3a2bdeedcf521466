"""The request stream ``mapper serve`` simulates (:mod:`mapper.serving.inflight`).

``--workload isl=N,osl=M[,requests=R]``: ``R`` requests (default :data:`DEFAULT_REQUESTS`) of
``N`` prompt and ``M`` output tokens each, as TensorRT-LLM's and MLPerf's fixed-length tables
use them. ``--trace FILE``: JSON lines, one request a line, ``{"arrival": s, "input_tokens": n,
"output_tokens": m}`` (``arrival`` in seconds may be left out; blank lines are skipped).

Arrivals: a trace's own when every line gives one; otherwise ``--rate QPS`` draws a Poisson
process (exponential gaps of mean ``1/QPS``, seeded: the same seed gives the same stream, as
vLLM's ``benchmark_serving.py --request-rate`` draws them) and ``--rate inf`` sends every request
at time 0 (the offline "max throughput" setting of ``trtllm-bench throughput``).
"""

from __future__ import annotations

import json
import math
import os
import random
from dataclasses import dataclass

from mapper.errors import InputError, OptionsError
from mapper.serving.request import MAX_TOKENS

#: Requests of a ``--workload`` that does not give ``requests=``.
DEFAULT_REQUESTS = 1000
#: The most requests a workload or trace may hold.
MAX_REQUESTS = 1_000_000
#: The largest trace file read.
MAX_TRACE_BYTES = 256 * 2 ** 20


@dataclass(frozen=True, slots=True)
class Arrival:
    """One request: when it arrives (seconds; None: the rate decides), its prompt and output tokens."""

    arrival: float | None
    input_tokens: int
    output_tokens: int


def _whole(text: str, key: str, low: int, high: int, obj: str) -> int:
    digits = text.strip()
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 9:
        raise OptionsError(f"{key} must be a whole number, got {digits!r}", obj=obj)
    n = int(digits)
    if not low <= n <= high:
        raise OptionsError(f"{key} must be from {low:,} to {high:,}, got {n:,}", obj=obj)
    return n


def parse_workload(text: str) -> list[Arrival]:
    """The requests of ``--workload isl=N,osl=M[,requests=R]`` (arrivals left to the rate)."""
    values: dict[str, int] = {}
    for item in (p.strip() for p in text.split(",")):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or key not in ("isl", "osl", "requests"):
            raise OptionsError(f"expected isl=N,osl=M[,requests=R], got {item!r}", obj="--workload")
        if key in values:
            raise OptionsError(f"{key} is given twice", obj="--workload")
        high = MAX_REQUESTS if key == "requests" else MAX_TOKENS
        values[key] = _whole(value, key, 1, high, "--workload")
    for key in ("isl", "osl"):
        if key not in values:
            raise OptionsError(f"give {key}=N (prompt tokens isl, output tokens osl)", obj="--workload")
    return [Arrival(None, values["isl"], values["osl"])] * values.get("requests", DEFAULT_REQUESTS)


def _field(obj: dict, key: str, line: int, path: str, required: bool = True) -> float | None:
    value = obj.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"{path}: line {line}: {key} must be a number, got {json.dumps(value)[:40]}")
    return float(value)


def read_trace(path: str) -> list[Arrival]:
    """The requests of a JSON-lines trace (module docstring); a bad line is an
    :class:`InputError` naming it."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_TRACE_BYTES + 1)
    except OSError as err:
        raise InputError(f"cannot read trace {path}: {err.strerror or err}") from None
    if len(raw) > MAX_TRACE_BYTES:
        raise InputError(f"{os.path.basename(path)}: larger than {MAX_TRACE_BYTES // 2 ** 20} MiB (a trace holds at "
                         f"most {MAX_REQUESTS:,} requests)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text (a trace is JSON lines)") from None
    name = os.path.basename(path)
    out: list[Arrival] = []
    lines: list[int] = []  # the line of each request
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            raise InputError(f"{name}: line {n}: not a JSON object") from None
        if not isinstance(obj, dict):
            raise InputError(f"{name}: line {n}: not a JSON object")
        unknown = sorted(set(obj) - {"arrival", "input_tokens", "output_tokens"})
        if unknown:
            raise InputError(f"{name}: line {n}: unknown key {json.dumps(unknown[0])[:40]} (a request has "
                             "arrival, input_tokens, output_tokens)")
        arrival = _field(obj, "arrival", n, name, required=False)
        if arrival is not None and arrival < 0:
            raise InputError(f"{name}: line {n}: arrival must be at least 0 seconds, got {arrival:g}")
        sizes = []
        for key in ("input_tokens", "output_tokens"):
            value = _field(obj, key, n, name)
            assert value is not None
            if value != int(value) or not 1 <= value <= MAX_TOKENS:
                raise InputError(f"{name}: line {n}: {key} must be a whole number from 1 to {MAX_TOKENS:,}, "
                                 f"got {value:g}")
            sizes.append(int(value))
        out.append(Arrival(arrival, sizes[0], sizes[1]))
        lines.append(n)
        if len(out) > MAX_REQUESTS:
            raise InputError(f"{name}: more than {MAX_REQUESTS:,} requests")
    if not out:
        raise InputError(f"{name}: no requests (a trace is JSON lines, one request a line)")
    timed = [r.arrival is not None for r in out]
    if any(timed) and not all(timed):
        k = timed.index(not timed[0])  # the first request unlike the first
        raise InputError(f"{name}: line {lines[k]}: {'has an arrival' if timed[k] else 'has no arrival'} and "
                         f"line {lines[0]} {'has none' if timed[k] else 'has one'}: give every request its "
                         "arrival, or none (--rate draws them)")
    return out


def parse_rate(text: str) -> float:
    """``--rate QPS|inf``: requests per second (``inf``: all at once)."""
    value = text.strip().lower()
    if value == "inf":
        return math.inf
    try:
        rate = float(value)
    except ValueError:
        rate = math.nan
    if not (rate > 0 and math.isfinite(rate)):
        raise OptionsError(f"--rate must be a positive number of requests per second or inf, got {text!r}",
                           obj="--rate")
    return rate


def arrivals(requests: list[Arrival], rate: float, seed: int) -> list[Arrival]:
    """``requests`` with their arrival times, sorted by them (stable): a trace's own when every
    request has one, else a seeded Poisson process of ``rate`` (module docstring)."""
    if all(r.arrival is not None for r in requests):
        return sorted(requests, key=lambda r: r.arrival or 0.0)
    rng = random.Random(seed)
    t = 0.0
    out = []
    for r in requests:
        out.append(Arrival(t if math.isfinite(rate) else 0.0, r.input_tokens, r.output_tokens))
        if math.isfinite(rate):
            t += rng.expovariate(rate)
    return out
