"""Exported decoders (Llama, Qwen2, Mistral; torch's dynamo and TorchScript exporters) import with
their rotary grouped-query attention as ``attention`` and serve and split like examples/llama.tg.

The models are tests/data/rotary/*.onnx, written once by tests/data/rotary/make_fixtures.py
(2 layers, width 64, 4 query heads and 2 key-value heads of 16, FFN 128, vocabulary 256)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from mapper.cli import main
from mapper.costing.work import kernel_flops
from mapper.frontend.importers.onnx_dsl import import_onnx
from mapper.frontend.load import load_graph, model_lowerer
from mapper.frontend.lowering.program import lower
from mapper.frontend.parse import parse
from mapper.frontend.sources import ModelFile
from mapper.parallel.roles import tensor_regions

pytest.importorskip("onnx")

DATA = Path(__file__).parent / "data" / "rotary"
LLAMA_TG = Path(__file__).parent.parent / "examples" / "llama.tg"
#: examples/llama.tg's params for the fixtures' config
CONFIG = {"LAYERS": 2, "HIDDEN": 64, "HEADS": 4, "KV_HEADS": 2, "FFN": 128, "VOCAB": 256}
BATCH, SEQ = 2, 16
MODELS = [f"{family}_{exporter}" for family in ("llama", "qwen2", "mistral") for exporter in ("dynamo", "legacy")]
MODELS.append("llama_sdpa_dynamo")  # transformers' default attention (scaled_dot_product_attention)


#: the fixtures' Mistral sliding window
WINDOW = 8


def _imported(name: str, batch: int = BATCH, seq: int = SEQ):
    return load_graph(ModelFile(str(DATA / f"{name}.onnx"), (("batch", batch), ("seq", seq))))


def _written(batch: int = BATCH, seq: int = SEQ, window: int = 0):
    return lower(parse(LLAMA_TG.read_text(), str(LLAMA_TG)),
                 {**CONFIG, "BATCH": batch, "SEQ": seq, "WINDOW": window})


@pytest.mark.parametrize("name", MODELS)
def test_attention_matched_per_layer(name: str) -> None:
    imported = import_onnx(str(DATA / f"{name}.onnx"), {"batch": BATCH, "seq": SEQ})
    assert imported.fused["rotary_attention"] == CONFIG["LAYERS"]
    assert imported.fused["swiglu"] == CONFIG["LAYERS"]
    assert not imported.unsupported
    g = _imported(name)
    att = [t for t in g.tasks if t.op == "attention"]
    assert len(att) == CONFIG["LAYERS"]
    for t in att:
        assert (t.attr("heads"), t.attr("kv_heads"), t.attr("seq"), t.attr("causal")) == (4, 2, SEQ, 1)
        assert t.attr("window") == (WINDOW if name.startswith("mistral") else 0)
        assert t.output is not None and t.output.shape == (BATCH * SEQ, 64)
        assert any(s.op == "Softmax" for s in t.source)  # the ONNX nodes it replaces, by name, for reports
    assert sum(t.op == "rotary" for t in g.tasks) == CONFIG["LAYERS"]
    assert g.inputs[0][1].shape == (BATCH * SEQ,)  # token-major, as the DSL models are


@pytest.mark.parametrize("name", MODELS)
def test_flops_equal_the_written_model(name: str) -> None:
    """Every op's FLOPs as examples/llama.tg counts them (attention and rotary by the DSL ops' rules);
    Qwen2 adds its Q, K and V biases; the kernels' FLOPs (Mistral's window counted) are equal too."""
    ours, theirs = Counter(), Counter()
    window = WINDOW if name.startswith("mistral") else 0
    for g, into in ((_imported(name), ours), (_written(window=window), theirs)):
        for t in g.tasks:
            into[t.op] += t.flops
            into[f"{t.op} kernel"] += kernel_flops(t)
    if name.startswith("qwen2"):
        theirs["add"] += CONFIG["LAYERS"] * BATCH * SEQ * (4 + 2 * 2) * 16
        theirs["add kernel"] += CONFIG["LAYERS"] * BATCH * SEQ * (4 + 2 * 2) * 16
    assert ours == theirs


@pytest.mark.parametrize("name", MODELS)
def test_tensor_regions_as_the_written_model(name: str) -> None:
    """Megatron's column-then-row pairs: one around each attention, one around each MLP."""
    ours, theirs = _imported(name), _written()
    for g in (ours, theirs):
        regions = tensor_regions(g, 2)
        assert len(regions) == 2 * CONFIG["LAYERS"]
        assert sum(any(g.tasks[m].op == "attention" for m in r.members) for r in regions) == CONFIG["LAYERS"]


