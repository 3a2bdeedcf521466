"""Build CoDL's evaluation models as ONNX graphs offline (a test corpus, never a runtime dependency).

CoDL (Jia et al., "CoDL: Efficient CPU-GPU Co-execution for Deep Learning Inference on Mobile
Devices", MobiSys 2022) co-executes RetinaFace, YOLOv2, VGG-16, PoseNet and Fast Style Transfer
on a phone's CPU and GPU. Writes ``tests/data/codl/{vgg16,yolov2,fst}.onnx`` with the onnx package
alone, every weight a ``ConstantOfShape`` of its shape (as the onnx package's light models do) so
the files stay a few kilobytes:

- VGG-16 (Simonyan and Zisserman, ICLR 2015, configuration D) at 224x224;
- YOLOv2 (Redmon and Farhadi, "YOLO9000", CVPR 2017: Darknet-19, the passthrough layer's 1x1 conv
  and 2x2 reorg, 5 anchors x (80 classes + 5) outputs) at 416x416, batch normalisation folded into
  the convolutions' biases as inference runtimes do;
- Fast Style Transfer (Johnson et al., "Perceptual Losses for Real-Time Style Transfer", ECCV
  2016: 9x9 conv, two stride-2 convs, five residual blocks, two stride-2 transposed convs, 9x9
  conv, instance normalisation) at 256x256, the size it was trained at.

RetinaFace and PoseNet are left out: CoDL's repository names the models but not the backbone and
input size of either, so their graphs cannot be rebuilt as CoDL ran them.

    python benchmarks/codl_models.py [--out tests/data/codl]
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class Builder:
    """A straight-line ONNX graph: each method adds a node on the current tensor."""

    def __init__(self, name: str, shape: tuple[int, ...]) -> None:
        self.name, self.nodes, self.inits = name, [], []
        self.x, self.c, self.n = "input", shape[1], 0
        self.inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, list(shape))]

    def _id(self, kind: str) -> str:
        self.n += 1
        return f"{kind}{self.n}"

    def _weight(self, shape: list[int]) -> str:
        name = self._id("w")
        self.inits.append(numpy_helper.from_array(np.array(shape, dtype=np.int64), f"{name}_shape"))
        self.nodes.append(helper.make_node("ConstantOfShape", [f"{name}_shape"], [name], name=f"{name}_fill",
                                           value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.01])))
        return name

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        out = self._id(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        self.x = out
        return out

    def conv(self, cout: int, k: int, s: int = 1, act: str | None = "relu", x: str | None = None,
             cin: int | None = None) -> str:
        x, cin = x or self.x, cin or self.c
        self.node("Conv", [x, self._weight([cout, cin, k, k]), self._weight([cout])], kernel_shape=[k, k],
                  strides=[s, s], pads=[k // 2] * 4)
        self.c = cout
        return self.act(act)

    def deconv(self, cout: int, k: int, s: int) -> str:
        self.node("ConvTranspose", [self.x, self._weight([self.c, cout, k, k]), self._weight([cout])],
                  kernel_shape=[k, k], strides=[s, s], pads=[k // 2] * 4, output_padding=[s - 1, s - 1])
        self.c = cout
        return self.x

    def act(self, act: str | None) -> str:
        if act == "relu":
            return self.node("Relu", [self.x])
        if act == "leaky":
            return self.node("LeakyRelu", [self.x], alpha=0.1)
        return self.x

    def inorm(self) -> str:
        return self.node("InstanceNormalization", [self.x, self._weight([self.c]), self._weight([self.c])])

    def maxpool(self) -> str:
        return self.node("MaxPool", [self.x], kernel_shape=[2, 2], strides=[2, 2])

    def model(self) -> onnx.ModelProto:
        out = helper.make_tensor_value_info(self.x, TensorProto.FLOAT, None)
        graph = helper.make_graph(self.nodes, self.name, self.inputs, [out], self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="codl_models")
        m.ir_version = 8
        return onnx.shape_inference.infer_shapes(m, strict_mode=True)


def vgg16() -> onnx.ModelProto:
    b = Builder("vgg16", (1, 3, 224, 224))
    for block in ((64, 64), (128, 128), (256, 256, 256), (512, 512, 512), (512, 512, 512)):
        for c in block:
            b.conv(c, 3)
        b.maxpool()
    b.node("Flatten", [b.x], axis=1)
    for i, (cin, cout) in enumerate(((512 * 7 * 7, 4096), (4096, 4096), (4096, 1000))):
        b.node("Gemm", [b.x, b._weight([cout, cin]), b._weight([cout])], transB=1)
        if i < 2:
            b.act("relu")
    return b.model()


def yolov2() -> onnx.ModelProto:
    b = Builder("yolov2", (1, 3, 416, 416))
    darknet = ((32, 3), "M", (64, 3), "M", (128, 3), (64, 1), (128, 3), "M", (256, 3), (128, 1), (256, 3), "M",
               (512, 3), (256, 1), (512, 3), (256, 1), (512, 3), "route", "M", (1024, 3), (512, 1), (1024, 3),
               (512, 1), (1024, 3), (1024, 3), (1024, 3))
    route = ""
    for layer in darknet:
        if layer == "M":
            b.maxpool()
        elif layer == "route":
            route = b.x
        else:
            b.conv(layer[0], layer[1], act="leaky")
    top, top_c = b.x, b.c
    b.conv(64, 1, act="leaky", x=route, cin=512)  # the passthrough layer on the 26x26x512 map
    b.node("SpaceToDepth", [b.x], blocksize=2)  # reorg: 13x13x256
    b.node("Concat", [b.x, top], axis=1)
    b.c = 256 + top_c
    b.conv(1024, 3, act="leaky")
    b.conv(5 * (80 + 5), 1, act=None)
    return b.model()


def fst() -> onnx.ModelProto:
    b = Builder("fst", (1, 3, 256, 256))
    for c, k, s in ((32, 9, 1), (64, 3, 2), (128, 3, 2)):
        b.conv(c, k, s, act=None)
        b.inorm()
        b.act("relu")
    for _ in range(5):
        skip = b.x
        b.conv(128, 3, act=None)
        b.inorm()
        b.act("relu")
        b.conv(128, 3, act=None)
        b.inorm()
        b.node("Add", [b.x, skip])
    for c in (64, 32):
        b.deconv(c, 3, 2)
        b.inorm()
        b.act("relu")
    b.conv(3, 9, act=None)
    b.node("Tanh", [b.x])
    return b.model()


MODELS = {"vgg16": vgg16, "yolov2": yolov2, "fst": fst}


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "data", "codl"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name, build in MODELS.items():
        path = os.path.join(args.out, f"{name}.onnx")
        onnx.save(build(), path)
        print(f"{path}: {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
