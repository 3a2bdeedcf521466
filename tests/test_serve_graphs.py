"""CUDA-graph padding of decode-only steps (``trtllm-pytorch``, :mod:`mapper.serving.iteration`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from mapper.cli import main
from mapper.frontend.sources import ModelFile
from mapper.serving.iteration import Batch
from mapper.serving.precision import kv_format
from mapper.serving.runtimes import RUNTIMES, TRTLLM_PYTORCH_GRAPHS, captured
from mapper.serving.serve import server_for

ROOT = Path(__file__).resolve().parent.parent
LLAMA = str(ROOT / "examples" / "llama.tg")
PARAMS = (("LAYERS", 2), ("HIDDEN", 512), ("HEADS", 8), ("KV_HEADS", 2), ("FFN", 1024), ("VOCAB", 1000))


def _models():
    src = ModelFile(LLAMA, params=PARAMS)
    padded = server_for(src, "dgx-h100", RUNTIMES["trtllm-pytorch"]).step_model(1, 1, 8192)
    plain = server_for(src, "dgx-h100", RUNTIMES["trtllm"]).step_model(1, 1, 8192)
    return padded, plain


def test_the_runtime_is_trtllm_with_the_published_graph_sizes():
    rt, base = RUNTIMES["trtllm-pytorch"], RUNTIMES["trtllm"]
    assert replace(rt, name="trtllm", graphs=()) == base
    # perf-overview.md (v1.0), llm_options.yml: cuda_graph_config.batch_sizes
    assert rt.graphs == TRTLLM_PYTORCH_GRAPHS == (1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 1024, 2048, 4096,
                                                  8192)
    assert all(r.graphs == () for name, r in RUNTIMES.items() if name != "trtllm-pytorch")
    assert kv_format(None, "nvfp4", "trtllm-pytorch") == "fp8"


def test_a_decode_only_step_runs_as_the_next_captured_batch():
    padded, plain = _models()
    # 385 decodes (cached 1,000 positions each): padded to 512 rows, attention over the real caches only
    b385 = Batch(385, 385, 385 * 1000.0, 0.0, 385)
    b512 = Batch(512, 512, 385 * 1000.0, 0.0, 512)
    assert padded.padded(b385) == b512
    assert padded.step(b385) == plain.step(b512) > plain.step(b385)
    # on a captured size nothing changes: 384 and 256 run as they are
    for n in (256, 384, 1):
        b = Batch(n, n, n * 100.0, 0.0, n)
        assert padded.padded(b) == b and padded.step(b) == plain.step(b)
    # 3 decodes run as 4, 129 as 256
    assert padded.padded(Batch(3, 3, 30.0, 0.0, 3)).tokens == 4
    assert padded.padded(Batch(129, 129, 1290.0, 0.0, 129)).tokens == 256


def test_steps_with_prompt_chunks_or_past_the_largest_graph_are_not_padded():
    padded, plain = _models()
    mixed = Batch(385 + 128, 386, 385 * 1000.0, 128 * 129 / 2, 386)  # 385 decodes and one 128-token prompt
    assert padded.padded(mixed) == mixed and padded.step(mixed) == plain.step(mixed)
    big = Batch(9000, 9000, 9000 * 10.0, 0.0, 9000)  # more sequences than the largest graph (8,192): eager
    assert padded.padded(big) == big and padded.step(big) == plain.step(big)
    assert padded.step(Batch(0, 0, 0.0, 0.0, 0)) == 0.0


def test_serve_takes_the_runtime(capsys):
    args = ["serve", LLAMA, *(a for k, v in PARAMS for a in ("--param", f"{k}={v}")), "--platform", "dgx-h100",
            "--workload", "isl=64,osl=16,requests=12", "--rate", "inf", "--parallel", "tensor=1,pipeline=1,replicas=1"]
    assert main([*args, "--runtime", "trtllm-pytorch", "--json", "-"]) == 0
    padded = capsys.readouterr().out
    assert main([*args, "--runtime", "trtllm", "--json", "-"]) == 0
    plain = capsys.readouterr().out
    assert padded != plain  # 12 decodes run as 16


def test_the_engine_captures_graphs_up_to_its_largest_decode_batch():
    g = TRTLLM_PYTORCH_GRAPHS
    assert captured(g, 2048, 8192) == (1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 1024, 2048)
    # trtllm-bench's max batch 1,536 (405B TP8 on H200 at 128/2048): 4,096 and 8,192 pad to 1,536
    assert captured(g, 1536, 8192)[-3:] == (512, 1024, 1536)
    assert captured(g, 2048, 300)[-2:] == (256, 300)  # max tokens bound a batch of decodes too
    assert captured((), 2048, 8192) == ()
    server = server_for(ModelFile(LLAMA, params=PARAMS), "dgx-h100", RUNTIMES["trtllm-pytorch"])
    wide, narrow = server.step_model(1, 1, 8192), server.step_model(1, 1, 8192, 1536)
    assert wide.padded(Batch(1293, 1293, 0.0, 0.0, 1293)).tokens == 2048
    assert narrow.padded(Batch(1293, 1293, 0.0, 0.0, 1293)).tokens == 1536
    assert narrow.gemms is wide.gemms  # one pricing, two graph sets