def test_mistral_window_is_read_from_its_mask() -> None:
    imported = import_onnx(str(DATA / "mistral_dynamo.onnx"), {"batch": BATCH, "seq": SEQ})
    assert imported.masks == ((1, WINDOW),) * 2 and imported.text.count(f"window = {WINDOW}") == 2
    assert not imported.notes
    short = import_onnx(str(DATA / "mistral_dynamo.onnx"), {"batch": 1, "seq": 8})  # no query's view is cut
    assert short.fused["rotary_attention"] == 2 and short.masks == ((1, 0),) * 2
    # the serving lowerer reads the mask once where it shows the window and keeps it at every size
    at = model_lowerer(ModelFile(str(DATA / "mistral_dynamo.onnx")), "mapper serve")
    for seq, batch, cache in ((8, 1, 0), (1, 4, 100), (3000, 1, 0)):
        att = [t for t in at(seq, batch, cache).tasks if t.op == "attention"]
        assert [(t.attr("causal"), t.attr("window"), t.attr("cache")) for t in att] == [(1, WINDOW, cache)] * 2


@pytest.mark.parametrize("name", ["mistral4k_dynamo", "mistral4k_legacy"])
def test_a_window_longer_than_the_probe_is_read_from_its_constant(name: str) -> None:
    """Mistral with a 4,096-token window exported without a cache: no mask mapper folds shows the
    window (every query of 2,048 tokens sees all it precedes), its construction's constant does."""
    imported = import_onnx(str(DATA / f"{name}.onnx"), {"batch": 1, "seq": SEQ})
    assert imported.masks == ((1, 0),) * 2  # causal only at this size
    at = model_lowerer(ModelFile(str(DATA / f"{name}.onnx")), "mapper serve")
    for seq, batch, cache in ((8, 1, 0), (1, 4, 5000), (6000, 1, 0)):
        att = [t for t in at(seq, batch, cache).tasks if t.op == "attention"]
        assert [(t.attr("causal"), t.attr("window"), t.attr("cache")) for t in att] == [(1, 4096, cache)] * 2


def test_the_window_s_constant_follows_its_mask_whatever_its_sign_and_offset() -> None:
    """Hand-worked: a constant the masks ignore is passed over; ``-W`` (an Add's) and ``W - 1``
    (a comparison that keeps the key at the window's edge) give ``W``."""
    from mapper.frontend.importers.onnx_window import constant_window

    def masks(rule):
        return lambda values: ((1, rule(values["w"])),) * 2 if "w" in values else ((1, 0),) * 2

    assert constant_window((("n", 3.0), ("w", -4096.0)), masks(lambda v: int(-v))) == 4096
    assert constant_window((("w", 4095.0),), masks(lambda v: int(v) + 1)) == 4096
    assert constant_window((("w", 64.0),), masks(lambda v: 3)) == 0  # no one-for-one change: not a window


def test_causal_past_the_folded_mask() -> None:
    """A mask too large to fold (3,000 x 3,000) keeps the causality read at a smaller size."""
    at = model_lowerer(ModelFile(str(DATA / "llama_dynamo.onnx")), "mapper serve")
    assert all(t.attr("causal") == 1 for t in at(3000, 1, 0).tasks if t.op == "attention")


def test_kv_cache_decode_export() -> None:
    """A decode step's export (past keys and values in, present out): the cache's Concat is the
    attention's ``cache``."""
    imported = import_onnx(str(DATA / "llama_decode_legacy.onnx"), {"batch": BATCH, "seq": 1, "past": 12})
    assert imported.fused["rotary_attention"] == 2
    assert imported.text.count("attention(") == 2 and imported.text.count("cache = 12") == 2


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


def _params() -> list[str]:
    return [x for k, v in CONFIG.items() for x in ("--param", f"{k}={v}")]


@pytest.mark.parametrize("name", ["llama_dynamo", "mistral_legacy", "llama_decode_legacy"])
def test_serve_as_the_written_model(tmp_path: Path, name: str) -> None:
    """The export (token ids alone, or with a KV cache's past keys and values) serves as
    examples/llama.tg does at its config (Mistral: WINDOW = 8)."""
    args = ["--platform", "dgx-h100", "--workload", "isl=128,osl=128,requests=64", "--rate", "inf",
            "--parallel", "tensor=2"]
    window = ["--param", f"WINDOW={WINDOW}"] if name.startswith("mistral") else []
    assert main(["serve", str(LLAMA_TG), *_params(), *window, *args, "--json", str(tmp_path / "tg.json")]) == 0
    assert main(["serve", str(DATA / f"{name}.onnx"), *args, "--json", str(tmp_path / "onnx.json")]) == 0
    tg, onnx = _json(tmp_path / "tg.json")["serving"], _json(tmp_path / "onnx.json")["serving"]
    assert onnx["plan"] == tg["plan"] and onnx["plan"]["tensor"] == 2
    assert onnx["kv_capacity_tokens"] == tg["kv_capacity_tokens"]
    # the same kernels; the ids are 64-bit in the export (32-bit in llama.tg): a few bytes more read
    assert onnx["output_tokens_per_s"] == pytest.approx(tg["output_tokens_per_s"], rel=1e-3)


