"""Sliding-window attention (``attention(..., window = W)``, Mistral's): the kernel's FLOPs against
brute force over positions, the KV cache's positions, serving's admission and step model."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from mapper.cli import main
from mapper.cluster.flops import forward_flops
from mapper.cluster.profile import kv_bytes
from mapper.core.opdefs.dnn import held_positions, visible_keys
from mapper.costing.work import kernel_flops
from mapper.errors import InfeasibleError
from mapper.frontend.load import graph_from_text
from mapper.serving.inflight import Scheduler, simulate
from mapper.serving.iteration import Batch
from mapper.serving.model import decode_growth
from mapper.serving.workload import Arrival

ROOT = Path(__file__).resolve().parent.parent
LLAMA = str(ROOT / "examples" / "llama.tg")
PARAMS = (("LAYERS", 2), ("HIDDEN", 512), ("HEADS", 8), ("KV_HEADS", 2), ("FFN", 1024), ("VOCAB", 1000))
SMALL = [a for k, v in PARAMS for a in ("--param", f"{k}={v}")]


def _brute_pairs(seq: int, cache: int, window: int) -> int:
    """Query-key pairs of one sequence and head, position by position."""
    pairs = 0
    for q in range(cache, cache + seq):  # each new query's position
        for k in range(cache + seq):
            if k <= q and (window == 0 or k > q - window):
                pairs += 1
    return pairs


@pytest.mark.parametrize("seq,cache,window", list(itertools.product((1, 2, 7, 16, 33), (0, 1, 5, 40), (0, 1, 3, 8, 64))))
def test_visible_keys_is_the_brute_force_count(seq: int, cache: int, window: int) -> None:
    assert visible_keys(seq, cache, window) == _brute_pairs(seq, cache, window)


def test_held_positions() -> None:
    assert [held_positions(n, 8) for n in (0, 5, 8, 9, 1000)] == [0, 5, 8, 8, 8]
    assert held_positions(1000, 0) == 1000


def _attention(seq: int, batch: int, cache: int, window: int, causal: int = 1, fused: int = 1) -> object:
    heads, kv, dh = 4, 2, 16
    text = (f"graph g {{\n  input x : f16[{batch * seq}, {(heads + 2 * kv) * dh}]\n"
            f"  y = attention(x, heads = {heads}, kv_heads = {kv}, seq = {seq}, causal = {causal}, "
            f"fused = {fused}, cache = {cache}, window = {window})\n  output y\n}}\n")
    return next(t for t in graph_from_text(text).tasks if t.op == "attention")


@pytest.mark.parametrize("seq,cache,window", [(16, 0, 8), (16, 0, 0), (1, 100, 8), (5, 3, 4), (64, 10, 100)])
def test_kernel_flops_sum_each_query_s_window(seq: int, cache: int, window: int) -> None:
    """Q K^T and P V (4 dh a pair) and the softmax (5 a pair) over exactly the pairs each query sees."""
    batch, heads, dh = 3, 4, 16
    task = _attention(seq, batch, cache, window)
    assert kernel_flops(task) == pytest.approx(batch * heads * (4 * dh + 5) * _brute_pairs(seq, cache, window))
    assert task.flops == batch * heads * (4 * dh + 5) * seq * (cache + seq)  # the catalogue's dense count
    # unfused attention computes the whole matrix and masks it
    assert kernel_flops(_attention(seq, batch, cache, window, fused=0)) == task.flops


def test_the_cache_holds_and_reads_the_window() -> None:
    """A decode step after 100 positions with a window of 8 reads 8 cached positions, as the cache
    holds 8 (2 kv heads x 16 x 2 bytes, keys and values, 3 sequences)."""
    windowed, full = _attention(1, 3, 100, 8), _attention(1, 3, 100, 0)
    per_position = 2 * 2 * 16 * 2 * 3
    assert full.bytes_read - windowed.bytes_read == pytest.approx((100 - 8) * per_position)
    assert kv_bytes(windowed, 100) == 8 * per_position and kv_bytes(windowed, 5) == 5 * per_position
    assert kv_bytes(full, 100) == 100 * per_position
    # NVIDIA's model-FLOPs convention (no causal saving): each query counts its window's keys
    assert forward_flops(_attention(16, 3, 0, 8)) == 4.0 * 48 * 8 * 64
    assert forward_flops(_attention(16, 3, 0, 0)) == 4.0 * 48 * 16 * 64


def test_a_window_needs_causal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "w.tg"
    model.write_text("graph g {\n  input x : f16[16, 48]\n"
                     "  y = attention(x, heads = 4, seq = 16, window = 4)\n  output y\n}\n")
    assert main(["compile", str(model), "--platform", "dgx-h100"]) == 2
    err = capsys.readouterr().err
    assert "causal = 1" in err and "Traceback" not in err


def test_a_run_refuses_a_window(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "w.tg"
    model.write_text("graph g {\n  input x : f32[16, 48]\n"
                     "  y = attention(x, heads = 4, seq = 16, causal = 1, window = 4)\n  output y\n}\n")
    assert main(["run", str(model), "--platform", "dev-vm"]) == 2
    err = capsys.readouterr().err
    assert "sliding-window" in err and "Traceback" not in err


def test_admission_holds_the_window_only() -> None:
    """A request of 40 + 10 tokens on a 32-token cache: infeasible without a window; with a
    16-token window it holds one 16-token block and its decodes read 16 positions."""
    reqs = [Arrival(0.0, 40, 10)]
    with pytest.raises(InfeasibleError):
        simulate(reqs, lambda b: 1.0, Scheduler(32, 16, 8, 64, True))
    log: list[Batch] = []
    run = simulate(reqs, lambda b: log.append(b) or 1.0, Scheduler(32, 16, 8, 64, True, window=16))
    assert run.peak_blocks == 1 and run.steps == 10
    assert log[0].pairs == visible_keys(40, 0, 16) == 16 * 17 // 2 + 16 * 24
    assert [b.decode_context for b in log[1:]] == [16] * 9
    # blocks taken as tokens arrive: a chunk is bounded by the free blocks until they hold the window
    log.clear()
    run = simulate(reqs, lambda b: log.append(b) or 1.0, Scheduler(32, 16, 8, 64, False, window=16))
    assert run.peak_blocks == 1 and run.preemptions == 0
    assert [b.tokens for b in log] == [40] + [1] * 9


def _serve(tmp_path: Path, name: str, *extra: str) -> dict:
    out = tmp_path / f"{name}.json"
    args = ["--platform", "dgx-h100", "--workload", "isl=4096,osl=64,requests=64", "--rate", "inf",
            "--parallel", "tensor=1,replicas=1"]
    assert main(["serve", LLAMA, *SMALL, *args, *extra, "--json", str(out)]) == 0
    return json.loads(out.read_text())["serving"]


def test_serving_a_window_prices_the_window(tmp_path: Path) -> None:
    """The same KV cache in tokens; a 256-token window decodes faster than full attention over
    4,096 positions and prefills no slower."""
    full, windowed = _serve(tmp_path, "full"), _serve(tmp_path, "window", "--param", "WINDOW=256")
    assert windowed["kv_capacity_tokens"] == full["kv_capacity_tokens"]
    assert windowed["plan"] == full["plan"]
    assert windowed["tpot"]["mean"] < full["tpot"]["mean"]
    assert windowed["ttft"]["mean"] <= full["ttft"]["mean"]
    assert windowed["output_tokens_per_s"] > full["output_tokens_per_s"]
    # a window longer than every context the model prices changes nothing
    assert _serve(tmp_path, "long", "--param", "WINDOW=16384")["output_tokens_per_s"] == full["output_tokens_per_s"]


@pytest.mark.parametrize("prefill,decode,window", [(128, 64, 0), (100, 50, 120), (200, 50, 120), (1, 9, 4),
                                                   (16, 1, 8), (5, 20, 0)])
def test_static_decode_steps_sum_over_the_window(prefill: int, decode: int, window: int) -> None:
    """``compile --inference``: the steps' time, affine in the positions each reads, from the first
    and the last step, against the sum step by step."""
    def step(context: int) -> float:  # any affine function of the positions held
        return 3.0 + 0.25 * held_positions(context, window)

    first, last = step(prefill), step(prefill + decode - 1)
    exact = sum(step(prefill + k) for k in range(decode))
    assert decode * first + (last - first) * decode_growth(prefill, decode, window) == pytest.approx(exact)
