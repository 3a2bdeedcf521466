"""The serving planner (--inference): requests priced from the cost model, built as a task
graph and validated; the KV cache in attention; eager dispatch; layouts, memory and bounds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mapper.cli import main
from mapper.core.ops import infer
from mapper.costing.cost import build_cost_table
from mapper.costing.efficiency import EFF_MEMORY_GEMM
from mapper.engine.validate import validate
from mapper.errors import InfeasibleError, OptionsError
from mapper.frontend.load import graph_from_text
from mapper.frontend.lowering.program import lower
from mapper.frontend.parse import parse
from mapper.frontend.sources import ModelFile
from mapper.mapping.base import MapOptions
from mapper.parallel.collectives import network
from mapper.pipeline import compile_graph
from mapper.platform.loader import load_platform
from mapper.serving.driver import Serving
from mapper.serving.model import ServingLayout, ServingModel
from mapper.serving.request import Request, framework_ops, parse_inference, stream_time

ROOT = Path(__file__).resolve().parents[1]
GPT = str(ROOT / "examples" / "gpt.tg")
LLAMA = str(ROOT / "examples" / "llama.tg")
SMALL = (("LAYERS", 2), ("HIDDEN", 256), ("HEADS", 4), ("VOCAB", 1000))
MID = (("LAYERS", 8), ("HIDDEN", 4096), ("HEADS", 32), ("VOCAB", 51200))


def serve(params, request: str, platform: str = "dgx-a100", parallel: str = "none", runtime: str = "graph",
          model: str = GPT, **bounds):
    return compile_graph(ModelFile(model, params=params), platform, mapper="heft", options=MapOptions(),
                         parallel=parallel, serving=Serving.parse(request, runtime, **bounds))


def test_parse_inference():
    assert parse_inference("prefill=128") == Request(128, 0, 1)
    assert parse_inference("prefill=60, decode=19, batch=16") == Request(60, 19, 16)
    assert Request(60, 19, 16).tokens == 16 * 20 and Request(60, 19, 16).context == 79
    for bad, words in (("decode=3", "prefill=S_IN"), ("prefill=0", "from 1"), ("prefill=8,prefill=9", "twice"),
                       ("prefill=x", "whole number"), ("prefill=\uff18", "whole number"),
                       ("prefill=1_000", "whole number"), ("prefill=9999999999", "whole number"), ("prompt=3", "expected"), ("prefill=8,batch=-1", "from 1")):
        with pytest.raises(OptionsError, match=words):
            parse_inference(bad)


def test_attention_with_a_cache_counts_the_cached_keys():
    t = 2 * 1  # two sequences, one new token each
    plain = infer("attention", [_ty(t, 3 * 64)], {"heads": 4, "seq": 1})
    cached = infer("attention", [_ty(t, 3 * 64)], {"heads": 4, "seq": 1, "cache": 99})
    assert cached.flops == pytest.approx(plain.flops * 100)
    dh = 16
    assert cached.bytes_read - plain.bytes_read == 2 * 2 * 4 * 99 * dh * 2  # k and v, 2 sequences, 4 heads, f16
    gqa = infer("attention", [_ty(t, (4 + 2) * dh)], {"heads": 4, "kv_heads": 1, "seq": 1, "cache": 99})
    assert gqa.bytes_read - infer("attention", [_ty(t, (4 + 2) * dh)], {"heads": 4, "kv_heads": 1, "seq": 1}).bytes_read \
        == 2 * 2 * 1 * 99 * dh * 2


def test_decode_attention_reads_the_cache_near_the_bandwidth():
    """A decode step's attention (one query per sequence) is bound by reading the KV cache: between the
    bandwidth bound and 1.2 times it, however many heads and sequences (its MMA blocks run 16 rows)."""
    dgx = load_platform("dgx-a100")
    gpu = dgx.devices[dgx.device_index("gpu0")]
    for batch, heads, kv, cache in ((384, 32, 32, 128), (1, 32, 32, 2048), (64, 64, 8, 1000)):
        dh = 128
        text = (f"graph a {{\n  input q : f16[{batch}, {(heads + 2 * kv) * dh}]\n"
                f"  o = attention(q, heads = {heads}, kv_heads = {kv}, seq = 1, cache = {cache})\n  output o\n}}\n")
        g = graph_from_text(text)
        seconds = build_cost_table(g, dgx).time[0][dgx.device_index("gpu0")]
        bound = g.tasks[0].bytes / (gpu.mem_bandwidth_gbs * 1e9)
        assert bound < seconds <= 1.2 * bound / 0.9 + gpu.launch_us * 1e-6
    # unfused, the step is two batched small-M GEMMs streaming keys then values: EFF_MEMORY_GEMM
    text = ("graph a {\n  input q : f16[8, 9216]\n"
            "  o = attention(q, heads = 24, seq = 1, cache = 3072, fused = 0)\n  output o\n}\n")
    g = graph_from_text(text)
    seconds = build_cost_table(g, dgx).time[0][dgx.device_index("gpu0")]
    assert seconds >= g.tasks[0].bytes / (EFF_MEMORY_GEMM["gpu"] * gpu.mem_bandwidth_gbs * 1e9)


def _ty(*shape):
    from mapper.core.graph import TensorType

    return TensorType("f16", shape)


def test_a_run_refuses_a_cache():
    from mapper.errors import InputError
    from mapper.run.execute import refuse_kernel_less

    text = "graph g {\n  input x : f32[2, 48]\n  a = attention(x, heads = 2, seq = 1, cache = 4)\n  output a\n}\n"
    with pytest.raises(InputError, match="reads a KV cache"):
        refuse_kernel_less(graph_from_text(text, "g.tg"))


def test_a_request_is_built_validated_and_its_makespan_is_the_latency():
    got = serve(SMALL, "prefill=32,decode=4,batch=2")
    choice = got.serving
    assert choice is not None and validate(got.result.schedule) == []
    assert got.result.schedule.makespan == choice.latency
    assert 0 < choice.ttft < choice.latency
    assert choice.tpot == pytest.approx((choice.latency - choice.ttft) / 4)
    assert choice.tokens_per_s == pytest.approx(2 * 5 / choice.latency * choice.best.layout.replicas)
    # one stage, one micro-batch: the prefill and four steps; the closed form is exact then
    assert len(got.graph.tasks) == 5
    assert choice.latency == pytest.approx(choice.best.latency, rel=1e-9)
    # the cache: 2 layers x k and v x 4 heads x 64 x (32 + 4) positions x 2 sequences x 2 bytes
    assert choice.best.memory["kv_cache"] == 2 * 2 * 4 * 64 * 36 * 2 * 2


def test_prefill_only_and_decode_steps_grow_with_the_context():
    only = serve(SMALL, "prefill=32").serving
    assert only is not None and only.latency == only.ttft and only.tpot == 0
    long = serve(SMALL, "prefill=512,decode=64").serving
    assert long is not None
    assert long.best.decode_last[0] > long.best.decode_first[0]  # the cache read grows


def test_eager_dispatch_slows_a_small_batch_and_is_reported():
    graph = serve(MID, "prefill=16,decode=8").serving
    eager = serve(MID, "prefill=16,decode=8", runtime="eager").serving
    assert graph is not None and eager is not None
    assert eager.tpot > 1.5 * graph.tpot
    assert any("eager runtime" in n for n in eager.notes())
    assert framework_ops(("rmsnorm",), False) == 8 and framework_ops(("matmul", "add"), False) == 1
    assert framework_ops(("attention",), True) == framework_ops(("attention",), False) + 2
    # the decode step built per GPU is host-bound too: its makespan is the closed form's step
    for runtime, got in (("graph", graph), ("eager", eager)):
        assert got.step is not None and validate(got.step.schedule) == []
        assert got.step.schedule.makespan == pytest.approx(got.best.decode_first[0], rel=0.01), runtime
    assert any(b == "launch" for row in eager.step.schedule.cost.bound for b in row)


def test_stream_time_is_bound_by_the_cpu_or_the_gpu():
    assert stream_time([(10.0, 1)] * 4, 1.0) == pytest.approx(41.0)  # GPU-bound after the first issue
    assert stream_time([(1.0, 1)] * 4, 10.0) == pytest.approx(41.0)  # CPU-bound: each waits for its issue
    assert stream_time([(1.0, 5)], 0.0) == 1.0


def test_auto_splits_a_large_model_by_tensor_and_each_layout_validates():
    auto = serve(MID, "prefill=64,decode=8", parallel="auto")
    assert auto.serving is not None and auto.serving.best.layout.tensor > 1
    assert validate(auto.result.schedule) == []
    given = serve(MID, "prefill=64,decode=3,batch=4", parallel="tensor=2,pipeline=2")
    lay = given.serving.best.layout
    assert (lay.tensor, lay.pipeline) == (2, 2)
    assert len(given.graph.tasks) == 4 * 2 * lay.micro_batches
    assert validate(given.result.schedule) == []
    # a pipeline's request graph agrees with the closed form within a few per cent
    assert given.serving.latency == pytest.approx(given.serving.best.latency, rel=0.05)


def test_unfused_attention_scores_count_in_memory_and_a_kernel_too_big_rules_its_layout_out():
    """Unfused attention holds every score of the prompt (batch x heads x S x S); the plan counts the
    cost table's footprint, so a layout whose attention kernel exceeds the GPU does not fit (it used
    to be priced at an infinite time and end in an error about a task of the request graph)."""
    params = (("LAYERS", 2), ("HIDDEN", 2304), ("HEADS", 24), ("VOCAB", 51200))
    request = "prefill=2048,decode=4,batch=64"
    scores = 64 * 24 * 2048 * 2048 * 2  # f16 scores of one attention, one GPU
    with pytest.raises(InfeasibleError, match="no layout fits in memory"):
        serve(params, request, parallel="tensor=1,pipeline=1")
    got = serve(params, request, parallel="tensor=8,pipeline=1")
    assert got.serving.best.memory["activations"] > scores / 8
    assert validate(got.result.schedule) == []
    fused = serve((*params, ("FLASH", 1)), request, parallel="tensor=1,pipeline=1")
    assert fused.serving.best.memory["activations"] < scores / 3  # the MLP's 4h activations lead
    assert validate(fused.result.schedule) == []


def test_the_prefill_keeps_only_each_sequences_last_logits():
    """The LM head of the prefill runs on one token per sequence: its time and activations are those
    of the decode step's head, not of every prompt token (vLLM, TensorRT-LLM keep the last logits)."""
    big_vocab = (("LAYERS", 2), ("HIDDEN", 256), ("HEADS", 4), ("VOCAB", 50000), ("FLASH", 1))
    batch, prompt = 4, 2048
    for request in (f"prefill={prompt},batch={batch}", f"prefill={prompt},decode=4,batch={batch}"):
        got = serve(big_vocab, request)
        every_token_logits = batch * prompt * 50000 * 2
        assert got.serving.best.memory["activations"] < every_token_logits / 10
        assert validate(got.result.schedule) == []
    program = parse((ROOT / "examples" / "gpt.tg").read_text(), "gpt.tg")

    def at(seq, b, cache):
        return lower(program, {**dict(big_vocab), "SEQ": seq, "BATCH": b, "CACHE": cache})

    dgx = load_platform("dgx-a100")
    model = ServingModel(at, Request(prompt, 4, batch), dgx, lambda g: g, network(dgx), "graph")
    last = len(model.blocks) - 1
    assert model.head == (last, "first")  # the final norm and the LM head, priced as the decode step's
    assert model.block("prefill", last, 1, 1) == model.block("first", last, 1, 1)
    every = model.block("prefill", last, 1, 1, pruned=False)
    assert every.forward > 20 * model.block("prefill", last, 1, 1).forward
    assert model.estimate(ServingLayout()) is not None


