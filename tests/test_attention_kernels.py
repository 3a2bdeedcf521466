"""Attention kernels a platform declares (``attention_kernel``, ``attention_kernels``) and
``--parallel ...,attn=NAME`` (mapper.platform.kernels; docs/platforms.md, docs/parallel.md)."""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from mapper.cluster.search import plan_cluster
from mapper.costing.fusion import fuse_for
from mapper.costing.latency import estimate
from mapper.errors import OptionsError, PlatformError
from mapper.frontend.load import graph_from_text, load_graph
from mapper.frontend.sources import ModelFile
from mapper.parallel.layout import parse_layout
from mapper.platform.kernels import default, names, with_kernel
from mapper.platform.loader import load_platform
from mapper.platform.schema import Checker

ROOT = Path(__file__).resolve().parents[1]
GPU = ('[[device]]\nname = "g"\nkind = "gpu"\npeak_gflops = { bf16 = 1000.0 }\n'
       'tensor_gflops = { bf16 = 1000000.0 }\n')


def _platform(extra: str):
    import tomllib
    return Checker("k.toml").platform(tomllib.loads('name = "k"\n' + GPU + extra), "k.toml")


def _gpu(platform):
    return next(d for d in platform.devices if d.kind == "gpu")


def test_a_kernel_replaces_only_the_attention_entries():
    plat = _platform('efficiency = { gemm = 0.7, attention = 0.6 }\nhalf_length = { "attention.causal" = 270.0 }\n'
                     'attention_kernel = "cudnn"\n'
                     'attention_kernels = { fa2 = { efficiency = { attention = 0.4 }, '
                     'half_length = { "attention.causal" = 540.0 } } }\n')
    assert names(plat) == ("cudnn", "fa2") and default(plat) == "cudnn"
    gpu = _gpu(with_kernel(plat, "fa2"))
    assert gpu.kernel == "fa2"
    assert dict(gpu.efficiency) == {"gemm": 0.7, "attention": 0.4}
    assert dict(gpu.half_length) == {"attention.causal": 540.0}
    assert _gpu(with_kernel(plat, "cudnn")) == _gpu(plat)


@pytest.mark.parametrize("extra,words", [
    ('attention_kernels = { fa2 = { efficiency = { attention = 0.4 } } }\n', "needs attention_kernel"),
    ('attention_kernel = "cudnn"\nattention_kernels = { fa2 = { efficiency = { gemm = 0.4 } } }\n',
     "not an attention op's key"),
    ('attention_kernel = "cudnn"\nattention_kernels = { cudnn = { efficiency = { attention = 0.4 } } }\n',
     "the device's own attention_kernel"),
    ('attention_kernel = "cudnn"\nattention_kernels = { fa2 = { rate = 0.4 } }\n', "unknown key"),
])
def test_bad_kernel_tables_name_the_key(extra, words):
    with pytest.raises(PlatformError, match=words):
        _platform(extra)


def test_an_undeclared_kernel_exits_2_naming_those_declared():
    with pytest.raises(OptionsError, match="declare the attention kernels cudnn, fa2") as err:
        with_kernel(load_platform("dgx-h100"), "fa3")
    assert err.value.exit_code == 2
    with pytest.raises(OptionsError, match="no attention kernels"):
        with_kernel(load_platform("dgx1-v100"), "fa2")


def test_attn_is_a_plan_key_of_parallel():
    spec = parse_layout("tensor=2,attn=fa2")
    assert spec.attn == "fa2" and spec.allows(type("L", (), {"tensor": 2})())
    with pytest.raises(OptionsError, match="attention kernel"):
        parse_layout("attn=fa/2")


def _per_flop(platform, seq: int, backward: bool = False) -> float:
    text = (f"graph g {{\n  input x : bf16[65536, 6144]\n"
            f"  a = attention(x, heads = 16, seq = {seq}, causal = 1)\n  output a\n}}\n")
    (task,) = graph_from_text(text, "att.tg").tasks
    return estimate(task, "attention", _gpu(platform)).t_parallel / task.flops


@pytest.mark.parametrize("seq", [2048, 16384])
def test_fa2_on_an_h100_runs_at_its_fitted_rate(seq):
    """Hand-worked: cuDNN's forward at 0.60 x s / (s + 270) of 989.4 TFLOP/s, FlashAttention-2's at
    0.40 x s / (s + 540); at 2,048 tokens fa2 takes 0.60 / 0.40 x (2,048 + 540) / (2,048 + 270) = 1.675x
    as long a FLOP, at 16,384 tokens 1.516x."""
    h100 = load_platform("dgx-h100")
    ratio = _per_flop(with_kernel(h100, "fa2"), seq) / _per_flop(h100, seq)
    assert ratio == pytest.approx(0.60 / 0.40 * (seq + 540) / (seq + 270), rel=0.005)
    assert _per_flop(with_kernel(h100, "fa2"), seq) == pytest.approx(
        (seq + 540) / seq / (0.40 * 989.4e12), rel=0.005)


