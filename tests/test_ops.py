"""Tests of the op catalogue: shapes and work against hand-computed values,
and every error path with the operand / attribute it names."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from mapper.core.graph import TensorType
from mapper.core.ops import OP_CLASSES, OPS, REQUIRED, OpError, OpInfo, infer
from mapper.errors import DslError


def T(dtype: str, *shape: int) -> TensorType:
    return TensorType(dtype, tuple(shape))


def CSR(dtype: str, m: int, n: int, nnz: int) -> TensorType:
    return TensorType(dtype, (m, n), "csr", nnz)


# -- shapes and work ---------------------------------------------------------------

# (op, operands, attrs, output shape, flops, bytes_read, bytes_written); f32 = 4 bytes
CASES = [
    # matmul: 2*batch*M*N*K
    ("matmul", [T("f32", 128, 768), T("f32", 768, 2304)], {}, (128, 2304),
     2 * 128 * 2304 * 768, 4 * (128 * 768 + 768 * 2304), 4 * 128 * 2304),
    ("matmul", [T("f32", 8, 12, 128, 64), T("f32", 64, 128)], {}, (8, 12, 128, 128),
     2 * 96 * 128 * 128 * 64, 4 * (8 * 12 * 128 * 64 + 64 * 128), 4 * 8 * 12 * 128 * 128),
    ("matmul", [T("f64", 4, 1, 3, 5), T("f64", 6, 5, 7)], {}, (4, 6, 3, 7),
     2 * 24 * 3 * 7 * 5, 8 * (60 + 210), 8 * 4 * 6 * 21),
    # conv2d: 2*N*K*Ho*Wo*(C/g)*R*S; ResNet-50 stem: 7x7/2 pad 3 -> 112x112
    ("conv2d", [T("f32", 1, 3, 224, 224), T("f32", 64, 3, 7, 7)], {"stride": 2, "padding": 3},
     (1, 64, 112, 112), 2 * 64 * 112 * 112 * 3 * 49, 4 * (3 * 224 * 224 + 64 * 3 * 49), 4 * 64 * 112 * 112),
    ("conv2d", [T("f32", 1, 4, 10, 12), T("f32", 6, 4, 3, 5)], {"stride": [2, 3], "padding": [1, 2]},
     (1, 6, 5, 4), 2 * 6 * 20 * 4 * 15, 4 * (480 + 360), 4 * 120),
    ("conv2d", [T("f32", 2, 32, 10, 12), T("f32", 64, 8, 3, 3)], {"groups": 4},
     (2, 64, 8, 10), 2 * 2 * 64 * 8 * 10 * 8 * 9, 4 * (2 * 32 * 120 + 64 * 8 * 9), 4 * 2 * 64 * 80),
    # pools: kernel^2 per output element; stride defaults to kernel
    ("maxpool", [T("f32", 1, 64, 112, 112)], {"kernel": 3, "stride": 2, "padding": 1},
     (1, 64, 56, 56), 9 * 64 * 56 * 56, 4 * 64 * 112 * 112, 4 * 64 * 56 * 56),
    ("avgpool", [T("f32", 1, 2048, 7, 7)], {"kernel": 7}, (1, 2048, 1, 1),
     49 * 2048, 4 * 2048 * 49, 4 * 2048),
    # pairs [h, w] for kernel, stride and padding: kh*kw per output element
    ("maxpool", [T("i8", 1, 2, 9, 8)], {"kernel": [3, 2], "stride": [3, 1], "padding": [1, 0]},
     (1, 2, 3, 7), 6 * 2 * 21, 144, 42),
    ("batchnorm", [T("f32", 1, 64, 56, 56)], {}, (1, 64, 56, 56), 2 * 64 * 56 * 56,
     4 * 64 * 56 * 56, 4 * 64 * 56 * 56),
    ("relu", [T("f16", 10, 20)], {}, (10, 20), 200, 400, 400),
    ("relu", [T("i32", 10)], {}, (10,), 10, 40, 40),
    ("gelu", [T("f32", 128, 3072)], {}, (128, 3072), 8 * 128 * 3072, 4 * 128 * 3072, 4 * 128 * 3072),
    ("softmax", [T("f32", 4, 10)], {"axis": 0}, (4, 10), 5 * 40, 160, 160),
    ("layernorm", [T("f32", 128, 768)], {}, (128, 768), 8 * 128 * 768, 4 * 128 * 768, 4 * 128 * 768),
    # binary: NumPy broadcasting, 1 flop per output element
    ("add", [T("f32", 128, 768), T("f32", 768)], {}, (128, 768), 128 * 768, 4 * (128 * 768 + 768), 4 * 128 * 768),
    ("mul", [T("f64", 3, 1), T("f64", 1, 4)], {}, (3, 4), 12, 8 * 7, 8 * 12),
    ("sub", [T("f32"), T("f32", 5)], {}, (5,), 5, 4 * 6, 4 * 5),
    ("div", [T("c64", 2, 3), T("c64", 2, 3)], {}, (2, 3), 6, 8 * 12, 8 * 6),
    # attention: B = T/seq, dh = D/heads; 2*B*h*S*S*dh twice + 5*B*h*S*S
    ("attention", [T("f32", 8 * 128, 3 * 768)], {"heads": 12, "seq": 128}, (1024, 768),
     2 * (2 * 8 * 12 * 128 * 128 * 64) + 5 * 8 * 12 * 128 * 128, 4 * 1024 * 2304, 4 * 1024 * 768),
    ("attention", [T("f16", 1024, 768)] * 3, {"heads": 12, "seq": 1024, "causal": 1}, (1024, 768),
     4 * 12 * 1024 * 1024 * 64 + 5 * 12 * 1024 * 1024, 3 * 2 * 1024 * 768, 2 * 1024 * 768),
    # embedding: 0 flops, reads ids + the gathered rows
    # grouped-query attention: 32 query heads of 128 over 8 key/value heads, fused qkv in groups
    ("attention", [T("f16", 2 * 512, (32 + 16) * 128)], {"heads": 32, "kv_heads": 8, "seq": 512}, (1024, 4096),
     4 * 2 * 512 * 512 * 4096 + 5 * 2 * 32 * 512 * 512, 2 * 1024 * 48 * 128, 2 * 1024 * 4096),
    # unfused: the score matrix read 3 and written 3.5 times (16-bit)
    ("attention", [T("f16", 256, 3 * 64)], {"heads": 2, "seq": 128, "fused": 0}, (256, 64),
     4 * 2 * 128 * 128 * 64 + 5 * 2 * 2 * 128 * 128, 2 * 256 * 192 + 3 * 2 * 2 * 2 * 128 * 128,
     2 * 256 * 64 + 3.5 * 2 * 2 * 2 * 128 * 128),
    # mixture of experts: 64 tokens, 8 experts, top 2, hidden 32, expert width 48 (f16)
    ("topk", [T("f16", 64, 8)], {"k": 2, "norm": 1}, (64, 8), 64 * (2 * 8 + 2 * 2), 2 * 64 * 8, 2 * 64 * 8),
    ("topk", [T("f32", 64, 8)], {"k": 2, "scale": 2.5}, (64, 8), 64 * (2 * 8 + 2), 4 * 64 * 8, 4 * 64 * 8),
    ("moe_dispatch", [T("f16", 64, 32), T("f16", 64, 8)], {"topk": 2}, (128, 32), 0,
     2 * 128 * 32 + 2 * 64 * 8, 2 * 128 * 32),
    ("grouped_matmul", [T("f16", 128, 32), T("f16", 64, 8), T("f16", 8, 32, 96)], {}, (128, 96),
     2 * 128 * 32 * 96, 2 * (128 * 32 + 64 * 8 + 8 * 32 * 96), 2 * 128 * 96),
    # a decode step: 4 routed rows reach 4 of the 8 experts, whose matrices alone are read
    ("grouped_matmul", [T("f16", 4, 32), T("f16", 2, 8), T("f16", 8, 32, 96)], {}, (4, 96),
     2 * 4 * 32 * 96, 2 * (4 * 32 + 2 * 8 + 4 * 32 * 96), 2 * 4 * 96),
    ("moe_combine", [T("f16", 128, 32), T("f16", 64, 8)], {}, (64, 32), 2 * 128 * 32,
     2 * (128 * 32 + 64 * 8), 2 * 64 * 32),
    # multi-head latent attention: 2 sequences of 16, 4 heads, dn 8, dr 4, dv 6
    ("mla_attention", [T("f16", 32, 4 * 12), T("f16", 32, 4 * 14), T("f16", 32, 4)], {"heads": 4, "seq": 16},
     (32, 24), 3 * 32 * 4 * 5 + 2 * 2 * 4 * 16 * 16 * (12 + 6) + 5 * 2 * 4 * 16 * 16,
     2 * 32 * (48 + 56 + 4), 2 * 32 * 24),
    ("rmsnorm", [T("f32", 128, 768)], {}, (128, 768), 4 * 128 * 768, 4 * 128 * 768, 4 * 128 * 768),
    ("swiglu", [T("f16", 128, 2 * 344)], {}, (128, 344), 6 * 128 * 344, 2 * 128 * 688, 2 * 128 * 344),
    ("rotary", [T("f16", 256, (8 + 4) * 64)], {"heads": 8, "kv_heads": 2, "seq": 128}, (256, 768),
     3 * 256 * (8 + 2) * 64, 2 * 256 * 768, 2 * 256 * 768),
    ("embedding", [T("i32", 8, 128), T("f32", 30522, 768)], {}, (8, 128, 768), 0,
     4 * 1024 + 4 * 1024 * 768, 4 * 1024 * 768),
    # DLRM's pooled lookup: 4 bags of 3 ids, the 12 gathered rows read (not the table), 2 adds per bag and column
    ("embedding_bag", [T("i64", 12), T("f32", 1000, 8)], {"pooling": 3}, (4, 8), 4 * 8 * 2, 8 * 12 + 4 * 12 * 8,
     4 * 4 * 8),
    ("allreduce", [T("f32", 2, 3), T("f32", 2, 3), T("f32", 2, 3)], {"rank": 1}, (2, 3), 12, 4 * 18, 4 * 6),
    ("concat", [T("f32", 2, 3), T("f32", 2, 5), T("f32", 2, 1)], {"axis": -1}, (2, 9), 0, 4 * 18, 4 * 18),
    ("concat", [T("i8", 4)], {}, (4,), 0, 4, 4),
    # split reads only its chunk
    ("split", [T("f32", 128, 2304)], {"parts": 3, "index": 2, "axis": 1}, (128, 768), 0,
     4 * 128 * 768, 4 * 128 * 768),
    ("reshape", [T("f32", 1, 2048, 1, 1)], {"shape": [1, -1]}, (1, 2048), 0, 0, 0),
    ("reshape", [T("bool", 6, 4)], {"shape": (3, 8)}, (3, 8), 0, 0, 0),
    ("transpose", [T("f32", 2, 3, 4)], {}, (4, 3, 2), 0, 96, 96),
    ("transpose", [T("f32", 2, 3, 4)], {"perm": [0, 2, 1]}, (2, 4, 3), 0, 96, 96),
    # stencil: points flops per interior point per step (points-1 adds, 1 divide),
    # and the whole grid read and written each step
    ("stencil", [T("f64", 4096, 4096)], {"points": 5, "steps": 10}, (4096, 4096),
     10 * 5 * 4094 * 4094, 10 * 8 * 4096 * 4096, 10 * 8 * 4096 * 4096),
    ("stencil", [T("f32", 100, 50)], {"points": 9}, (100, 50), 9 * 98 * 48, 4 * 5000, 4 * 5000),
    ("stencil", [T("f32", 64, 64, 64)], {"points": 7, "steps": 2}, (64, 64, 64),
     2 * 7 * 62 ** 3, 2 * 4 * 64 ** 3, 2 * 4 * 64 ** 3),
    ("stencil", [T("f32", 2, 50)], {"points": 5}, (2, 50), 0, 400, 400),  # no interior
    # spmv: 2*nnz; A's bytes are values + column indices + row pointers
    ("spmv", [CSR("f64", 1000, 1000, 5000), T("f64", 1000)], {}, (1000,), 2 * 5000,
     5000 * 12 + 1001 * 4 + 8000, 8000),
    ("spmv", [CSR("f32", 10, 20, 30), T("f32", 20)], {}, (10,), 60, 30 * 8 + 11 * 4 + 80, 40),
    # fft: 5 N log2 N per transform
    ("fft", [T("c64", 64, 65536)], {}, (64, 65536), 64 * 5 * 65536 * 16, 8 * 64 * 65536, 8 * 64 * 65536),
    ("ifft", [T("c128", 1000)], {}, (1000,), 5 * 1000 * math.log2(1000), 16000, 16000),
    ("dot", [T("f64", 100), T("f64", 100)], {}, (), 200, 1600, 8),
    ("axpy", [T("f64", 100), T("f64", 100)], {"alpha": 2}, (100,), 200, 1600, 800),
    ("axpy", [T("f32"), T("f32", 100), T("f32", 100)], {}, (100,), 200, 4 + 800, 400),
    ("reduce", [T("f64", 30, 40)], {}, (), 1200, 9600, 8),
    ("reduce", [T("f32", 30, 40)], {"kind": "max", "axis": -1}, (30,), 1200, 4800, 120),
    ("reduce", [T("f32", 30, 40)], {"kind": "mean", "axis": 0}, (40,), 1200 + 40, 4800, 160),
    ("elementwise", [T("f32", 10, 10)], {"fn": "exp"}, (10, 10), 100, 400, 400),
    ("elementwise", [T("f32", 10, 10)], {"fn": "sigmoid"}, (10, 10), 400, 400, 400),
    ("elementwise", [T("c64", 7)], {"fn": "scale", "alpha": 0.5}, (7,), 7, 56, 56),
    ("opaque", [T("f32", 2, 8), T("f16", 4)], {"shape": [4, 4], "flops": 16.0, "kind": "LRN"}, (4, 4), 16, 72, 64),
    # conv_transpose2d: 2*N*C*H*W*(K/g)*R*S; a U-Net's 2x2/2 upsampling 16x16 -> 32x32
    ("conv_transpose2d", [T("f32", 2, 128, 16, 16), T("f32", 128, 64, 2, 2)], {"stride": 2}, (2, 64, 32, 32),
     2 * 2 * 128 * 256 * 64 * 4, 4 * (2 * 128 * 256 + 128 * 64 * 4), 4 * 2 * 64 * 1024),
    # Ho = (H - 1) sh - 2 ph + R + oph: (5 - 1) 2 - 2 + 3 + 1 = 10; groups 2: K = 2 * 3
    ("conv_transpose2d", [T("f32", 1, 4, 5, 6), T("f32", 4, 3, 3, 3)],
     {"stride": 2, "padding": 1, "output_padding": [1, 0], "groups": 2}, (1, 6, 10, 11),
     2 * 4 * 30 * 3 * 9, 4 * (120 + 108), 4 * 660),
    ("instancenorm", [T("f32", 2, 8, 5, 5)], {}, (2, 8, 5, 5), 8 * 400, 1600, 1600),
    ("cumsum", [T("i64", 4, 6)], {"axis": 1, "exclusive": 1, "reverse": 1}, (4, 6), 24, 192, 192),
    ("elementwise", [T("f32", 10, 10)], {"fn": "hardswish"}, (10, 10), 500, 400, 400),
    # gather_nd reads the indices and the slices it picks: 6 pairs of a [3, 4, 5] table -> [6, 5]
    ("gather_nd", [T("f32", 3, 4, 5), T("i64", 6, 2)], {}, (6, 5), 0, 8 * 12 + 4 * 30, 4 * 30),
    ("gather_nd", [T("f16", 2, 3, 4), T("i32", 2, 5, 1)], {"batch_dims": 1}, (2, 5, 4), 0, 4 * 10 + 2 * 40, 80),
    ("scatter_elements", [T("f32", 8, 16), T("i64", 8, 4), T("f32", 8, 4)], {"axis": 1}, (8, 16), 0,
     4 * 128 + 8 * 32 + 4 * 32, 4 * 128),
    ("scatter_elements", [T("f32", 8, 16), T("i64", 8, 4), T("f32", 8, 4)], {"axis": 1, "reduction": "add"},
     (8, 16), 32, 4 * 128 + 8 * 32 + 4 * 32, 4 * 128),
    # a GNN's sum of E = 40 edge messages into N = 6 nodes: more updates than rows along the axis
    ("scatter_elements", [T("f32", 6, 3), T("i64", 40, 3), T("f32", 40, 3)], {"reduction": "add"}, (6, 3), 120,
     4 * 18 + 8 * 120 + 4 * 120, 4 * 18),
    # a typed opaque op (an imported Equal): bool out of f32 operands
    ("opaque", [T("f32", 2, 8), T("f32", 8)], {"shape": [2, 8], "flops": 16.0, "kind": "Equal", "dtype": "bool"},
     (2, 8), 16, 96, 16),
]


@pytest.mark.parametrize("op, args, attrs, shape, flops, read, written", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_shape_and_work(op, args, attrs, shape, flops, read, written):
    info = infer(op, args, attrs)
    assert isinstance(info, OpInfo)
    assert info.output.shape == shape
    assert info.output.layout == "dense"
    assert info.flops == pytest.approx(flops, rel=1e-12)
    assert info.bytes_read == read
    assert info.bytes_written == written


def test_every_op_has_a_case():
    assert {c[0] for c in CASES} == set(OPS)


def test_output_dtypes():
    assert infer("embedding", [T("i64", 4), T("bf16", 10, 8)], {}).output.dtype == "bf16"
    assert infer("dot", [T("c128", 3), T("c128", 3)], {}).output == T("c128")
    assert infer("spmv", [CSR("f32", 4, 4, 4), T("f32", 4)], {}).output == T("f32", 4)


def test_resolved_attrs_fill_defaults_sorted():
    info = infer("maxpool", [T("f32", 1, 1, 8, 8)], {"kernel": 2})
    assert info.attrs == (("kernel", 2), ("padding", 0), ("stride", 2))
    assert info.output.shape == (1, 1, 4, 4)
    assert infer("transpose", [T("f32", 2, 3)], {}).attrs == (("perm", (1, 0)),)
    assert infer("axpy", [T("f32", 3), T("f32", 3)], {}).attrs == (("alpha", 1.0),)
    assert infer("reshape", [T("f32", 6)], {"shape": [2, 3]}).attrs == (("shape", (2, 3)),)
    assert infer("attention", [T("f32", 4, 6)], {"heads": 2, "seq": 4, "causal": True}).attrs == (
        ("cache", 0), ("causal", 1), ("fused", 1), ("heads", 2), ("kv_heads", None), ("seq", 4), ("window", 0))


def test_catalogue_fields():
    for name, spec in OPS.items():
        assert spec.name == name
        assert spec.op_class in OP_CLASSES
        assert spec.formula and spec.signature
        assert [a for a, _ in spec.attrs] == [a for a, _ in spec.attr_kinds]
        assert spec.max_operands is None or spec.max_operands >= spec.min_operands >= 1
    assert OPS["conv2d"].default("stride") == 1
    assert OPS["attention"].default("heads") is REQUIRED
    assert OPS["matmul"].op_class == "gemm" and OPS["spmv"].op_class == "sparse"


def test_docs_list_every_op_and_formula():
    text = (Path(__file__).resolve().parents[1] / "docs" / "ops.md").read_text()
    for name, spec in OPS.items():
        assert re.search(rf"^\|[^|\n]*\b{name}\b", text, re.M), name
        assert f"`{spec.formula}`" in text, (name, spec.formula)


# -- errors --------------------------------------------------------------------------

# (op, operands, attrs, message fragment, arg, attr)
ERRORS = [
    ("matmul", [T("f32", 128, 768), T("f32", 512, 768)], {},
     "matmul: inner dimensions differ: a is f32[128, 768], b is f32[512, 768] (768 != 512)", 1, None),
    ("matmul", [T("f32", 768), T("f32", 768, 3)], {}, "a must be at least 2-D", 0, None),
    ("matmul", [T("f32", 3, 4), T("f32", 4)], {}, "b must be at least 2-D", 1, None),
    ("matmul", [T("f32", 2, 3, 4), T("f32", 5, 4, 6)], {}, "batch dimensions do not broadcast", 1, None),
    ("matmul", [T("f32", 3, 4), T("f64", 4, 5)], {}, "operand dtypes differ: a is f32[3, 4], b is f64[4, 5]", 1, None),
    ("matmul", [T("bool", 3, 4), T("bool", 4, 5)], {}, "a must be a numeric tensor", 0, None),
    ("matmul", [T("f32", 3, 4)], {}, "takes 2 operands", None, None),
    ("matmul", [T("f32", 3, 4)] * 3, {}, "takes 2 operands", 2, None),
    ("conv2d", [T("f32", 1, 3, 8, 8), T("f32", 4, 2, 3, 3)], {}, "channels differ", 1, None),
    ("conv2d", [T("f32", 1, 6, 8, 8), T("f32", 4, 2, 3, 3)], {"groups": 4}, "groups = 4 must divide", None, "groups"),
    ("conv2d", [T("f32", 1, 3, 8, 8), T("f32", 4, 3, 3, 3)], {"stride": 0}, "stride must be >= 1, got 0", None, "stride"),
    ("conv2d", [T("f32", 1, 3, 8, 8), T("f32", 4, 3, 3, 3)], {"padding": -1}, "padding must be >= 0", None, "padding"),
    ("conv2d", [T("f32", 1, 3, 8, 8), T("f32", 4, 3, 3, 3)], {"stride": 1.5}, "stride must be an integer", None, "stride"),
    ("conv2d", [T("f32", 1, 3, 8, 8), T("f32", 4, 3, 3, 3)], {"groups": True}, "groups must be an integer", None, "groups"),
    ("conv2d", [T("f32", 1, 3, 2, 2), T("f32", 4, 3, 3, 3)], {}, "larger than the padded input", 1, None),
    ("conv2d", [T("f32", 3, 8, 8), T("f32", 4, 3, 3, 3)], {}, "x must be 4-D [N, C, H, W], got f32[3, 8, 8] (3-D)", 0, None),
    ("conv2d", [T("f32", 1, 3, 8, 8), T("f32", 4, 3, 3)], {}, "w must be 4-D", 1, None),
    ("conv2d", [T("i32", 1, 3, 8, 8), T("i32", 4, 3, 3, 3)], {}, "x must be a real floating-point or quantised int8 tensor", 0, None),
    ("conv2d", [T("f32", 1, 3, 8, 8), T("f32", 4, 3, 3, 3)], {"strid": 2},
     "unknown attribute 'strid' (valid: stride, padding, groups)", None, "strid"),
    ("maxpool", [T("f32", 1, 3, 8, 8)], {}, "missing required attribute 'kernel'", None, "kernel"),
    ("maxpool", [T("f32", 1, 3, 8, 8)], {"kernel": 0}, "kernel must be >= 1", None, "kernel"),
    ("maxpool", [T("f32", 1, 3, 8, 8)], {"kernel": 3, "padding": 2}, "padding = 2 must be at most half", None, "padding"),
    ("avgpool", [T("f32", 1, 3, 4, 4)], {"kernel": 7}, "the 7x7 kernel is larger than the padded input", None, "kernel"),
    ("avgpool", [T("f32", 1, 3, 4, 4)], {"kernel": [2, 2, 2]}, "kernel must be an integer or a pair [h, w]", None, "kernel"),
    ("avgpool", [T("f32", 1, 3, 4, 4)], {"kernel": [2, 0]}, "kernel must be >= 1, got 0", None, "kernel"),
    ("avgpool", [T("i32", 1, 3, 4, 4)], {"kernel": 2}, "x must be a real floating-point or quantised int8 tensor", 0, None),
    ("maxpool", [T("c64", 1, 3, 4, 4)], {"kernel": 2}, "x must be a real tensor", 0, None),
    ("conv2d", [T("f32", 1, 3, 8, 8), T("f32", 4, 3, 3, 3)], {"padding": [1, True]},
     "padding must be an integer or a pair", None, "padding"),
    ("avgpool", [T("f32", 3, 4, 4)], {"kernel": 2}, "x must be 4-D", 0, None),
    ("batchnorm", [T("f32", 5)], {}, "x must be at least 2-D", 0, None),
    ("batchnorm", [T("f32", 5, 2)], {"eps": -1e-5}, "eps must be >= 0", None, "eps"),
    ("batchnorm", [T("f32", 5, 2)], {"eps": "small"}, "eps must be a number", None, "eps"),
    ("relu", [T("c64", 5)], {}, "x must be a real tensor", 0, None),
    ("gelu", [T("c64", 5)], {}, "x must be a real floating-point or quantised int8 tensor", 0, None),
    ("relu", [T("f32", 5)], {"alpha": 1}, "unknown attribute 'alpha' (valid: none)", None, "alpha"),
    ("softmax", [T("f32", 4, 5)], {"axis": 2}, "axis = 2 is out of range for a 2-D operand", None, "axis"),
    ("softmax", [T("f32")], {}, "x must be at least 1-D", 0, None),
    ("layernorm", [T("f32")], {}, "x must be at least 1-D", 0, None),
    ("add", [T("f32", 3, 4), T("f32", 5)], {}, "shapes do not broadcast: a is f32[3, 4], b is f32[5]", 1, None),
    ("mul", [T("f32", 3), T("f16", 3)], {}, "operand dtypes differ", 1, None),
    ("sub", [T("f32", 2, 3), T("f32", 2, 2)], {}, "shapes do not broadcast", 1, None),
    ("div", [T("f32", 3), T("f32", 3)], {"axis": 0}, "unknown attribute 'axis' (valid: none)", None, "axis"),
    ("attention", [T("f32", 128, 2304)], {"seq": 128}, "missing required attribute 'heads'", None, "heads"),
    ("attention", [T("f32", 128, 2304)], {"heads": 12}, "missing required attribute 'seq'", None, "seq"),
    ("attention", [T("f32", 128, 2304)], {"heads": 10, "seq": 128}, "heads = 10 must divide the model width D = 768", None, "heads"),
    ("attention", [T("f32", 128, 2304)], {"heads": 12, "seq": 100}, "seq = 100 must divide the token count T = 128", None, "seq"),
    ("attention", [T("f32", 128, 2304)], {"heads": 12, "seq": 128, "causal": 2}, "causal must be 0 or 1", None, "causal"),
    ("attention", [T("f32", 128, 2300)], {"heads": 12, "seq": 128}, "last dimension must be 3*D", 0, None),
    ("attention", [T("f32", 128, 768)] * 2, {"heads": 12, "seq": 128}, "got 2", 1, None),
    ("attention", [T("f32", 128, 768), T("f32", 128, 768), T("f32", 64, 768)], {"heads": 12, "seq": 64},
     "q, k and v must have the same shape: q is f32[128, 768], v is f32[64, 768]", 2, None),
    ("attention", [T("f32", 8, 128, 2304)], {"heads": 12, "seq": 128}, "qkv must be 2-D [T, 3D]", 0, None),
    ("attention", [T("f16", 128, 48 * 64)], {"heads": 32, "kv_heads": 6, "seq": 128},
     "kv_heads = 6 must divide heads = 32", None, "kv_heads"),
    ("attention", [T("f16", 128, 4096), T("f16", 128, 512), T("f16", 128, 1024)],
     {"heads": 32, "kv_heads": 4, "seq": 128}, "k and v must be [T, kv_heads * dh] = [128, 512]", 2, None),
    ("rmsnorm", [T("f32")], {}, "x must be at least 1-D", 0, None),
    ("swiglu", [T("f16", 8, 7)], {}, "the last dimension must be even", 0, None),
    ("rotary", [T("f16", 128, 700)], {"heads": 8, "kv_heads": 2, "seq": 128},
     "qkv's last dimension must be (heads + 2 kv_heads) * dh", 0, None),
    ("rotary", [T("f16", 128, 12 * 7)], {"heads": 8, "kv_heads": 2, "seq": 128},
     "the head size 7 must be even", 0, None),
    ("embedding", [T("f32", 8), T("f32", 10, 4)], {}, "ids must be an integer tensor", 0, None),
    ("embedding_bag", [T("i64", 10), T("f32", 100, 4)], {"pooling": 3},
     "pooling = 3 must divide the 10 ids", None, "pooling"),
    ("embedding", [T("i32", 8), T("i32", 10, 4)], {}, "table must be a floating-point tensor", 1, None),
    ("embedding", [T("i32", 8), T("f32", 10)], {}, "table must be 2-D [V, D]", 1, None),
    ("allreduce", [T("f32", 2, 3), T("f32", 3, 3)], {}, "every part must have the same shape", 1, None),
    ("allreduce", [T("f32", 2, 3), T("f32", 2, 3)], {"rank": 2}, "out of range for 2 parts", None, "rank"),
    ("concat", [T("f32", 2, 3), T("f32", 3, 3)], {"axis": 1}, "shapes differ outside axis 1", 1, None),
    ("concat", [T("f32", 2, 3), T("f32", 2)], {}, "shapes differ outside axis 0", 1, None),
    ("concat", [T("f32", 2, 3), T("i32", 2, 3)], {}, "operand dtypes differ", 1, None),
    ("concat", [T("f32")], {}, "x1 must be at least 1-D", 0, None),
    ("concat", [], {}, "takes at least 1 operand", None, None),
    ("split", [T("f32", 10)], {"parts": 3, "index": 0}, "parts = 3 does not divide axis 0", None, "parts"),
    ("split", [T("f32", 9)], {"parts": 3, "index": 3}, "index = 3 is out of range for parts = 3", None, "index"),
    ("split", [T("f32", 9)], {"parts": 3, "index": -1}, "index must be >= 0", None, "index"),
    ("split", [T("f32", 9)], {"parts": 3}, "missing required attribute 'index'", None, "index"),
    ("split", [T("f32", 9)], {"parts": 3, "index": 0, "axis": 1}, "axis = 1 is out of range", None, "axis"),
    ("reshape", [T("f32", 6)], {"shape": [4, 2]}, "shape = [4, 2] has 8 elements but x (f32[6]) has 6", None, "shape"),
    ("reshape", [T("f32", 6)], {"shape": [-1, -1]}, "at most one -1", None, "shape"),
    ("reshape", [T("f32", 6)], {"shape": [0, 6]}, "positive sizes", None, "shape"),
    ("reshape", [T("f32", 6)], {"shape": [4, -1]}, "cannot infer the -1 in shape = [4, -1]: x (f32[6]) has 6 elements", None, "shape"),
    ("reshape", [T("f32", 6)], {"shape": 6}, "shape must be a list of integers", None, "shape"),
    ("reshape", [T("f32", 6)], {"shape": [2.0, 3]}, "shape must be a list of integers", None, "shape"),
    ("transpose", [T("f32", 2, 3, 4)], {"perm": [0, 1, 1]}, "perm = [0, 1, 1] is not a permutation", None, "perm"),
    ("transpose", [T("f32", 2, 3, 4)], {"perm": [1, 0]}, "is not a permutation of the axes 0 .. 2", None, "perm"),
    ("stencil", [T("f64", 64, 64)], {"points": 7}, "points = 7 is not valid for a 2-D grid", None, "points"),
    ("stencil", [T("f64", 8, 8, 8)], {"points": 5}, "(valid: 7)", None, "points"),
    ("stencil", [T("f64", 64)], {"points": 5}, "x must be 2-D [H, W] or 3-D [D, H, W]", 0, None),
    ("stencil", [T("f64", 64, 64)], {"points": 5, "steps": 0}, "steps must be >= 1", None, "steps"),
    ("stencil", [T("f64", 64, 64)], {}, "missing required attribute 'points'", None, "points"),
    ("spmv", [T("f64", 4, 4), T("f64", 4)], {}, "A must be a csr matrix, got f64[4, 4]", 0, None),
    ("spmv", [CSR("f64", 4, 5, 8), T("f64", 4)], {}, "inner dimensions differ", 1, None),
    ("spmv", [CSR("f64", 4, 4, 8), T("f32", 4)], {}, "operand dtypes differ", 1, None),
    ("spmv", [CSR("f64", 4, 4, 8), T("f64", 4, 1)], {}, "x must be 1-D [N]", 1, None),
    ("spmv", [CSR("f64", 4, 4, 17), T("f64", 4)], {}, "nnz must be between 0 and M*N = 16", 0, None),
    ("spmv", [CSR("i32", 4, 4, 4), T("i32", 4)], {}, "A must be a floating-point tensor", 0, None),
    ("add", [CSR("f64", 4, 4, 8), T("f64", 4, 4)], {}, "operand 1 must be dense", 0, None),
    ("spmv", [CSR("f64", 4, 4, 8), CSR("f64", 4, 4, 8)], {}, "operand 2 must be dense", 1, None),
    ("fft", [T("f32", 64)], {}, "x must be a complex tensor (c64 or c128), got f32[64]", 0, None),
    ("ifft", [T("c64")], {}, "x must be at least 1-D", 0, None),
    ("dot", [T("f32", 3), T("f32", 4)], {}, "lengths differ: a is f32[3], b is f32[4] (3 != 4)", 1, None),
    ("dot", [T("f32", 3, 1), T("f32", 3)], {}, "a must be 1-D [N]", 0, None),
    ("axpy", [T("f32", 3), T("f32", 4)], {}, "lengths differ: x is f32[3], y is f32[4]", 1, None),
    ("axpy", [T("f32"), T("f32", 3), T("f32", 3)], {"alpha": 2.0}, "alpha is only for the two-operand form", None, "alpha"),
    ("axpy", [T("f32", 3), T("f32", 3), T("f32", 3)], {}, "a must be a scalar tensor []", 0, None),
    ("axpy", [T("f32"), T("f32", 3), T("f64", 3)], {}, "operand dtypes differ", 2, None),
    ("reduce", [T("f32", 3)], {"kind": "min"}, "kind = 'min' is not one of \"sum\", \"max\", \"mean\"", None, "kind"),
    ("reduce", [T("f32", 3)], {"kind": 3}, "kind must be a string", None, "kind"),
    ("reduce", [T("c64", 3)], {"kind": "max"}, "max has no order on complex", 0, None),
    ("reduce", [T("f32", 3)], {"axis": 1}, "axis = 1 is out of range for a 1-D operand (valid: -1 .. 0)", None, "axis"),
    ("elementwise", [T("f32", 3)], {}, "missing required attribute 'fn'", None, "fn"),
    ("elementwise", [T("f32", 3)], {"fn": "expp"}, "fn = 'expp' is not one of", None, "fn"),
    ("elementwise", [T("f32", 3)], {"fn": "exp", "alpha": 2.0}, 'alpha is only for fn = "scale"', None, "alpha"),
    ("elementwise", [T("i32", 3)], {"fn": "exp"}, "x must be a floating-point tensor", 0, None),
    ("elementwise", [T("f32", 3)], {"fn": "scale", "alpha": float("nan")}, "alpha must be a number", None, "alpha"),
    ("topk", [T("f32", 4, 8)], {"k": 9}, "k = 9 is larger than the row (8 experts)", None, "k"),
    ("topk", [T("f32", 4, 8)], {"k": 0}, "k must be >= 1", None, "k"),
    ("topk", [T("i32", 4, 8)], {"k": 2}, "x must be a real floating-point tensor", 0, None),
    ("moe_dispatch", [T("f32", 4, 16), T("f32", 5, 8)], {"topk": 2}, "x and gates must have a row per token", 1, None),
    ("moe_dispatch", [T("f32", 4, 16), T("f32", 4, 8)], {"topk": 9}, "topk = 9 is larger than the 8 experts",
     None, "topk"),
    ("grouped_matmul", [T("f32", 8, 16), T("f32", 4, 8), T("f32", 4, 16, 32)], {},
     "w must have a matrix per expert (8 in gates)", 2, None),
    ("grouped_matmul", [T("f32", 8, 16), T("f32", 4, 8), T("f32", 8, 12, 32)], {}, "inner dimensions differ", 2, None),
    ("grouped_matmul", [T("f32", 9, 16), T("f32", 4, 8), T("f32", 8, 16, 32)], {}, "x must hold T K rows", 0, None),
    ("moe_combine", [T("f32", 8, 16), T("f32", 8)], {}, "gates must be 2-D [T, E]", 1, None),
    ("mla_attention", [T("f32", 32, 48), T("f32", 32, 56), T("f32", 32, 4)], {"heads": 5, "seq": 16},
     "heads = 5 must divide q's width", None, "heads"),
    ("mla_attention", [T("f32", 32, 48), T("f32", 32, 56), T("f32", 32, 3)], {"heads": 4, "seq": 16},
     "(even) rotary", 2, None),
    ("mla_attention", [T("f32", 32, 48), T("f32", 32, 56), T("f32", 32, 4)], {"heads": 4, "seq": 12},
     "seq = 12 must divide the token count T = 32", None, "seq"),
    ("opaque", [T("f32", 3)], {}, "missing required attribute 'shape'", None, "shape"),
    ("opaque", [T("f32", 3)], {"shape": [3, 0]}, "shape = [3, 0] must hold positive sizes", None, "shape"),
    ("opaque", [T("f32", 3)], {"shape": [3], "flops": -1.0}, "flops = -1.0 must be between 0 and 1e30", None, "flops"),
    ("opaque", [T("f32", 3)], {"shape": [3], "dtype": "f8"}, "dtype = 'f8' is not a dtype", None, "dtype"),
    ("conv_transpose2d", [T("f32", 1, 4, 5, 5), T("f32", 3, 2, 3, 3)], {}, "channels differ", 1, None),
    ("conv_transpose2d", [T("f32", 1, 4, 5, 5), T("f32", 4, 2, 3, 3)], {"groups": 3}, "groups = 3 must divide",
     None, "groups"),
    ("conv_transpose2d", [T("f32", 1, 4, 5, 5), T("f32", 4, 2, 3, 3)], {"stride": 2, "output_padding": 2},
     "output_padding = 2 must be smaller than the stride", None, "output_padding"),
    ("conv_transpose2d", [T("f32", 1, 4, 1, 1), T("f32", 4, 2, 1, 1)], {"padding": 1}, "leaves no output", None,
     "padding"),
    ("instancenorm", [T("f32", 4, 8)], {}, "x must be at least 3-D [N, C, ...]", 0, None),
    ("cumsum", [T("f32", 4, 8)], {"axis": 2}, "axis = 2 is out of range", None, "axis"),
    ("gather_nd", [T("f32", 3, 4), T("f32", 2, 1)], {}, "indices must be an integer tensor", 1, None),
    ("gather_nd", [T("f32", 3, 4), T("i64", 2, 3)], {}, "the index tuples' length 3", 1, None),
    ("gather_nd", [T("f32", 3, 4), T("i64", 2, 1)], {"batch_dims": 1}, "batch_dims = 1 must count leading axes",
     None, "batch_dims"),
    ("scatter_elements", [T("f32", 3, 4), T("i64", 3, 4), T("f32", 3, 2)], {}, "must have one shape", 2, None),
    ("scatter_elements", [T("bool", 3, 4), T("i64", 3, 4), T("bool", 3, 4)], {"reduction": "add"},
     "data must be a numeric tensor", 0, None),
    ("scatter_elements", [T("f32", 3, 4), T("i64", 9, 5), T("f32", 9, 5)], {}, "along the axes other than axis = 0",
     1, None),
]


@pytest.mark.parametrize("op, args, attrs, fragment, arg, attr", ERRORS,
                         ids=[f"{e[0]}-{i}" for i, e in enumerate(ERRORS)])
def test_errors(op, args, attrs, fragment, arg, attr):
    with pytest.raises(OpError) as info:
        infer(op, args, attrs)
    err = info.value
    assert fragment in str(err)
    assert str(err).startswith(f"{op}: ")
    assert (err.arg, err.attr) == (arg, attr)
    assert err.span is None


def test_every_op_has_an_error_case():
    assert {e[0] for e in ERRORS} == set(OPS)


def test_unknown_op_suggests():
    with pytest.raises(OpError, match="unknown op 'matmull'") as info:
        infer("matmull", [], {})
    assert info.value.hint == "did you mean 'matmul'?"
    assert isinstance(info.value, DslError) and info.value.exit_code == 2
    with pytest.raises(OpError) as info:
        infer("zzzz", [], {})
    assert info.value.hint and "docs/ops.md" in info.value.hint


def test_unknown_attribute_suggests():
    with pytest.raises(OpError) as info:
        infer("conv2d", [T("f32", 1, 3, 8, 8), T("f32", 4, 3, 3, 3)], {"strid": 2})
    assert info.value.hint == "did you mean 'stride'?"
    with pytest.raises(OpError) as info:
        infer("reduce", [T("f32", 3)], {"kind": "maxx"})
    assert info.value.hint == "did you mean 'max'?"


def test_errors_are_deterministic():
    def msg():
        with pytest.raises(OpError) as info:
            infer("conv2d", [T("f32", 1, 3, 8, 8), T("f32", 4, 3, 3, 3)], {"zz": 1, "aa": 2})
        return str(info.value)
    assert msg() == msg() and "'aa'" in msg()  # attributes are checked in name order


@pytest.mark.parametrize("op, args, attrs, shape, flops, read, written", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_resolved_attributes_infer_the_same_call(op, args, attrs, shape, flops, read, written):
    # the split rewrites calls from their resolved attributes, optional ones left out as None
    info = infer(op, args, attrs)
    again = infer(op, args, dict(info.attrs))
    assert again == info