def test_memory_and_bounds():
    with pytest.raises(InfeasibleError, match="no layout fits in memory"):
        serve((("LAYERS", 96), ("HIDDEN", 12288), ("HEADS", 96), ("VOCAB", 51200)), "prefill=128,decode=8")
    with pytest.raises(InfeasibleError, match="no layout meets the bounds"):
        serve(MID, "prefill=64,decode=8", parallel="auto", max_tpot=1e-6)
    loose = serve(MID, "prefill=64,decode=8", parallel="auto", max_tpot=1.0)
    assert loose.serving is not None and loose.serving.best.layout.replicas == 8  # most tokens/s: one GPU each
    assert loose.serving.best.max_batch > 1


@pytest.mark.slow
def test_batch_auto_finds_the_batch_of_most_tokens_per_second_under_the_bounds(tmp_path):
    one = serve(MID, "prefill=64,decode=8").serving
    bound = 2 * one.tpot
    got = serve(MID, "prefill=64,decode=8,batch=auto", max_tpot=bound)
    c = got.serving
    b = c.request.batch
    assert c.request.auto_batch and b > 1 and c.tpot <= bound and c.best.fits
    assert c.tokens_per_s > one.tokens_per_s and "chosen" in c.batch_note
    assert validate(got.result.schedule) == []
    # the batch found is the largest under the bound: one more sequence breaks it
    with pytest.raises(InfeasibleError, match="meets the bounds"):
        serve(MID, f"prefill=64,decode=8,batch={b + 1}", max_tpot=bound)
    assert serve(MID, f"prefill=64,decode=8,batch={b}", max_tpot=bound).serving.tokens_per_s == pytest.approx(
        c.tokens_per_s)
    # no bounds: memory ends the search; the batch chosen fits and beats half of it
    free = serve(MID, "prefill=64,decode=8,batch=auto").serving
    assert free.best.fits and free.request.batch > b
    assert free.tokens_per_s >= serve(MID, f"prefill=64,decode=8,batch={free.request.batch // 2}").serving.tokens_per_s
    with pytest.raises(OptionsError, match="batch=auto"):
        serve(MID, "prefill=64,decode=8,batch=auto", parallel="tensor=1,pipeline=1,micro_batch=2")
    with pytest.raises(OptionsError, match="twice"):
        parse_inference("prefill=8,batch=auto,batch=2")
    out = tmp_path / "r.json"
    argv = ["compile", GPT, "--platform", "dgx-a100", "--param", "LAYERS=2", "--param", "HIDDEN=256",
            "--param", "HEADS=4", "--param", "VOCAB=1000", "--inference", "prefill=8,decode=2,batch=auto",
            "--max-tpot", "0.001", "-q", "--json", str(out)]
    assert main(argv) == 0
    inf = json.loads(out.read_text())["inference"]
    assert inf["batch_auto"] is True and inf["batch"] > 1 and inf["tpot"] <= 0.001