def test_the_fa2_entries_are_the_benchmarks_fit():
    bench = runpy.run_path(str(ROOT / "benchmarks" / "attention_rates.py"))
    rf, half = bench["fit_fa2_hopper"](bench["fit_share"]())
    for name in ("dgx-h100", "dgx-h200", "dgx-h100-superpod", "dgx-h200-superpod"):
        gpu = _gpu(with_kernel(load_platform(name), "fa2"))
        assert (dict(gpu.efficiency)["attention"], dict(gpu.half_length)["attention.causal"]) == (rf, half)


def test_a_plan_with_fa2_is_slower_and_says_so():
    params = (("LAYERS", 2), ("HIDDEN", 1024), ("HEADS", 8), ("KV_HEADS", 8), ("FFN", 2816), ("VOCAB", 32000),
              ("SEQ", 16384), ("BATCH", 8))
    graph = load_graph(ModelFile(str(ROOT / "examples" / "llama.tg"), params=params))
    plat = load_platform("dgx-h100")
    given = {"tensor": 1, "pipeline": 1, "data": 8, "micro_batch": 1, "zero": 1}
    runs = {k: plan_cluster(graph, plat, parse_layout(",".join(f"{a}={b}" for a, b in given.items()) + f",attn={k}"),
                            "adam", lambda g: fuse_for(g, plat)) for k in ("cudnn", "fa2")}
    assert runs["fa2"].best.step > runs["cudnn"].best.step
    assert runs["fa2"].to_json()["plan"]["attn"] == "fa2"
    assert plan_cluster(graph, plat, parse_layout("tensor=1,pipeline=1,data=8"), "adam",
                        lambda g: fuse_for(g, plat)).to_json()["plan"]["attn"] == "cudnn"


def test_the_cli_exits_2_on_an_undeclared_kernel(tmp_path):
    out = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "mapper", "compile", str(ROOT / "examples" / "llama.tg"), "--param", "LAYERS=2",
           "--param", "HIDDEN=1024", "--param", "HEADS=8", "--param", "KV_HEADS=8", "--param", "FFN=2816",
           "--param", "SEQ=4096", "--param", "BATCH=8", "--platform", "dgx-h100", "--train", "--optimizer", "adam"]
    bad = subprocess.run([*cmd, "--parallel", "data=8,attn=fa3"], capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "fa3" in bad.stderr
    good = subprocess.run([*cmd, "--parallel", "data=8,attn=fa2", "--json", str(out)], capture_output=True, text=True)
    assert good.returncode == 0, good.stderr
    assert json.loads(out.read_text())["parallel"]["plan"]["attn"] == "fa2"


#: The kernel each shipped platform's attention fit was made on, as its own comments cite: FlashAttention-2's
#: A100 sweep (Dao 2023, Figure 4d) and cuDNN's H200 and B200 sweeps (cudnn-frontend's sdpa benchmark).
FITTED_ON = {"dgx-a100": "fa2", "a100-mig": "fa2", "cpu-gpu-fpga": "fa2", "mixed-gpu": "fa2", "workstation": "fa2",
             "dgx-h100": "cudnn", "dgx-h200": "cudnn", "h100-mig": "cudnn", "dgx-b200": "cudnn",
             "gb200-tray": "cudnn", "gb200-nvl72": "cudnn", "dgx-b200-superpod": "cudnn"}


@pytest.mark.parametrize("name", sorted(FITTED_ON))
def test_a_platform_names_the_kernel_its_attention_rates_were_fitted_on(name):
    plat = load_platform(name)
    assert default(plat) == FITTED_ON[name]
    fitted = [d for d in plat.devices if d.kind == "gpu" and "attention.causal" in dict(d.half_length)]
    assert fitted and all(d.kernel == FITTED_ON[name] for d in fitted)
    assert with_kernel(plat, FITTED_ON[name]) == plat  # the default by name changes nothing


def test_the_cli_takes_the_default_kernel_by_name_on_a_b200(tmp_path):
    out = tmp_path / "r.json"
    run = subprocess.run([sys.executable, "-m", "mapper", "compile", str(ROOT / "examples" / "llama.tg"),
                          "--param", "LAYERS=2", "--param", "HIDDEN=1024", "--param", "HEADS=8", "--param", "KV_HEADS=8",
                          "--param", "FFN=2816", "--param", "SEQ=4096", "--param", "BATCH=8", "--platform", "dgx-b200",
                          "--train", "--optimizer", "adam", "--parallel", "data=8,attn=cudnn", "--json", str(out)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert json.loads(out.read_text())["parallel"]["plan"]["attn"] == "cudnn"
