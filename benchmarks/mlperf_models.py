"""Build the MLPerf Mobile v4.0 model graphs offline (a test corpus, never a runtime dependency).

Writes ``tests/data/mlperf_mobile/{mobilenetv4,mobilebert,edsr}.onnx``: each network with random
weights (no weights are downloaded), exported by ``torch.onnx`` and quantised to int8 QDQ (ONNX
Runtime's static quantiser on random calibration inputs, the form its QNN execution provider
takes), then every weight replaced by a ``ConstantOfShape`` of its shape (as the onnx package's
light models do) so the files stay small. Shapes are MLPerf Mobile v4.0's:

- MobileNetV4-Conv-L at 384x384 (image classification v2; Qin et al., "MobileNetV4", 2024,
  arXiv:2404.10518; the block table of timm's ``mobilenetv4_conv_large``, rewritten here);
- MobileBERT at sequence 384 with a SQuAD head (natural language processing; Sun et al., ACL 2020;
  transformers' ``MobileBertConfig`` defaults, which are google/mobilebert-uncased's);
- EDSR F32B5, 2x, 540x960 input (super resolution: 32 filters, 5 residual blocks; Lim et al.,
  CVPRW 2017; MLPerf Mobile's ``edsr_f32b5`` model).

Needs ``torch``, ``transformers``, ``onnxruntime`` and ``onnxscript`` (not mapper's dependencies):

    python benchmarks/mlperf_models.py [--out tests/data/mlperf_mobile]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np
import onnx
import torch
from onnx import helper, numpy_helper
from torch import nn


def _bn(c: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(c)


def _cna(cin: int, cout: int, k: int, s: int = 1, groups: int = 1, act: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False), _bn(cout)]
    if act:
        layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _div8(v: float) -> int:
    return max(8, int(v + 4) // 8 * 8)


class UIR(nn.Module):
    """Universal inverted bottleneck (MobileNetV4): optional start depthwise conv (kernel ``a``),
    1x1 expansion, optional middle depthwise conv (kernel ``k``), 1x1 projection."""

    def __init__(self, cin: int, cout: int, a: int, k: int, s: int, e: int) -> None:
        super().__init__()
        mid = _div8(cin * e)
        self.start = _cna(cin, cin, a, s if not k else 1, groups=cin, act=False) if a else nn.Identity()
        self.exp = _cna(cin, mid, 1)
        self.mid = _cna(mid, mid, k, s, groups=mid) if k else nn.Identity()
        self.proj = _cna(mid, cout, 1, act=False)
        self.skip = cin == cout and s == 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.proj(self.mid(self.exp(self.start(x))))
        return x + y if self.skip else y


#: MobileNetV4-Conv-L's UIR blocks after the stem and the fused IB: (repeats, a, k, stride, channels).
MNV4_L = [(1, 3, 5, 2, 96), (1, 3, 3, 1, 96),
          (1, 3, 5, 2, 192), (3, 3, 3, 1, 192), (1, 3, 5, 1, 192), (5, 5, 3, 1, 192), (1, 3, 0, 1, 192),
          (4, 5, 5, 2, 512), (1, 5, 0, 1, 512), (1, 5, 3, 1, 512), (2, 5, 0, 1, 512), (1, 5, 3, 1, 512),
          (1, 5, 5, 1, 512), (3, 5, 0, 1, 512)]


class MobileNetV4ConvL(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = [_cna(3, 24, 3, 2), _cna(24, 96, 3, 2), _cna(96, 48, 1, act=False)]
        cin = 48
        for reps, a, k, s, c in MNV4_L:
            for r in range(reps):
                layers.append(UIR(cin, c, a, k, s if r == 0 else 1, 4))
                cin = c
        layers += [_cna(cin, 960, 1), nn.AdaptiveAvgPool2d(1), _cna(960, 1280, 1)]
        self.body = nn.Sequential(*layers)
        self.fc = nn.Linear(1280, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.body(x), 1))


class EDSR(nn.Module):
    """EDSR (Lim et al., 2017) with ``f`` filters, ``b`` residual blocks, 2x pixel-shuffle upsampling."""

    def __init__(self, f: int = 32, b: int = 5) -> None:
        super().__init__()
        self.head = nn.Conv2d(3, f, 3, padding=1)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Conv2d(f, f, 3, padding=1), nn.ReLU(),
                                                  nn.Conv2d(f, f, 3, padding=1)) for _ in range(b))
        self.body_tail = nn.Conv2d(f, f, 3, padding=1)
        self.up = nn.Sequential(nn.Conv2d(f, 4 * f, 3, padding=1), nn.PixelShuffle(2))
        self.tail = nn.Conv2d(f, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.head(x)
        y = h
        for blk in self.blocks:
            y = y + blk(y)
        return self.tail(self.up(h + self.body_tail(y)))


def _mobilebert() -> tuple[nn.Module, tuple[torch.Tensor, ...], list[str]]:
    here = os.path.dirname(os.path.abspath(__file__))  # benchmarks/kernels.py is not the kernels package
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    from transformers import MobileBertConfig, MobileBertForQuestionAnswering

    class QA(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = MobileBertForQuestionAnswering(MobileBertConfig(attn_implementation="eager"))

        def forward(self, ids, mask, types):
            out = self.m(input_ids=ids, attention_mask=mask, token_type_ids=types)
            return out.start_logits, out.end_logits

    seq = 384
    args = (torch.zeros(1, seq, dtype=torch.int64), torch.ones(1, seq, dtype=torch.int64),
            torch.zeros(1, seq, dtype=torch.int64))
    return QA(), args, ["input_ids", "input_mask", "segment_ids"]


def _export(model: nn.Module, args: tuple, names: list[str], path: str) -> None:
    model.eval()
    with torch.no_grad():
        torch.onnx.export(model, args, path, input_names=names, opset_version=17, dynamo=False)


def _quantise(src: str, dst: str, feeds: dict[str, np.ndarray]) -> None:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.left = [feeds]

        def get_next(self):
            return self.left.pop() if self.left else None

    quantize_static(src, dst, Reader(), quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QUInt8)


def _strip(src: str, dst: str) -> None:
    """Every initializer of more than 16 elements becomes a ConstantOfShape node of its shape."""
    m = onnx.load(src)
    keep, nodes = [], []
    for init in m.graph.initializer:
        if int(np.prod(init.dims)) <= 16:
            keep.append(init)
            continue
        shape = numpy_helper.from_array(np.array(init.dims, dtype=np.int64), f"{init.name}__shape")
        keep.append(shape)
        value = helper.make_tensor("value", init.data_type, [1], [0])
        nodes.append(helper.make_node("ConstantOfShape", [shape.name], [init.name], value=value))
    del m.graph.initializer[:]
    m.graph.initializer.extend(keep)
    rest = list(m.graph.node)
    del m.graph.node[:]
    m.graph.node.extend(nodes + rest)
    onnx.save(m, dst)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data",
                                                  "mlperf_mobile"))
    ap.add_argument("--only", default="", help="comma-separated names (default: all three)")
    args = ap.parse_args()
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    os.makedirs(args.out, exist_ok=True)
    img = torch.zeros(1, 3, 384, 384)
    lr = torch.zeros(1, 3, 540, 960)
    bert, bert_args, bert_names = _mobilebert()
    models = [("mobilenetv4", MobileNetV4ConvL(), (img,), ["input"]),
              ("edsr", EDSR(), (lr,), ["input"]),
              ("mobilebert", bert, bert_args, bert_names)]
    if args.only:
        models = [m for m in models if m[0] in args.only.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        for name, model, margs, names in models:
            fp32, q = os.path.join(tmp, f"{name}_f32.onnx"), os.path.join(tmp, f"{name}_q.onnx")
            _export(model, margs, names, fp32)
            feeds = {n: (rng.random(tuple(a.shape), dtype=np.float32) if a.dtype == torch.float32
                         else a.numpy()) for n, a in zip(names, margs)}
            _quantise(fp32, q, feeds)
            _strip(q, os.path.join(args.out, f"{name}.onnx"))
            print(name, os.path.getsize(os.path.join(args.out, f"{name}.onnx")), "bytes")


if __name__ == "__main__":
    main()