def test_a_block_in_m_micro_batches_costs_what_it_costs_at_a_batch_m_times_smaller():
    """What lets batch=auto share block prices across batches (mapper.serving.batch)."""
    from contextlib import nullcontext

    from mapper.costing.fusion import fuse_for
    from mapper.serving.driver import lowerer

    plat = load_platform("dgx-a100")
    program = parse((ROOT / "examples" / "llama.tg").read_text(), "llama.tg")
    lower_at = lowerer(program, nullcontext(), ModelFile(LLAMA, params=(("LAYERS", 2),)), True)

    def model(batch):
        return ServingModel(lower_at, Request(64, 8, batch), plat, lambda g: fuse_for(g, plat), network(plat), "graph")

    eight, two = model(8), model(2)
    for phase in ("prefill", "first", "last"):
        for b in range(len(eight.blocks)):
            for t in (1, 8):
                assert eight.block(phase, b, t, 4, pruned=False) == two.block(phase, b, t, 1, pruned=False)


def test_cli_json_contract_and_errors(tmp_path, capsys):
    out = tmp_path / "r.json"
    args = ["compile", LLAMA, "--platform", "dgx-a100", "--param", "LAYERS=2", "--param", "HIDDEN=512",
            "--param", "HEADS=8", "--param", "KV_HEADS=2", "--param", "FFN=1024", "--param", "VOCAB=1000",
            "--inference", "prefill=16,decode=3,batch=2", "--parallel", "auto", "-q", "--json", str(out)]
    assert main(args) == 0
    first = out.read_text()
    rep = json.loads(first)
    inf = rep["inference"]
    for key in ("ttft", "tpot", "latency", "tokens_per_s", "batch", "kv_cache_bytes"):
        assert key in inf
    assert rep["makespan"] == inf["latency"] and inf["batch"] == 2
    assert rep["parallel"]["plan"]["tensor"] >= 1 and "fits" in rep["parallel"]
    out.unlink()
    assert main(args) == 0 and out.read_text() == first  # deterministic
    capsys.readouterr()
    for extra, words in ((["--inference", "prefill=0"], "from 1"),
                         (["--inference", "prefill=8", "--param", "BATCH=7"], "sets SEQ, BATCH, CACHE itself"),
                         (["--runtime", "eager"], "only with --inference"),
                         (["--inference", "prefill=8", "--train"], "give one")):
        argv = ["compile", GPT, "--platform", "dgx-a100", "-q", *extra]
        assert main(argv) == 2
        assert words in capsys.readouterr().err
    plain = ROOT / "examples" / "bert_base.tg"
    assert main(["compile", str(plain), "--platform", "dgx-a100", "-q", "--inference", "prefill=8,decode=2"]) == 2
    assert "has no top-level" in capsys.readouterr().err


