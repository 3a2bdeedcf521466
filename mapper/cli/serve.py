"""``mapper serve MODEL --platform P``: a request stream through in-flight batching (docs/serving.md).

Prints the plan, the throughputs, the latency percentiles, goodput, the KV cache and the memory
per GPU; ``--json OUT`` writes the same as JSON (``serving``, DESIGN section 9).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

from mapper.cli import add_fuse_option, status_line
from mapper.cli.model_options import add_model_options, source
from mapper.core.files import atomic_write, check_outputs, existing, outputs_together
from mapper.core.progress import Progress
from mapper.core.units import fmt_bytes, fmt_time
from mapper.errors import InputWarning, OptionsError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "serve", help="simulate LLM serving: a request stream, in-flight batching, SLOs",
        description="Serve a request stream (fixed lengths or a JSON-lines trace) with in-flight batching on "
                    "a platform's GPUs: paged KV cache, chunked prefill, step times from the cost model. "
                    "Prints throughput, TTFT/TPOT/e2e percentiles and goodput (docs/serving.md).",
    )
    p.add_argument("file", metavar="MODEL", help="a DSL model with params SEQ, BATCH and CACHE (examples/llama.tg)")
    add_model_options(p)
    p.add_argument("--platform", default=None, metavar="P",
                   help="a shipped platform name or a TOML path (required unless --gpus is given)")
    add_fuse_option(p)
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--workload", metavar="isl=N,osl=M[,requests=R]",
                     help="R requests (default 1,000) of N prompt and M output tokens")
    how.add_argument("--trace", metavar="FILE.jsonl",
                     help="JSON lines: arrival (seconds, optional), input_tokens, output_tokens")
    p.add_argument("--rate", default=None, metavar="QPS|inf",
                   help="Poisson arrivals at QPS requests/s, or inf: all at once (needed unless every trace "
                        "line gives its arrival)")
    p.add_argument("--seed", type=int, default=0, help="seed of the Poisson arrivals (default 0)")
    p.add_argument("--parallel", default="tensor=1,pipeline=1", metavar="LAYOUT|auto",
                   help="tensor=T,pipeline=P[,replicas=R][,chunk=C][,max_batch=B] (default tensor=1,pipeline=1, "
                        "replicas filling the GPUs, the runtime's chunk and max batch), or auto")
    p.add_argument("--disaggregate", action="store_true",
                   help="separate prefill and decode pools, the KV cache sent between them (DistServe, Splitwise); "
                        "--parallel keys prefill=R,decode=R and prefill_tensor, decode_pipeline, ... or auto")
    p.add_argument("--gpus", default=None, metavar="KIND=N[@PRICE],...",
                   help="choose the cheapest mix of these GPUs that meets the SLOs at --rate (Melange): KIND a100, "
                        "h100, h200, b200, l4, l40s, a platform name or TOML path; PRICE dollars per GPU hour, "
                        "else the platform's price_per_hour")
    p.add_argument("--runtime", default="trtllm", metavar="NAME",
                   help="trtllm (default), trtllm-pytorch (its PyTorch backend: decode steps padded to CUDA-graph "
                        "batch sizes), vllm, sglang (v0.3.0: prefill-first steps, a front-end latency per "
                        "request), or eager (vllm without CUDA graphs: each kernel at least its framework ops' CPU "
                        "dispatch): KV blocks, memory fraction, limits, scheduling")
    p.add_argument("--dispatch", default=None, metavar="POLICY",
                   help="how requests are dealt to replicas: round-robin (default) or least-loaded (each to the "
                        "replica with the fewest requests in flight, as NVIDIA's MLPerf harness does); with "
                        "--disaggregate it deals both pools, the decode replica chosen at the first token")
    p.add_argument("--precision", default=None, metavar="FMT",
                   help="weights and linear-layer GEMMs: fp16 (default, the model's 16-bit), bf16, fp8, mxfp8, "
                        "nvfp4, int4_awq (4-bit AWQ weights, 16-bit GEMMs); the GPU needs a tensor rate for it")
    p.add_argument("--kv-precision", default=None, metavar="FMT",
                   help="the KV cache: fp16, bf16 or fp8 (default: fp8 with fp8/nvfp4 weights under trtllm and "
                        "trtllm-pytorch, as TensorRT-LLM sets it; else fp16)")
    p.add_argument("--kv-fraction", type=float, default=None, metavar="F",
                   help="the runtime's KV-cache memory fraction (TensorRT-LLM free_gpu_memory_fraction, "
                        "vLLM gpu_memory_utilization; default the runtime's 0.9)")
    p.add_argument("--slo-ttft", type=float, default=None, metavar="S", help="time to first token at most S s")
    p.add_argument("--slo-tpot", type=float, default=None, metavar="S", help="time per output token at most S s")
    p.add_argument("--slo-percentile", type=float, default=99.0, metavar="P",
                   help="per cent of requests that must meet both SLOs for goodput (default 99)")
    p.add_argument("--json", default=None, metavar="OUT", help="write the results as JSON ('-': stdout)")
    p.add_argument("--html", default=None, metavar="OUT",
                   help="write the report with the first replica's batch size, KV use and queue over time")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    p.set_defaults(func=run)


def _positive(value: float | None, flag: str) -> None:
    if value is not None and not (value > 0 and math.isfinite(value)):
        raise OptionsError(f"{flag} must be a positive number of seconds, got {value!r}", obj=flag)


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from mapper.serving.dispatch import dispatch_policy
    from mapper.serving.metrics import Slo
    from mapper.serving.mix import parse_gpus
    from mapper.serving.runtimes import get_runtime
    from mapper.serving.serve import cost_per_million, parse_parallel
    from mapper.serving.workload import arrivals, parse_rate, parse_workload, read_trace

    offers = parse_gpus(args.gpus) if args.gpus is not None else None
    if offers is None and args.platform is None:
        raise OptionsError("give --platform P (or --gpus KIND=N,... to choose a mix)", obj="--platform")
    if offers is not None and (args.platform is not None or args.disaggregate or args.html is not None):
        raise OptionsError("--gpus chooses the platforms itself: leave out --platform, --disaggregate and --html",
                           obj="--gpus")
    check_outputs({"--json": args.json, "--html": args.html}, existing(args.file, args.platform, args.trace))
    _positive(args.slo_ttft, "--slo-ttft")
    _positive(args.slo_tpot, "--slo-tpot")
    if not 0 < args.slo_percentile <= 100:
        raise OptionsError(f"--slo-percentile must be above 0 and at most 100, got {args.slo_percentile:g}",
                           obj="--slo-percentile")
    runtime = get_runtime(args.runtime)
    if args.kv_fraction is not None:
        if not 0 < args.kv_fraction <= 1:
            raise OptionsError(f"--kv-fraction must be above 0 and at most 1, got {args.kv_fraction:g}",
                               obj="--kv-fraction")
        runtime = replace(runtime, kv_fraction=args.kv_fraction)
    if args.dispatch is not None:
        runtime = replace(runtime, dispatch=dispatch_policy(args.dispatch))
    given = parse_parallel(args.parallel)
    requests = parse_workload(args.workload) if args.workload is not None else read_trace(args.trace)
    rate = parse_rate(args.rate) if args.rate is not None else None
    timed = all(r.arrival is not None for r in requests)
    if rate is None and not timed:
        raise OptionsError("give --rate QPS|inf: the requests have no arrival times", obj="--rate")
    if rate is not None and timed:
        warnings.warn(InputWarning("the trace gives every arrival: --rate is not used"), stacklevel=1)
    requests = arrivals(requests, rate if rate is not None else math.inf, args.seed)
    slo = Slo(args.slo_ttft, args.slo_tpot, args.slo_percentile)
    if offers is not None:
        return _mix(args, runtime, offers, requests, rate, slo)
    server = _server(args, runtime, args.platform)
    status = status_line(args)
    with status or nullcontext():
        outcome, tried = _simulate(server, given, requests, slo, args.disaggregate, _phases(status))
    price = server.prices.gpu.price_per_hour
    doc = serving_json(outcome, server.prices.gpu.name, cost_per_million(outcome, price), runtime.name, tried,
                       server.formats)
    text = render(doc, outcome.memory)
    with outputs_together({"--json": args.json, "--html": args.html}):  # both or neither (core/files.py)
        if args.json is not None:
            atomic_write(args.json, json.dumps({"serving": doc}, indent=1, sort_keys=False) + "\n", "--json")
        if args.html is not None:
            from mapper.report.serving_html import serving_html

            run0 = outcome.runs[0]
            atomic_write(args.html, serving_html(text, run0.timeline, run0.blocks, runtime.block,
                                                 outcome.plan.max_batch), "--html")
    if args.json != "-":
        sys.stdout.write(text)
    return 0


def _simulate(server, given, requests, slo, disaggregate: bool, progress) -> tuple[Any, int]:
    from mapper.serving.disagg import POOL_KEYS, auto_disaggregated, given_plan, run_disaggregated

    if disaggregate:
        if given is not None and "replicas" in given:
            raise OptionsError("with --disaggregate give prefill=R and decode=R, not replicas", obj="--parallel")
        if given is None:
            return auto_disaggregated(server, {}, requests, slo, progress)
        return run_disaggregated(server, given_plan(server, given), requests, slo), 1
    if given is not None and any(k in given for k in POOL_KEYS):
        raise OptionsError(f"{', '.join(k for k in POOL_KEYS if k in given)} needs --disaggregate", obj="--parallel")
    if given is None:
        return server.auto({}, requests, slo, progress)
    return server.run(server.plan(given), requests, slo), 1


def _server(args: argparse.Namespace, runtime, platform: str) -> Any:
    from mapper.serving.serve import server_for

    return server_for(source(args), platform, runtime, args.fuse, args.precision, args.kv_precision)


def _mix(args: argparse.Namespace, runtime, offers, requests, rate: float | None, slo) -> int:
    from mapper.serving.mixplan import plan_mix, render_mix

    if rate is None:
        raise OptionsError("--gpus needs --rate QPS: the mix is sized for a request rate", obj="--rate")
    servers = {o.kind: _server(args, runtime, o.platform) for o in offers}
    status = status_line(args)
    with status or nullcontext():
        doc = plan_mix(servers, offers, requests, rate, slo, args.seed, _phases(status))
    doc = _finite({**doc, "runtime": runtime.name})
    if args.json is not None:
        atomic_write(args.json, json.dumps({"serving": doc}, indent=1, sort_keys=False) + "\n", "--json")
    if args.json != "-":
        sys.stdout.write(render_mix(doc))
    return 0


def _phases(status: Any) -> Callable[[str], None] | None:
    """The searches' phase texts as reports on the command's status line (None with ``-q``)."""
    if status is None:
        return None
    start = time.perf_counter()
    return lambda phase: status(Progress(time.perf_counter() - start, None, None, phase))


def serving_json(outcome, gpu: str, cost: float | None, runtime: str, tried: int,
                 formats: tuple[str, str] = ("fp16", "fp16")) -> dict[str, Any]:
    """JSON ``serving`` (DESIGN section 9; docs/serving.md)."""
    m = outcome.metrics
    p = outcome.plan
    doc: dict[str, Any] = {k: m[k] for k in ("output_tokens_per_s", "total_tokens_per_s", "requests_per_s",
                                               "ttft", "tpot", "e2e", "goodput", "slo_attainment")}
    doc["kv_capacity_tokens"] = m["kv_capacity_tokens"]
    doc["max_concurrency"] = m["max_concurrency"]
    pools = getattr(p, "prefill", None) is not None
    top = p.decode if pools else p
    doc["plan"] = {"replicas": top.replicas + (p.prefill.replicas if pools else 0), "tensor": top.tensor,
                   "pipeline": top.pipeline, "gpus": p.gpus, "chunk": p.chunk, "max_batch": p.max_batch, "gpu": gpu,
                   "precision": formats[0], "kv_precision": formats[1]}
    if pools:
        doc["plan"]["prefill"] = p.prefill.to_json()
        doc["plan"]["decode"] = p.decode.to_json()
        doc["kv_transfer_s"] = outcome.transfer
    doc["cost_per_million_tokens"] = cost
    doc["cost_note"] = None if cost is not None else "the platform gives no price per GPU hour"
    doc["runtime"] = runtime
    doc["requests"] = m["requests"]
    doc["duration_s"] = m["duration_s"]
    doc["preemptions"] = m["preemptions"]
    doc["steps"] = m["steps"]
    doc["plans_simulated"] = tried
    doc["memory_per_gpu"] = {k: v for k, v in outcome.memory.items()}
    return _finite(doc)


def _finite(x: Any) -> Any:
    """``x`` with infinities and NaNs as null (JSON has none)."""
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:,.1f} ms"


def render(doc: dict[str, Any], memory: dict[str, float]) -> str:
    """The text report: the same figures as JSON ``serving``."""
    p = doc["plan"]
    if "prefill" in p:
        pre, dec = p["prefill"], p["decode"]
        lines = [f"plan         prefill {pre['replicas']} x (tensor {pre['tensor']} x pipeline {pre['pipeline']}) + "
                 f"decode {dec['replicas']} x (tensor {dec['tensor']} x pipeline {dec['pipeline']}) = {p['gpus']} x "
                 f"{p['gpu']}, chunk {p['chunk']:,}, max batch {p['max_batch']:,} ({doc['runtime']}; weights "
                 f"{p['precision']}, KV cache {p['kv_precision']})",
                 f"kv transfer  mean {_ms(doc['kv_transfer_s']['mean'])}, max {_ms(doc['kv_transfer_s']['max'])} "
                 "per request, prefill to decode"]
        return _rest(doc, memory, lines)
    lines = [f"plan         {p['replicas']} replica{'s' if p['replicas'] != 1 else ''} x (tensor {p['tensor']} x "
             f"pipeline {p['pipeline']}) = {p['gpus']} x {p['gpu']}, chunk {p['chunk']:,}, max batch "
             f"{p['max_batch']:,} ({doc['runtime']}; weights {p['precision']}, KV cache {p['kv_precision']})"]
    return _rest(doc, memory, lines)


def _rest(doc: dict[str, Any], memory: dict[str, float], lines: list[str]) -> str:
    if doc["plans_simulated"] > 1:
        lines.append(f"search       {doc['plans_simulated']} plans simulated")
    lines.append(f"requests     {doc['requests']:,} in {fmt_time(doc['duration_s'])}, {doc['steps']:,} steps, "
                 f"{doc['preemptions']:,} preemptions")
    lines.append(f"throughput   {doc['output_tokens_per_s'] or 0:,.0f} output tokens/s, "
                 f"{doc['total_tokens_per_s'] or 0:,.0f} tokens/s in all, {doc['requests_per_s'] or 0:,.2f} requests/s")
    for key, name in (("ttft", "ttft"), ("tpot", "tpot"), ("e2e", "e2e")):
        s = doc[key]
        lines.append(f"{name:<12} mean {_ms(s['mean'])}, p50 {_ms(s['p50'])}, p90 {_ms(s['p90'])}, "
                     f"p99 {_ms(s['p99'])}")
    if doc["goodput"] is None:
        lines.append("goodput      - (no --slo-ttft or --slo-tpot)")
    else:
        lines.append(f"goodput      {doc['goodput']:,.2f} requests/s ({doc['slo_attainment'] * 100:.1f} % of requests "
                     "meet the SLOs)")
    lines.append(f"kv cache     {doc['kv_capacity_tokens']:,} tokens in all; at most {doc['max_concurrency']:,} "
                 "requests at once")
    lines.append("memory       " + ", ".join(f"{k} {fmt_bytes(v)}" for k, v in memory.items()) + " per GPU")
    cost = doc["cost_per_million_tokens"]
    lines.append(f"cost         {'-' if cost is None else f'${cost:,.3f}'} per million output tokens"
                 + (f" ({doc['cost_note']})" if cost is None else ""))
    return "\n".join(lines) + "\n"
