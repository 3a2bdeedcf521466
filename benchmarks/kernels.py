"""Each Numba kernel against its NumPy reference, on the same inputs at realistic sizes.

Both paths go through the registry (``run_kernel`` / ``reference``), so both
pay the same argument checks. Every case is called once untimed first (Numba
compiles or loads its cache there), then timed ``--repeats`` times; the table
shows medians and the ratio numba / numpy (below 1: the Numba kernel is faster).

    python benchmarks/kernels.py [--repeats 5] [--only SUBSTRING] [--scale 1.0]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from mapper.kernels import conv, linalg
from mapper.kernels._jit import num_threads
from mapper.kernels.registry import make_csr, make_ids, make_tensor, reference, run_kernel, tolerance


def _cases(s: float) -> list[tuple[str, str, Callable[[np.random.Generator], list], dict, Any]]:
    """(label, op, make inputs, attrs, numba override or None); ``s`` scales the big sizes."""
    def n(x: int) -> int:
        return max(1, int(x * s))

    def t(dtype, *shape, **kw):
        return lambda r: make_tensor(dtype, shape, r, **kw)

    def many(*makers):
        return lambda r: [m(r) for m in makers]

    conv_attrs = {"stride": 1, "padding": 1, "groups": 1}
    return [
        ("matmul f32 1024^3 (BLAS)", "matmul", many(t("f32", 1024, 1024), t("f32", 1024, 1024)), {}, None),
        ("matmul f32 512^3 (numba direct)", "matmul", many(t("f32", 512, 512), t("f32", 512, 512)), {},
         lambda a, b: linalg.matmul(a, b, method="direct")),
        ("conv2d f32 ResNet-50 conv3 [8,128,28,28]*[128,128,3,3] (im2col)", "conv2d",
         many(t("f32", n(8), 128, 28, 28), t("f32", 128, 128, 3, 3)), conv_attrs, None),
        ("conv2d same layer, numba direct", "conv2d", many(t("f32", n(8), 128, 28, 28), t("f32", 128, 128, 3, 3)),
         conv_attrs, lambda x, w: conv.conv2d(x, w, stride=(1, 1), padding=(1, 1), groups=1, method="direct")),
        ("conv2d f32 depthwise [8,256,28,28] 3x3 g=256", "conv2d",
         many(t("f32", n(8), 256, 28, 28), t("f32", 256, 1, 3, 3)), {"padding": 1, "groups": 256}, None),
        ("conv2d f32 ResNet-50 1x1 [8,256,56,56]*[64,256,1,1]", "conv2d",
         many(t("f32", n(8), 256, 56, 56), t("f32", 64, 256, 1, 1)), {"stride": 1, "padding": 0, "groups": 1}, None),
        ("maxpool f32 ResNet stem [8,64,112,112] k3 s2 p1", "maxpool", many(t("f32", n(8), 64, 112, 112)),
         {"kernel": 3, "stride": 2, "padding": 1}, None),
        ("avgpool f32 [8,64,112,112] k3 s2 p1", "avgpool", many(t("f32", n(8), 64, 112, 112)),
         {"kernel": 3, "stride": 2, "padding": 1}, None),
        ("batchnorm f32 [8,256,56,56]", "batchnorm", many(t("f32", n(8), 256, 56, 56)), {}, None),
        ("relu f32 16M", "relu", many(t("f32", n(1 << 24))), {}, None),
        ("gelu f32 16M", "gelu", many(t("f32", n(1 << 24))), {}, None),
        ("softmax f32 [4096,1024] axis -1", "softmax", many(t("f32", n(4096), 1024)), {}, None),
        ("layernorm f32 [4096,1024]", "layernorm", many(t("f32", n(4096), 1024)), {}, None),
        ("add f32 [4096,1024] + [1024]", "add", many(t("f32", n(4096), 1024), t("f32", 1024)), {}, None),
        ("mul f64 [2048,2048] * [2048,2048]", "mul", many(t("f64", n(2048), 2048), t("f64", n(2048), 2048)), {}, None),
        ("attention f32 BERT-base qkv [8*128, 3*768] h12", "attention", many(t("f32", n(8) * 128, 3 * 768)),
         {"heads": 12, "seq": 128}, None),
        ("attention f32 GPT-2 causal [4*256, 3*768] h12", "attention", many(t("f32", n(4) * 256, 3 * 768)),
         {"heads": 12, "seq": 256, "causal": 1}, None),
        ("embedding f32 ids[8,512] table[30522,768]", "embedding",
         lambda r: [make_ids((n(8), 512), 30522, r), make_tensor("f32", (30522, 768), r)], {}, None),
        ("transpose f32 [4096,4096]", "transpose", many(t("f32", n(4096), 4096)), {}, None),
        ("concat f32 2x[2048,2048] axis 1", "concat", many(t("f32", n(2048), 2048), t("f32", n(2048), 2048)),
         {"axis": 1}, None),
        ("split f32 [4096,4096] 4 parts axis 1", "split", many(t("f32", n(4096), 4096)),
         {"parts": 4, "index": 1, "axis": 1}, None),
        ("stencil f64 2048^2 5-point x10", "stencil", many(t("f64", n(2048), 2048)), {"points": 5, "steps": 10}, None),
        ("stencil f64 2048^2 9-point x10", "stencil", many(t("f64", n(2048), 2048)), {"points": 9, "steps": 10}, None),
        ("stencil f64 256^3 7-point x4", "stencil", many(t("f64", n(256), 256, 256)), {"points": 7, "steps": 4}, None),
        ("spmv f64 1M rows, 5 nnz/row", "spmv",
         lambda r: [make_csr((n(1 << 20), n(1 << 20)), 5 * n(1 << 20), "f64", r), make_tensor("f64", (n(1 << 20),), r)],
         {}, None),
        ("fft c128 2^20 (one row, parallel stages)", "fft", many(t("c128", n(1 << 20))), {}, None),
        ("fft c64 [1024, 1024] (rows in parallel)", "fft", many(t("c64", n(1024), 1024)), {}, None),
        ("ifft c128 [256, 4096]", "ifft", many(t("c128", n(256), 4096)), {}, None),
        ("fft c128 [64, 1000] (numpy.fft fallback)", "fft", many(t("c128", 64, 1000)), {}, None),
        ("dot f64 16M", "dot", many(t("f64", n(1 << 24)), t("f64", n(1 << 24))), {}, None),
        ("axpy f64 16M", "axpy", many(t("f64", n(1 << 24)), t("f64", n(1 << 24))), {"alpha": 2.0}, None),
        ("reduce sum f64 16M", "reduce", many(t("f64", n(1 << 24))), {"kind": "sum"}, None),
        ("reduce max f32 [4096,4096] axis 0", "reduce", many(t("f32", n(4096), 4096)), {"kind": "max", "axis": 0},
         None),
        ("elementwise exp f32 16M", "elementwise", many(t("f32", n(1 << 24))), {"fn": "exp"}, None),
        ("elementwise sigmoid f64 8M", "elementwise", many(t("f64", n(1 << 23))), {"fn": "sigmoid"}, None),
        ("elementwise hardswish f32 16M", "elementwise", many(t("f32", n(1 << 24))), {"fn": "hardswish"}, None),
        ("conv_transpose2d f32 U-Net up [8,128,28,28]*[128,64,2,2] s2", "conv_transpose2d",
         many(t("f32", n(8), 128, 28, 28), t("f32", 128, 64, 2, 2)), {"stride": 2}, None),
        ("instancenorm f32 [8,256,56,56]", "instancenorm", many(t("f32", n(8), 256, 56, 56)), {}, None),
        ("cumsum f32 [4096,1024] axis 1", "cumsum", many(t("f32", n(4096), 1024)), {"axis": 1}, None),
        ("gather_nd f32 [8,512,768] rows [8,128,1] batch_dims 1", "gather_nd",
         lambda r: [make_tensor("f32", (n(8), 512, 768), r), make_ids((n(8), 128, 1), 512, r)], {"batch_dims": 1},
         None),
        ("scatter_elements add f32 1M messages into [65536,16]", "scatter_elements",
         lambda r: [np.zeros((n(65536), 16), np.float32), make_ids((n(1 << 16), 16), n(65536), r),
                    make_tensor("f32", (n(1 << 16), 16), r)], {"axis": 0, "reduction": "add"}, None),
    ]


def _median_time(fn: Callable[[], Any], repeats: int) -> tuple[Any, float]:
    out = fn()  # warm-up: compile or load from the cache
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return out, statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", default="", help="run the cases whose label contains this")
    ap.add_argument("--scale", type=float, default=1.0, help="scale the large dimensions (e.g. 0.1 for a smoke run)")
    args = ap.parse_args(argv)
    print(f"numba threads: {num_threads()}; median of {args.repeats} runs after one warm-up call")
    head = f"{'case':<62} {'numba ms':>10} {'numpy ms':>10} {'ratio':>7}  check"
    print(head)
    print("-" * len(head))
    ratios = []
    for label, op, make, attrs, override in _cases(args.scale):
        if args.only not in label:
            continue
        inputs = make(np.random.default_rng(0))
        numba_fn = ((lambda f=override, x=inputs: f(*x)) if override
                    else (lambda o=op, x=inputs, a=attrs: run_kernel(o, x, a)))
        got, t_nb = _median_time(numba_fn, args.repeats)
        want, t_np = _median_time(lambda o=op, x=inputs, a=attrs: reference(o, x, a), args.repeats)
        rtol, atol = tolerance(want.dtype)
        scale = max(1.0, float(np.abs(want).max())) if want.size else 1.0
        ok = np.allclose(got, want, rtol=rtol, atol=atol * scale, equal_nan=True)
        ratios.append(t_nb / t_np)
        print(f"{label:<62} {t_nb * 1e3:10.2f} {t_np * 1e3:10.2f} {t_nb / t_np:7.2f}  {'ok' if ok else 'MISMATCH'}",
              flush=True)
    if ratios:
        geo = float(np.exp(np.mean(np.log(ratios))))
        print(f"geometric mean ratio numba/numpy over {len(ratios)} cases: {geo:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