def test_dump_after_split_and_a_request_too_long_to_build(capsys, monkeypatch):
    argv = ["compile", GPT, "--platform", "dgx-a100", "--param", "LAYERS=2", "--param", "HIDDEN=256",
            "--param", "HEADS=4", "--param", "VOCAB=1000", "--inference", "prefill=8,decode=2"]
    assert main([*argv, "--dump-after", "split"]) == 0
    out = capsys.readouterr().out
    assert "graph gpt.request" in out and "decode2.s0.mb0" in out
    assert main([*argv[:-1], "prefill=8,decode=300000", "-q"]) == 2
    assert "ask for fewer decode steps" in capsys.readouterr().err
    # auto keeps to the layouts whose request graph can be built, and says how many it left
    monkeypatch.setattr("mapper.serving.request_graph.MAX_TASKS", 2000)  # small graphs, the same rule
    got = serve(SMALL, "prefill=8,decode=300,batch=8", parallel="auto")
    lay = got.serving.best.layout
    assert (1 + 300) * lay.pipeline * lay.micro_batches <= 2000 and got.serving.unbuilt > 0
    assert any("not scored" in n for n in got.serving.notes())
    assert validate(got.result.schedule) == []


def test_one_decode_step_per_gpu_is_built_validated_and_drawn(tmp_path):
    got = serve(MID, "prefill=64,decode=4,batch=4", parallel="tensor=4,pipeline=2,micro_batch=1")
    step = got.serving.step
    assert step is not None and validate(step.schedule) == []
    ops = {t.op for t in step.schedule.cost.graph.tasks}
    assert "allreduce" in ops or any(t.explicit_cost for t in step.schedule.cost.graph.tasks)
    assert len({s.device for s in step.schedule.slots}) == 8  # every rank of every stage works
    # the step pipelines its micro-batches: one wave takes the stages' sum plus m - 1 times the slowest
    lay = got.serving.best
    wave = sum(lay.decode_first) + (lay.layout.micro_batches - 1) * max(lay.decode_first)
    assert lay.layout.micro_batches > 1 and step.schedule.makespan == pytest.approx(wave, rel=0.1)
    html = tmp_path / "r.html"
    out = tmp_path / "r.json"
    argv = ["compile", GPT, "--platform", "dgx-a100", "--param", "LAYERS=2", "--param", "HIDDEN=256",
            "--param", "HEADS=4", "--param", "VOCAB=1000", "--inference", "prefill=8,decode=2",
            "--parallel", "tensor=2", "-q", "--html", str(html), "--json", str(out)]
    assert main(argv) == 0
    assert "One decode step per GPU" in html.read_text()
    assert json.loads(out.read_text())["inference"]["decode_step"]["gpus"] == 2
    # a layout over two nodes is built on their devices, the tensor all-reduces crossing the fabric
    wide = serve(MID, "prefill=64,decode=4", platform="selene", parallel="tensor=16,pipeline=1")
    step = wide.serving.step
    assert step is not None and validate(step.schedule) == []
    names = {step.schedule.cost.platform.devices[s.device].name for s in step.schedule.slots}
    assert {n.split("_")[0] for n in names} == {"n0", "n1"} and len(names) == 16
    assert step.schedule.makespan == pytest.approx(wide.serving.best.decode_first[0], rel=0.05)