def test_compile_tensor_split_as_the_written_model(tmp_path: Path) -> None:
    args = ["--platform", "dgx-a100", "--parallel", "tensor=2", "--train"]
    sizes = ["--param", f"SEQ={SEQ}", "--param", f"BATCH={BATCH}"]
    assert main(["compile", str(LLAMA_TG), *_params(), *sizes, *args, "--json", str(tmp_path / "tg.json")]) == 0
    assert main(["compile", str(DATA / "llama_legacy.onnx"), "--dim", f"batch={BATCH}", "--dim", f"seq={SEQ}",
                 *args, "--json", str(tmp_path / "onnx.json")]) == 0
    tg, onnx = _json(tmp_path / "tg.json")["parallel"], _json(tmp_path / "onnx.json")["parallel"]
    assert onnx["plan"] == tg["plan"] and onnx["plan"]["tensor"] == 2
    assert onnx["step_time"] == pytest.approx(tg["step_time"], rel=1e-6)  # 64-bit ids


def test_serve_refuses_what_it_cannot_resize(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--platform", "dgx-h100", "--workload", "isl=16,osl=4,requests=2", "--rate", "inf"]
    assert main(["serve", str(DATA / "llama_dynamo.onnx"), "--dim", "batch=2", *args]) == 2
    assert "--dim" in capsys.readouterr().err
    plain = tmp_path / "mlp.onnx"
    _mlp(plain)
    assert main(["serve", str(plain), *args]) == 2
    assert "recognises" in capsys.readouterr().err
    masked = tmp_path / "masked.onnx"
    _mlp(masked, extra="attention_mask")
    assert main(["serve", str(masked), *args]) == 2
    err = capsys.readouterr().err
    assert "alone or with a KV cache" in err and "attention_mask" in err and "Traceback" not in err


def _mlp(path: Path, extra: str | None = None) -> None:
    """A model with token ids [batch, seq] (and an ``extra`` input [batch, seq]) and no attention."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    table = numpy_helper.from_array(np.zeros((16, 8), dtype=np.float32), "table")
    w = numpy_helper.from_array(np.zeros((8, 8), dtype=np.float32), "w")
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"], name="embed"),
             helper.make_node("MatMul", ["e", "w"], ["y"], name="proj")]
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, ["b", "s"]) for n in ("ids", extra) if n]
    graph = helper.make_graph(nodes, "mlp", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "s", 8])], [table, w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


@pytest.mark.parametrize("name", ["llama_legacy", "llama_decode_legacy", "mistral_dynamo"])
def test_compile_inference_as_the_written_model(tmp_path: Path, name: str) -> None:
    """``compile --inference`` imports the export at the request's sizes (its KV cache too) and plans
    the static batch as examples/llama.tg (Mistral: WINDOW = 8, its cache holding 8 positions)."""
    args = ["--platform", "dgx-h100", "--inference", "prefill=128,decode=64,batch=8", "--parallel", "tensor=2"]
    window = ["--param", f"WINDOW={WINDOW}"] if name.startswith("mistral") else []
    assert main(["compile", str(LLAMA_TG), *_params(), *window, *args, "--json", str(tmp_path / "tg.json")]) == 0
    assert main(["compile", str(DATA / f"{name}.onnx"), *args, "--json", str(tmp_path / "onnx.json")]) == 0
    tg, onnx = _json(tmp_path / "tg.json"), _json(tmp_path / "onnx.json")
    assert onnx["parallel"]["plan"] == tg["parallel"]["plan"]
    assert onnx["inference"]["kv_cache_bytes"] == tg["inference"]["kv_cache_bytes"]
    assert onnx["inference"]["latency"] == pytest.approx(tg["inference"]["latency"], rel=1e-5)  # 64-bit ids


def test_compile_inference_refuses_what_it_cannot_resize(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--platform", "dgx-h100", "--inference", "prefill=16,decode=4,batch=2"]
    assert main(["compile", str(DATA / "llama_dynamo.onnx"), "--dim", "seq=16", *args]) == 2
    assert "--dim" in capsys.readouterr().err
    plain = tmp_path / "mlp.onnx"
    _mlp(plain)
    assert main(["compile", str(plain), *args]) == 2
    err = capsys.readouterr().err
    assert "recognises" in err and "--inference" in err and "Traceback" not in err
