"""Real exports in: tiny BERT, GPT-2, ViT, a residual CNN, an MLP-Mixer, an LSTM and a GRU, written
by torch 2.13's two exporters (tests/data/onnx_corpus/make_corpus.py builds them offline; torch is
not needed here). Each imports from another folder with no op left unpriced, its GEMM, convolution,
attention and recurrent FLOPs match torch's FlopCounterMode within 2 %, and it maps split by
``--parallel auto``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("onnx")

from mapper.cli import main
from mapper.core.graph import TaskGraph
from mapper.engine.validate import validate
from mapper.frontend.importers.onnx_dsl import import_onnx
from mapper.frontend.load import graph_from_text, load_graph
from mapper.frontend.sources import ModelFile
from mapper.pipeline import compile_graph

CORPUS = Path(__file__).resolve().parent / "data" / "onnx_corpus"
MODELS = sorted(p.stem for p in CORPUS.glob("*.onnx"))
FLOPS = json.loads((CORPUS / "flops.json").read_text())
#: The legacy exporter's dynamic axes, and the sizes the models were traced at.
DIMS = {"bert_legacy": {"batch": 2, "seq": 16}, "cnn_legacy": {"batch": 2}, "bart_legacy": {"batch": 2, "seq": 16},
        "t5_legacy": {"batch": 2, "seq": 16}, "convnext_legacy": {"batch": 2}}
#: LSTM: FlopCounterMode counts only the final Linear; the recurrence is 2 S B dirs gates H (I + H)
#: (tests/data/onnx_corpus/make_corpus.py: S 16, B 2, I 32, H 48, 4 gates, one direction).
LSTM_FLOPS = 2 * 16 * 2 * 1 * 4 * 48 * (32 + 48) + FLOPS["lstm"]


def dense_flops(g: TaskGraph) -> float:
    """FLOPs of the ops FlopCounterMode counts: products (matmul, conv2d), attention's two
    products (not its softmax), and recurrent cells."""
    total = 0.0
    for t in g.tasks:
        if t.op in ("matmul", "conv2d"):
            total += t.flops
        elif t.op == "attention":
            assert t.output is not None
            total += t.flops - 5 * t.output.shape[0] * t.attr("heads") * t.attr("seq")
        elif t.op == "opaque" and t.attr("kind") in ("LSTM", "GRU", "RNN"):
            total += t.flops
    return total


@pytest.fixture(scope="module")
def elsewhere(tmp_path_factory):
    """The corpus copied to a folder, and another folder to work from."""
    root = tmp_path_factory.mktemp("corpus")
    shutil.copytree(CORPUS, root / "models")
    (root / "cwd").mkdir()
    return root


@pytest.mark.parametrize("model", MODELS)
def test_imports_from_another_folder_with_every_op_priced(model, elsewhere, monkeypatch):
    monkeypatch.chdir(elsewhere / "cwd")
    imported = import_onnx(str(elsewhere / "models" / f"{model}.onnx"), DIMS.get(model))
    assert imported.unsupported == {}, imported.warning()
    graph = graph_from_text(imported.text, f"{model}.tg")
    family = model.split("_")[0]
    want = LSTM_FLOPS if family == "lstm" else FLOPS[family]
    assert dense_flops(graph) == pytest.approx(want, rel=0.02)
    attention = [t for t in graph.tasks if t.op == "attention"]
    if family in ("bert", "gpt2", "vit"):  # eager, legacy and scaled_dot_product_attention forms alike
        assert len(attention) == 2 and imported.fused.get("attention") == 2
        assert {t.attr("causal") for t in attention} == {1 if family == "gpt2" else 0}
        assert not any(t.op == "softmax" for t in graph.tasks)
    if family == "gpt2":  # the tanh approximation of GELU, one op
        assert imported.fused.get("gelu") == 2 and not any(t.op == "opaque" and t.attr("kind") == "Pow"
                                                           for t in graph.tasks)


@pytest.mark.parametrize("model", MODELS)
def test_maps_split_by_parallel_auto(model):
    compiled = compile_graph(ModelFile(str(CORPUS / f"{model}.onnx"), tuple(DIMS.get(model, {}).items())),
                             "dgx-a100", mapper="heft", parallel="auto")
    assert validate(compiled.result.schedule) == []


def test_the_legacy_exporters_shape_arithmetic_folds_for_any_dims():
    # BERT's legacy export computes its masks and position ids from Shape nodes: with other sizes
    # every product scales (linear layers with batch x seq, attention with batch x seq^2)
    base = dense_flops(load_graph(ModelFile(str(CORPUS / "bert_legacy.onnx"), (("batch", 2), ("seq", 16)))))
    big = dense_flops(load_graph(ModelFile(str(CORPUS / "bert_legacy.onnx"), (("batch", 4), ("seq", 16)))))
    assert big == pytest.approx(2 * base)
    with pytest.raises(Exception, match="dimension 'batch' of 'input_ids' is unknown"):
        load_graph(CORPUS / "bert_legacy.onnx")


def test_every_command_takes_dim_on_a_model_and_refuses_it_on_a_dsl_file(capsys):
    model = str(CORPUS / "cnn_legacy.onnx")
    assert main(["check", model, "--dim", "batch=4"]) == 0
    assert main(["cost", model, "--dim", "batch=4", "--platform", "dgx-a100"]) == 0
    assert main(["compile", model, "--dim", "batch=4", "--platform", "dgx-a100", "--mapper", "heft", "-q"]) == 0
    assert main(["check", model, "--input-shape", "x=4,3,32,32"]) == 0
    capsys.readouterr()
    assert main(["check", model, "--dim", "seq=4"]) == 2
    assert "no dynamic dimension of that name (it has: batch)" in capsys.readouterr().err
    assert main(["check", model, "--input-shape", "y=4,3,32,32"]) == 2
    assert "no input of that name" in capsys.readouterr().err
    assert main(["check", model, "--input-shape", "x=4,3"]) == 2
    assert "has 4 dimensions, not 2" in capsys.readouterr().err
    dsl = str(Path(__file__).resolve().parent / "data" / "hostile" / "ok.tg")
    assert main(["check", dsl, "--dim", "batch=4"]) == 2
    assert "--dim applies to model files (.onnx) only" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("model, dtype", [("bert_large", "f16"), ("bart_large", "f32")])
def test_an_imported_large_encoder_splits_by_data_like_the_written_one(model, dtype, tmp_path, capsys):
    """BERT-large's layers (f16) and BART-large's encoder layers (f32: torch 2.13's default exporter
    fails on BART in f16) as that exporter writes them (SDPA attention, the token-type embedding
    and the mask folded at the batch size), weights deleted: ``--parallel auto`` picks data
    parallelism on dgx-a100 with the speedup of examples/bert_large.tg (same sizes), within 15 %."""
    written = tmp_path / "bert_large_4layers.tg"
    written.write_text((CORPUS.parents[2] / "examples" / "bert_large.tg").read_text().replace("L = 24", "L = 4")
                       .replace("f16[", f"{dtype}["))
    speedups = []
    for source in (str(written), str(CORPUS / "weightless" / f"{model}_4layers.onnx")):
        out = tmp_path / "r.json"
        assert main(["compile", source, "--platform", "dgx-a100", "--parallel", "auto", "--mapper", "heft", "-q",
                     "--json", str(out)]) == 0
        plan = json.loads(out.read_text())["parallel"]
        assert plan["plan"]["data"] == 8, plan["plan"]
        speedups.append(plan["speedup"])
        out.unlink()
    assert "its weights were not needed" in capsys.readouterr().err
    assert speedups[1] == pytest.approx(speedups[0], rel=0.15)


def test_a_decode_step_with_a_kv_cache_imports_and_maps(elsewhere, monkeypatch):
    """One GPT-2 decode step: a token per sequence against a cache of 15 positions; the cache grows
    by a concat to 16, and the step's products (1 query row against 16 keys) match FlopCounterMode."""
    monkeypatch.chdir(elsewhere / "cwd")
    imported = import_onnx(str(elsewhere / "models" / "decode" / "gpt2_decode_step.onnx"))
    assert imported.unsupported == {}
    graph = graph_from_text(imported.text, "decode.tg")
    assert dense_flops(graph) == pytest.approx(FLOPS["gpt2_decode"], rel=0.02)
    grown = [t.output.shape for t in graph.tasks if t.op == "concat" and t.output is not None]
    assert grown == [(2, 4, 16, 8)] * 4  # keys and values of both layers
    compiled = compile_graph(graph, "dgx-a100", mapper="heft", parallel="auto")
    assert validate(compiled.result.schedule) == []
