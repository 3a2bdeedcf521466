"""``mapper serve``: the in-flight batching simulator, KV admission and preemption, goodput, traces."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from mapper.cli import main
from mapper.errors import InfeasibleError, InputError, OptionsError
from mapper.serving.inflight import Scheduler, Served, simulate
from mapper.serving.iteration import Batch
from mapper.serving.metrics import Slo, goodput, max_concurrency, metrics, percentile
from mapper.serving.workload import Arrival, arrivals, parse_rate, parse_workload, read_trace

ROOT = Path(__file__).resolve().parent.parent
LLAMA = str(ROOT / "examples" / "llama.tg")
PARAMS = (("LAYERS", 2), ("HIDDEN", 512), ("HEADS", 8), ("KV_HEADS", 2), ("FFN", 1024), ("VOCAB", 1000))
SMALL = [a for k, v in PARAMS for a in ("--param", f"{k}={v}")]


def _steps(log: list[Batch]):
    def step(b: Batch) -> float:
        log.append(b)
        return 1.0

    return step


def test_hand_worked_schedule():
    """Three requests, a 4-token budget, one second a step (worked by hand in the comments)."""
    reqs = [Arrival(0.0, 6, 3), Arrival(0.0, 2, 2), Arrival(2.5, 1, 1)]
    log: list[Batch] = []
    run = simulate(reqs, _steps(log), Scheduler(capacity=1024, block=16, max_batch=8, chunk=4, reserve_output=True))
    # step 1 [0,1]: A's first chunk of 4 (budget spent; B waits)
    # step 2 [1,2]: A's last 2 prompt tokens, B's whole prompt of 2: both give their first token at 2
    # step 3 [2,3]: A and B decode (C arrives at 2.5, after the step began): B ends at 3
    # step 4 [3,4]: A decodes its last token, C's prompt of 1 gives its only token: both end at 4
    assert run.steps == 4
    assert [b.tokens for b in log] == [4, 4, 2, 2]
    assert [b.sampled for b in log] == [0, 2, 2, 2]
    assert [b.pairs for b in log] == [10, 2 * 4 + 3 + 3, 0, 1]  # c p + c (c+1)/2 per chunk
    assert [b.decode_context for b in log] == [0, 0, 7 + 3, 8]  # positions each decode reads
    a, b, c = run.served
    assert (a.admitted, a.first, a.done) == (0.0, 2.0, 4.0)
    assert (b.admitted, b.first, b.done) == (1.0, 2.0, 3.0)
    assert (c.admitted, c.first, c.done) == (3.0, 4.0, 4.0)
    assert run.max_running == 2 and run.preemptions == 0
    # each step's end, sequences run, KV blocks held (one 16-token block per request) and requests waiting
    assert run.timeline == ((1.0, 1, 1, 1), (2.0, 2, 2, 0), (3.0, 2, 2, 0), (4.0, 2, 2, 0))


def test_kv_admission_at_the_capacity_edge():
    """No eviction: a request is admitted only with blocks for its prompt and whole output."""
    reqs = [Arrival(0.0, 4, 5), Arrival(0.0, 4, 5)]  # 4 + 5 - 1 = 8 cached tokens each: 2 blocks of 4
    for capacity, together in ((8, False), (12, False), (16, True)):
        run = simulate(reqs, lambda b: 1.0, Scheduler(capacity, 4, 8, 64, True))
        first, second = run.served
        assert first.admitted == 0.0
        assert (second.admitted == 0.0) is together
        if not together:  # queued until the first request ends and frees its blocks
            assert second.admitted == first.done
        assert run.peak_blocks <= capacity // 4
    with pytest.raises(InfeasibleError, match="request 1 needs 9 tokens"):
        simulate([Arrival(0.0, 5, 5)], lambda b: 1.0, Scheduler(8, 4, 8, 64, True))


def test_preemption_by_recompute_at_the_capacity_edge():
    """Blocks taken as tokens arrive: when a decode cannot grow, the last admitted is preempted."""
    reqs = [Arrival(0.0, 2, 3), Arrival(0.0, 2, 3)]
    log: list[Batch] = []
    run = simulate(reqs, _steps(log), Scheduler(capacity=4, block=2, max_batch=8, chunk=64, reserve_output=False))
    # step 1: both prompts (a block each; cache full), both first tokens at 1
    # step 2: A needs a third token's block: B is preempted; A decodes
    # step 3: A decodes into its second block and ends at 3, freeing both
    # step 4: B recomputes its prompt and its token (3 tokens), its second token at 4; step 5 its last
    assert run.preemptions == 1
    a, b = run.served
    assert (a.first, a.done) == (1.0, 3.0)
    assert (b.first, b.done) == (1.0, 5.0)
    assert [x.tokens for x in log] == [4, 1, 1, 3, 1]


def test_percentiles_and_goodput_definition():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([1, 2, 3, 4], 90) == pytest.approx(3.7)  # NumPy's linear interpolation
    # ten requests of 11 tokens: nine meet a TTFT SLO of 1 s and a TPOT SLO of 0.1 s, one does not
    served = [Served(0.0, 0.0, 0.5, 1.5, 10, 11) for _ in range(9)] + [Served(0.0, 0.0, 2.0, 3.0, 10, 11)]
    assert goodput(served, Slo(1.0, 0.1, 90.0), 5.0) == 5.0  # 90 % attain: the rate counts
    assert goodput(served, Slo(1.0, 0.1, 91.0), 5.0) == 0.0
    assert goodput(served, Slo(None, 0.1, 99.0), 5.0) == 5.0  # all meet the TPOT SLO alone
    assert goodput(served, Slo(None, 0.05, 50.0), 5.0) == 0.0  # no request streams at 50 ms a token
    assert goodput(served, Slo(), 5.0) is None
    m = metrics(served, Slo(1.0, 0.1, 90.0))
    assert m["requests_per_s"] == pytest.approx(10 / 3.0)
    assert m["output_tokens_per_s"] == pytest.approx(110 / 3.0)
    assert m["ttft"]["p50"] == 0.5 and m["tpot"]["mean"] == pytest.approx(0.1)
    assert max_concurrency(served) == 10


def test_workload_and_rate():
    reqs = parse_workload("isl=128,osl=64,requests=3")
    assert [(r.input_tokens, r.output_tokens) for r in reqs] == [(128, 64)] * 3
    assert [r.arrival for r in arrivals(reqs, math.inf, 0)] == [0.0, 0.0, 0.0]
    poisson = [r.arrival for r in arrivals(reqs * 100, 10.0, 7)]
    assert poisson == [r.arrival for r in arrivals(reqs * 100, 10.0, 7)]  # seeded: the same stream
    assert poisson == sorted(poisson) and 15 < poisson[-1] < 45  # 299 gaps of mean 0.1 s
    for bad in ("isl=1", "isl=1,osl=0", "isl=1,osl=2,foo=3", "isl=x,osl=1"):
        with pytest.raises(OptionsError):
            parse_workload(bad)
    assert parse_rate("inf") == math.inf
    with pytest.raises(OptionsError):
        parse_rate("-1")


@pytest.mark.parametrize("line, why", [
    ("{\"input_tokens\": 10}", "output_tokens must be a number"),
    ("not json", "not a JSON object"),
    ("{\"arrival\": -1, \"input_tokens\": 1, \"output_tokens\": 1}", "arrival must be at least 0"),
    ("{\"input_tokens\": 1.5, \"output_tokens\": 1}", "input_tokens must be a whole number"),
    ("{\"input_tokens\": 1, \"output_tokens\": 1, \"prompt\": 1}", "unknown key"),
    ("{\"input_tokens\": 1, \"output_tokens\": 1}", "has no arrival and line 1 has one"),
])
def test_trace_bad_line_exits_2_naming_it(tmp_path, capsys, line, why):
    trace = tmp_path / "t.jsonl"
    good = json.dumps({"arrival": 0.0, "input_tokens": 16, "output_tokens": 4})
    trace.write_text(f"{good}\n\n{line}\n{good}\n")
    with pytest.raises(InputError, match=f"line 3: {why}"):
        read_trace(str(trace))
    code = main(["serve", LLAMA, *SMALL, "--platform", "dgx-a100", "--trace", str(trace), "--rate", "inf"])
    err = capsys.readouterr().err
    assert code == 2 and "line 3" in err and "Traceback" not in err


def test_serve_json_contract(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"arrival": i * 0.01, "input_tokens": 32 + i, "output_tokens": 8}) + "\n"
                             for i in range(12)))
    out = tmp_path / "serve.json"
    code = main(["serve", LLAMA, *SMALL, "--platform", "dgx-a100", "--trace", str(trace),
                 "--parallel", "tensor=2,pipeline=2", "--slo-ttft", "1", "--slo-tpot", "0.1", "--json", str(out)])
    text = capsys.readouterr().out
    assert code == 0
    doc = json.loads(out.read_text())["serving"]
    for key in ("output_tokens_per_s", "total_tokens_per_s", "requests_per_s", "goodput", "kv_capacity_tokens",
                "max_concurrency", "cost_per_million_tokens"):
        assert key in doc
    for key in ("ttft", "tpot", "e2e"):
        assert set(doc[key]) == {"mean", "p50", "p90", "p99"}
    assert doc["plan"] == {"replicas": 2, "tensor": 2, "pipeline": 2, "gpus": 8, "chunk": 8192, "max_batch": 2048,
                           "gpu": "gpu0", "precision": "fp16", "kv_precision": "fp16"}
    assert doc["cost_per_million_tokens"] > 0  # dgx-a100 gives its on-demand price per GPU hour
    assert doc["requests"] == 12 and doc["goodput"] == doc["requests_per_s"]
    assert "output tokens/s" in text and "goodput" in text
    again, page = tmp_path / "again.json", tmp_path / "serve.html"
    main(["serve", LLAMA, *SMALL, "--platform", "dgx-a100", "--trace", str(trace), "--parallel",
          "tensor=2,pipeline=2", "--slo-ttft", "1", "--slo-tpot", "0.1", "--json", str(again), "--html", str(page)])
    assert again.read_bytes() == out.read_bytes()  # same inputs, same bytes
    html = page.read_text()
    assert html.count("<svg") == 3 and "KV cache in use" in html and "Requests waiting" in html


def test_serve_auto_and_usage_errors(capsys):
    code = main(["serve", LLAMA, *SMALL, "--platform", "dgx-a100", "--workload", "isl=64,osl=8,requests=16",
                 "--rate", "50", "--parallel", "auto", "--json", "-", "--quiet"])
    doc = json.loads(capsys.readouterr().out)["serving"]
    assert code == 0 and doc["plans_simulated"] > 1 and doc["plan"]["gpus"] <= 8
    assert main(["serve", LLAMA, *SMALL, "--platform", "dgx-a100", "--workload", "isl=64,osl=8"]) == 2  # no --rate
    assert "give --rate" in capsys.readouterr().err
    for bad in (["--parallel", "tensor=16"], ["--runtime", "nope"], ["--slo-ttft", "-1"]):
        assert main(["serve", LLAMA, *SMALL, "--platform", "dgx-a100", "--workload", "isl=64,osl=8",
                     "--rate", "inf", *bad]) == 2


def test_step_model_prices_from_the_cost_model():
    from mapper.frontend.sources import ModelFile
    from mapper.serving.runtimes import RUNTIMES
    from mapper.serving.serve import server_for

    server = server_for(ModelFile(LLAMA, params=PARAMS), "dgx-a100", RUNTIMES["trtllm"])
    one, two = server.step_model(1, 1, 512), server.step_model(1, 2, 512)
    single = Batch(1, 1, 100, 0, 1)
    assert two.step(single) == pytest.approx(sum(two.stage_times(single)))  # one sequence: no overlap
    many = Batch(64, 64, 64 * 500, 0, 64)
    assert two.step(many) == pytest.approx(max(sum(two.stage_times(many)), 2 * max(two.stage_times(many))))
    assert one.step(Batch(512, 1, 0, 512 * 513 / 2, 1)) > one.step(Batch(16, 16, 16 * 512, 0, 16))
    assert one.step(Batch(16, 16, 16 * 4096, 0, 16)) > one.step(Batch(16, 16, 16 * 512, 0, 16))  # reads more KV
    capacity = 80 * 2.0 ** 30
    tokens1 = one.memory(capacity, RUNTIMES["trtllm"])[1]
    tokens2 = server.step_model(2, 1, 512).memory(capacity, RUNTIMES["trtllm"])[1]
    assert tokens2 > tokens1 > 0 and tokens1 % 64 == 0  # whole blocks; two ranks hold half the heads each


def test_precision_stores_weights_and_cache_smaller(capsys):
    from mapper.frontend.sources import ModelFile
    from mapper.serving.precision import kv_format, weight_format
    from mapper.serving.runtimes import RUNTIMES
    from mapper.serving.serve import server_for

    assert kv_format(None, "fp8", "trtllm") == "fp8" and kv_format(None, "fp8", "vllm") == "fp16"
    assert weight_format("bf16") is None
    src = ModelFile(LLAMA, params=PARAMS)
    base = server_for(src, "dgx-h100", RUNTIMES["trtllm"]).step_model(1, 1, 512)
    fp8 = server_for(src, "dgx-h100", RUNTIMES["trtllm"], precision="fp8").step_model(1, 1, 512)
    layer = next(b for b, a in enumerate(base.attention_blocks) if a)
    assert fp8.kv_per_token[layer] == base.kv_per_token[layer] / 2  # TensorRT-LLM's FP8 cache with FP8 weights
    assert fp8.weights[-1] == base.weights[-1]  # the LM head stays 16-bit
    assert sum(fp8.weights) < sum(base.weights)
    for bad, why in ((["--platform", "dgx-a100", "--precision", "fp8"], "no fp8 tensor rate"),
                     (["--platform", "dgx-h100", "--precision", "int3"], "unknown precision"),
                     (["--platform", "dgx-h100", "--kv-precision", "int8"], "unknown KV-cache precision")):
        assert main(["serve", LLAMA, *SMALL, "--workload", "isl=64,osl=8", "--rate", "inf", *bad]) == 2
        assert why in capsys.readouterr().err


def test_int4_awq_reads_a_quarter_of_the_linear_weights_at_the_16_bit_rate(capsys):
    """``--precision int4_awq`` (AWQ, W4A16) on an A100: a memory-bound decode step is faster, a
    compute-bound 8,192-token prefill stays within 1% of fp16, and the linear layers' weights take
    0.5 + 2.5/128 bytes each (4 bits, an f16 scale and a 4-bit zero per 128) while the embedding and
    LM head keep 2."""
    from mapper.frontend.sources import ModelFile
    from mapper.serving.runtimes import RUNTIMES
    from mapper.serving.serve import server_for

    src = ModelFile(LLAMA, params=(("LAYERS", 2),))  # Llama 3 8B's widths, two layers
    base = server_for(src, "dgx-a100", RUNTIMES["trtllm"]).step_model(1, 1, 8192)
    awq = server_for(src, "dgx-a100", RUNTIMES["trtllm"], precision="int4_awq").step_model(1, 1, 8192)
    decode = Batch(8, 8, 8 * 512, 0, 8)
    assert awq.step(decode) < 0.8 * base.step(decode)
    prefill = Batch(8192, 1, 0, 8192 * 8193 / 2, 1)
    assert awq.step(prefill) == pytest.approx(base.step(prefill), rel=0.01)
    linear = 2 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)  # QKV, output, gate/up/down
    assert sum(awq.weights) == pytest.approx(sum(base.weights) - 2 * linear + linear * (0.5 + 2.5 / 128), rel=1e-9)
    assert awq.weights[0] == base.weights[0] and awq.weights[-1] == base.weights[-1]  # embedding, LM head
    code = main(["serve", LLAMA, *SMALL, "--platform", "dgx-a100", "--workload", "isl=64,osl=8", "--rate", "inf",
                 "--precision", "int4_awq", "--json", "-", "-q"])
    plan = json.loads(capsys.readouterr().out)["serving"]["plan"]
    assert code == 0 and plan["precision"] == "int4_awq" and plan["kv_precision"] == "fp16"


def test_cost_per_million_tokens_from_a_price(tmp_path, capsys):
    text = (ROOT / "platforms" / "dgx-a100.toml").read_text()
    assert "price_per_hour = 3.431 " in text  # the shipped on-demand price, replaced by another
    priced = tmp_path / "priced.toml"
    priced.write_text(text.replace("price_per_hour = 3.431 ", "price_per_hour = 4.0 "))
    args = ["serve", LLAMA, *SMALL, "--workload", "isl=64,osl=16,requests=32", "--rate", "inf", "--json", "-"]
    assert main([*args, "--platform", str(priced)]) == 0
    doc = json.loads(capsys.readouterr().out)["serving"]
    per_hour = doc["output_tokens_per_s"] * 3600 / 1e6  # millions of output tokens an hour
    assert doc["cost_per_million_tokens"] == pytest.approx(8 * 4.0 / per_hour)
    assert doc["cost_note"] is None


def test_simulator_invariants_on_random_streams():
    """Every request ends, in order of its events, within the cache, under both admission rules."""
    import random

    rng = random.Random(3)
    for case in range(60):
        reserve = case % 2 == 0
        block = rng.choice((1, 2, 4, 16))
        reqs = [Arrival(rng.uniform(0, 5), rng.randint(1, 40), rng.randint(1, 30)) for _ in range(rng.randint(1, 25))]
        reqs.sort(key=lambda r: r.arrival or 0.0)
        need = max(r.input_tokens + r.output_tokens for r in reqs)
        capacity = (need + rng.randint(0, 120)) // block * block + block
        sched = Scheduler(capacity, block, rng.randint(1, 8), rng.randint(1, 64), reserve)
        run = simulate(reqs, lambda b: 0.01 + 0.001 * b.tokens, sched)
        assert run.peak_blocks <= capacity // block and run.max_running <= sched.max_batch
        assert reserve is False or run.preemptions == 0
        for r in run.served:
            assert r.arrival <= r.admitted < r.first <= r.done


@pytest.mark.parametrize("platform,fmt,price", [("dgx-h200", "fp8", 7.912), ("dgx-b200", "nvfp4", 14.2416),
                                                ("gb200-nvl72", "nvfp4", 10.50)])
def test_hopper_next_and_blackwell_serve_with_their_prices(platform, fmt, price, capsys):
    args = ["serve", LLAMA, *SMALL, "--workload", "isl=64,osl=16,requests=16", "--rate", "inf", "--precision", fmt,
            "--parallel", "tensor=1,pipeline=1,replicas=1", "--platform", platform, "--json", "-", "-q"]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)["serving"]
    per_hour = doc["output_tokens_per_s"] * 3600 / 1e6
    assert doc["cost_per_million_tokens"] == pytest.approx(price / per_hour)
    assert doc["plan"]["precision"] == fmt


def test_h200_has_no_nvfp4(capsys):
    args = ["serve", LLAMA, *SMALL, "--workload", "isl=64,osl=16", "--rate", "inf", "--precision", "nvfp4",
            "--platform", "dgx-h200"]
    assert main(args) == 2
    assert "no nvfp4 tensor rate" in capsys.readouterr().err


def test_blackwell_decode_attention_streams_its_cache():
    """A B200 reads a decode's cache at its 8 TB/s as an H200 at 4.8: the attention half-length fitted
    on training kernels (long queries) does not slow a one-query decode."""
    from mapper.frontend.sources import ModelFile
    from mapper.serving.runtimes import RUNTIMES
    from mapper.serving.serve import server_for

    src = ModelFile(LLAMA, params=(("LAYERS", 2),))
    per_position = [server_for(src, p, RUNTIMES["trtllm"], precision="fp8").step_model(1, 1, 8192).beta_decode
                    for p in ("dgx-h200", "dgx-b200")]
    assert per_position[1] < per_position[0]