def test_a_fleet_serves_on_its_best_kind_and_a_mixed_node_on_its_first_gpu_model():
    small = (("LAYERS", 4), ("HIDDEN", 1024), ("HEADS", 16), ("VOCAB", 1000))
    fleet = serve(small, "prefill=64,decode=4,batch=2", platform="fleet-a100-v100", parallel="auto")
    assert fleet.serving.kind in ("a100", "v100") and validate(fleet.result.schedule) == []
    assert any(f"({fleet.serving.kind} nodes of the fleet)" in n for n in fleet.result.notes)
    mixed = serve(small, "prefill=64,decode=4,batch=2", platform="mixed-gpu", parallel="auto")
    assert mixed.serving.best.layout.gpus * mixed.serving.best.layout.replicas <= mixed.serving.gpus


def test_inference_in_fp8_runs_the_linear_gemms_faster_and_stores_their_weights_in_a_byte(tmp_path, capsys):
    """``compile --inference --precision fp8`` (DESIGN section 9): the linear layers' GEMMs at the FP8
    rate, their weights one byte each (the embedding and the LM head stay 16-bit); a GPU without
    FP8 exits 2."""
    figures = {}
    for fmt in (None, "fp8"):
        out = tmp_path / f"{fmt}.json"
        args = ["compile", str(ROOT / "examples" / "llama.tg"), "--platform", "dgx-h100", "--inference",
                "prefill=256,decode=32,batch=16", "--param", "LAYERS=4", "-q", "--json", str(out)]
        assert main([*args, *(["--precision", fmt] if fmt else [])]) == 0
        figures[fmt] = json.loads(out.read_text())["inference"]
    plain, fp8 = figures[None], figures["fp8"]
    assert (plain["precision"], fp8["precision"]) == ("fp16", "fp8")
    assert fp8["tpot"] < plain["tpot"] and fp8["ttft"] < plain["ttft"]
    # 4 layers of 218 M linear weights each, from 2 bytes to 1; the 1.05 G of embedding and head stay
    saved = plain["peak_memory"]["weights"] - fp8["peak_memory"]["weights"]
    linear = 4 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)
    assert saved == pytest.approx(linear, rel=1e-6)
    capsys.readouterr()
    code = main(["compile", str(ROOT / "examples" / "llama.tg"), "--platform", "dgx-a100", "--inference",
                 "prefill=256,decode=32,batch=16", "--precision", "fp8", "-q"])
    assert code == 2 and "no fp8 tensor rate" in capsys.readouterr().err


def test_inference_in_int4_awq_decodes_faster_on_an_a100(capsys):
    """``compile --inference --precision int4_awq``: 4-bit weights at the 16-bit rate, so an A100 runs
    it; the decode reads fewer weight bytes; training refuses the weight-only format."""
    args = ["compile", str(ROOT / "examples" / "llama.tg"), "--platform", "dgx-a100", "--inference",
            "prefill=256,decode=32,batch=16", "--param", "LAYERS=2", "-q", "--json", "-"]
    figures = {}
    for fmt in (None, "int4_awq"):
        assert main([*args, *(["--precision", fmt] if fmt else [])]) == 0
        figures[fmt] = json.loads(capsys.readouterr().out)["inference"]
    assert figures["int4_awq"]["tpot"] < figures[None]["tpot"]
    assert figures["int4_awq"]["peak_memory"]["weights"] < figures[None]["peak_memory"]["weights"]
    code = main(["compile", str(ROOT / "examples" / "llama.tg"), "--platform", "dgx-a100", "--precision", "int4_awq",
                 "-q"])
    assert code == 2 and "unknown precision" in capsys.readouterr().err
