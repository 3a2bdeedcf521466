"""Numba kernels against their NumPy references, across dtypes and odd shapes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mapper.kernels import attention as attention_mod
from mapper.kernels import conv as conv_mod
from mapper.kernels import fft as fft_mod
from mapper.kernels import linalg
from mapper.kernels import reduce as reduce_mod
from mapper.kernels import stencil as stencil_mod
from mapper.kernels.registry import make_csr, make_ids, make_tensor, reference, run_kernel, tolerance


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def assert_close(out: np.ndarray, exp: np.ndarray, dtype: str | None = None) -> None:
    assert out.shape == exp.shape, (out.shape, exp.shape)
    assert out.dtype == exp.dtype, (out.dtype, exp.dtype)
    rtol, atol = tolerance(dtype or exp.dtype)
    np.testing.assert_allclose(out, exp, rtol=rtol, atol=atol, equal_nan=True)


def check(op: str, inputs: list, attrs: dict | None = None, dtype: str | None = None) -> np.ndarray:
    attrs = attrs or {}
    out = run_kernel(op, inputs, attrs)
    assert_close(out, reference(op, inputs, attrs), dtype)
    return out


# -- dense linear algebra -------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["f16", "f32", "f64", "c128", "i64"])
@pytest.mark.parametrize("sa,sb", [
    ((5, 7), (7, 3)), ((1, 1), (1, 1)), ((2, 3, 33, 40), (40, 35)), ((3, 4, 5), (3, 5, 2)),
    ((1, 4, 5), (3, 5, 2)), ((2, 1, 3, 4), (5, 4, 6)),
])
def test_matmul(dtype, sa, sb):
    r = rng()
    check("matmul", [make_tensor(dtype, sa, r), make_tensor(dtype, sb, r)], dtype=dtype)


@pytest.mark.parametrize("method", ["direct", "blas"])
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_matmul_both_paths(method, dtype):
    r = rng(1)
    a, b = make_tensor(dtype, (2, 37, 19), r), make_tensor(dtype, (2, 19, 23), r)
    assert_close(linalg.matmul(a, b, method=method), np.matmul(a, b))


@pytest.mark.parametrize("dtype", ["f16", "f32", "c128", "i64"])
@pytest.mark.parametrize("n", [1, 17, 10001])
def test_dot(dtype, n):
    r = rng(n)
    out = check("dot", [make_tensor(dtype, (n,), r), make_tensor(dtype, (n,), r)], dtype=dtype)
    assert out.shape == ()


@pytest.mark.parametrize("dtype", ["f16", "f32", "c128", "i64"])
def test_axpy_both_forms(dtype):
    r = rng(2)
    x, y = make_tensor(dtype, (37,), r), make_tensor(dtype, (37,), r)
    alpha = 3 if dtype == "i64" else 2.5
    out = check("axpy", [x, y], {"alpha": alpha}, dtype)
    c = np.complex128
    np.testing.assert_allclose(out.astype(c), alpha * x.astype(c) + y.astype(c), rtol=4e-3, atol=4e-3)
    a = make_tensor(dtype, (), r)
    check("axpy", [a, x, y], {}, dtype)


# -- DNN ops -----------------------------------------------------------------------------
CONV_CASES = [  # x shape, w shape, stride, padding, groups
    ((2, 3, 9, 11), (4, 3, 3, 3), 1, 0, 1),
    ((1, 4, 8, 7), (6, 2, 3, 2), 2, 1, 2),
    ((2, 5, 7, 7), (5, 1, 3, 3), 1, 1, 5),        # depthwise
    ((1, 3, 6, 5), (2, 3, 1, 1), 1, 0, 1),        # 1x1
    ((1, 2, 5, 6), (3, 2, 5, 4), [2, 1], [2, 1], 1),
    ((1, 1, 1, 1), (1, 1, 1, 1), 3, 0, 1),
    ((2, 32, 10, 9), (32, 16, 3, 3), 2, 1, 2),    # big enough for im2col
    ((1, 2, 6, 6), (10, 1, 3, 3), 1, 1, 2),       # 5 filters per group: a block of 4 and a tail of 1
    ((1, 3, 7, 9), (4, 3, 3, 3), [1, 2], [1, 2], 1),   # im2col's stride-2 row loop, padded edges
    ((1, 2, 8, 13), (3, 2, 2, 3), [2, 3], [0, 1], 1),  # its general-stride row loop
]


@pytest.mark.parametrize("xs,ws,stride,pad,groups", CONV_CASES)
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_conv2d(xs, ws, stride, pad, groups, dtype):
    r = rng(3)
    x, w = make_tensor(dtype, xs, r), make_tensor(dtype, ws, r)
    check("conv2d", [x, w], {"stride": stride, "padding": pad, "groups": groups}, dtype)


@pytest.mark.parametrize("method", ["direct", "im2col"])
@pytest.mark.parametrize("xs,ws,stride,pad,groups", CONV_CASES)
def test_conv2d_both_paths(method, xs, ws, stride, pad, groups):
    r = rng(4)
    x, w = make_tensor("f64", xs, r), make_tensor("f64", ws, r)
    st = stride if isinstance(stride, list) else [stride] * 2
    pd = pad if isinstance(pad, list) else [pad] * 2
    got = conv_mod.conv2d(x, w, stride=tuple(st), padding=tuple(pd), groups=groups, method=method)
    assert_close(got, reference("conv2d", [x, w], {"stride": stride, "padding": pad, "groups": groups}))


@pytest.mark.parametrize("xs,ws,stride,groups", [
    ((3, 6, 7, 9), (4, 6, 1, 1), (1, 1), 1),
    ((3, 8, 7, 9), (6, 4, 1, 1), (2, 3), 2),
    ((2, 32, 11, 10), (48, 32, 1, 1), (2, 2), 1),   # big enough that method=None picks im2col
    ((1, 4, 5, 5), (4, 1, 1, 1), (1, 1), 4),
])
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_conv2d_1x1_gemm_skips_im2col(monkeypatch, xs, ws, stride, groups, dtype):
    """A 1x1 filter without padding runs the GEMM on (a strided copy of) the
    input: the im2col kernel is never called, and the result matches the
    direct loop and the reference."""
    r = rng(7)
    x, w = make_tensor(dtype, xs, r), make_tensor(dtype, ws, r)
    attrs = {"stride": list(stride), "padding": 0, "groups": groups}
    direct = conv_mod.conv2d(x, w, stride=stride, padding=(0, 0), groups=groups, method="direct")

    def no_im2col(*_):
        raise AssertionError("im2col called for a 1x1 filter without padding")

    monkeypatch.setattr(conv_mod, "_im2col", no_im2col)
    got = conv_mod.conv2d(x, w, stride=stride, padding=(0, 0), groups=groups, method="im2col")
    assert_close(got, reference("conv2d", [x, w], attrs), dtype)
    assert_close(got, direct, dtype)
    if ws[1] >= conv_mod.IM2COL_MIN and ws[0] // groups >= conv_mod.IM2COL_MIN:  # the default path is im2col
        assert np.array_equal(run_kernel("conv2d", [x, w], attrs), got)


def test_conv2d_1x1_with_padding_still_lowers_through_im2col(monkeypatch):
    r = rng(8)
    x, w = make_tensor("f64", (2, 3, 5, 6), r), make_tensor("f64", (4, 3, 1, 1), r)
    calls = []
    real = conv_mod._im2col
    monkeypatch.setattr(conv_mod, "_im2col", lambda *a: calls.append(1) or real(*a))
    got = conv_mod.conv2d(x, w, stride=(2, 1), padding=(1, 0), groups=1, method="im2col")
    assert calls
    assert_close(got, reference("conv2d", [x, w], {"stride": [2, 1], "padding": [1, 0], "groups": 1}))


def test_conv2d_reference_matches_naive_loops():
    r = rng(5)
    x, w = make_tensor("f64", (1, 2, 5, 4), r), make_tensor("f64", (2, 1, 3, 2), r)
    got = reference("conv2d", [x, w], {"stride": 2, "padding": 1, "groups": 2})
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((1, 2, 3, 3))
    for k in range(2):
        for i in range(3):
            for j in range(3):
                want[0, k, i, j] = np.sum(xp[0, k, 2 * i:2 * i + 3, 2 * j:2 * j + 2] * w[k, 0])
    np.testing.assert_allclose(got, want)


def test_conv2d_f16():
    r = rng(6)
    x, w = make_tensor("f16", (1, 3, 6, 6), r), make_tensor("f16", (2, 3, 3, 3), r)
    out = check("conv2d", [x, w], {"padding": 1}, "f16")
    assert out.dtype == np.float16


@pytest.mark.parametrize("op", ["maxpool", "avgpool"])
@pytest.mark.parametrize("shape,kernel,stride,pad", [
    ((2, 3, 7, 9), 2, None, 0), ((1, 2, 7, 5), 3, 2, 1), ((1, 1, 4, 4), 3, 1, 1),
    ((2, 2, 5, 5), [3, 2], [1, 2], [1, 0]), ((1, 1, 1, 1), 1, None, 0),
    ((1, 2, 10, 11), 3, None, 1),  # stride 3: the general row loop
    ((2, 3, 7, 7), 7, None, 0), ((1, 2, 9, 26), 3, 4, 1),  # global pooling; rows shorter than SHORT_ROW
])
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_pool(op, shape, kernel, stride, pad, dtype):
    attrs = {"kernel": kernel, "padding": pad}
    if stride is not None:
        attrs["stride"] = stride
    check(op, [make_tensor(dtype, shape, rng(7))], attrs, dtype)


def test_pool_padding_semantics():
    x = np.arange(1, 10, dtype=np.float64).reshape(1, 1, 3, 3) - 20.0  # all negative
    mx = run_kernel("maxpool", [x], {"kernel": 3, "stride": 1, "padding": 1})
    assert mx[0, 0, 0, 0] == -15.0  # padding (zeros) never wins
    av = run_kernel("avgpool", [x], {"kernel": 3, "stride": 1, "padding": 1})
    assert av[0, 0, 0, 0] == np.mean([-19, -18, -16, -15])  # only valid elements count


def test_maxpool_int_and_nan():
    check("maxpool", [make_tensor("i64", (1, 2, 5, 6), rng(8))], {"kernel": 2}, "i64")
    x = np.zeros((1, 1, 4, 4))
    x[0, 0, 1, 1] = np.nan
    out = run_kernel("maxpool", [x], {"kernel": 2})
    assert np.isnan(out[0, 0, 0, 0]) and not np.isnan(out[0, 0, 1, 1])
    x[0, 0, 0, 3] = np.nan  # a NaN then larger values in the same window: still NaN
    x[0, 0, 1, 2] = x[0, 0, 0, 2] = 5.0
    out = run_kernel("maxpool", [x], {"kernel": 2})
    assert np.isnan(out[0, 0, 0, 1]) and out[0, 0, 1, 1] == 0.0


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5), (2, 4, 3, 5), (1, 1, 1, 1)])
@pytest.mark.parametrize("dtype", ["f16", "f32", "f64"])
def test_batchnorm(shape, dtype):
    x = make_tensor(dtype, shape, rng(9))
    out = check("batchnorm", [x], {"eps": 1e-5}, dtype).astype(np.float64)
    if np.prod(shape) // shape[1] > 1:
        axes = (0,) + tuple(range(2, len(shape)))
        np.testing.assert_allclose(out.mean(axis=axes), 0, atol=1e-2)
        np.testing.assert_allclose(out.var(axis=axes), 1, atol=2e-2)


@pytest.mark.parametrize("op", ["relu", "gelu"])
@pytest.mark.parametrize("dtype", ["f16", "f32", "f64"])
def test_activations(op, dtype):
    check(op, [make_tensor(dtype, (3, 1, 7), rng(10))], {}, dtype)


def test_relu_int_and_gelu_values():
    check("relu", [make_tensor("i64", (11,), rng(11))], {}, "i64")
    g = run_kernel("gelu", [np.array([-3.0, 0.0, 1.0, 3.0])], {})
    np.testing.assert_allclose(g, [-0.0036373920817729943, 0.0, 0.8411919906082768, 2.99636260791823])


@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("dtype", ["f16", "f32", "f64"])
def test_softmax(axis, dtype):
    out = check("softmax", [make_tensor(dtype, (3, 5, 4), rng(12))], {"axis": axis}, dtype)
    np.testing.assert_allclose(out.astype(np.float64).sum(axis=axis), 1, rtol=4e-3)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("col", [0, 7, 20])
def test_softmax_row_with_a_nan_is_nan(dtype, col):
    """The row maximum (eight running maxima, ``approx.row_max``) may skip a
    NaN; the row still comes out NaN, as NumPy's does, and the others exact."""
    x = make_tensor(dtype, (3, 21), rng(20))
    x[1, col] = np.nan
    out = check("softmax", [x], {"axis": -1}, dtype)
    assert np.isnan(out[1]).all() and not np.isnan(out[[0, 2]]).any()


@pytest.mark.parametrize("shape", [(7,), (3, 5, 9), (2, 1)])
@pytest.mark.parametrize("dtype", ["f16", "f32", "f64"])
def test_layernorm(shape, dtype):
    check("layernorm", [make_tensor(dtype, shape, rng(13))], {"eps": 1e-3}, dtype)


@pytest.mark.parametrize("form", ["qkv", "separate"])
@pytest.mark.parametrize("heads,seq,t,d,causal", [(1, 4, 4, 8, 0), (3, 5, 10, 12, 1), (2, 3, 9, 4, 0)])
@pytest.mark.parametrize("dtype", ["f16", "f32", "f64"])
def test_attention(form, heads, seq, t, d, causal, dtype):
    r = rng(14)
    xs = [make_tensor(dtype, (t, 3 * d), r)] if form == "qkv" else [make_tensor(dtype, (t, d), r) for _ in range(3)]
    check("attention", xs, {"heads": heads, "seq": seq, "causal": causal}, dtype)


@pytest.mark.parametrize("method", ["direct", "blas"])
@pytest.mark.parametrize("heads,seq,t,d,causal", [(2, 40, 80, 24, 1), (3, 33, 66, 18, 0), (1, 7, 21, 5, 1)])
@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("block_bytes", [None, 1000, 13000])
def test_attention_both_paths(method, heads, seq, t, d, causal, dtype, block_bytes, monkeypatch):
    """Each path against the reference, on q, k, v slices of one qkv matrix
    (strided, as the BLAS path takes them), with score blocks of a few rows
    (``block_bytes`` 1000: the causal blocks stop at their last query's key)
    or of fewer heads than a work item has (13000)."""
    if block_bytes is not None:
        monkeypatch.setattr(attention_mod, "SCORE_BLOCK_BYTES", block_bytes)
    monkeypatch.setattr(attention_mod, "blas_threads", lambda: 1)  # the executor's setting: worker threads
    qkv = make_tensor(dtype, (t, 3 * d), rng(17))
    attrs = {"heads": heads, "seq": seq, "causal": causal}
    got = attention_mod.attention(qkv, heads=heads, seq=seq, causal=bool(causal), method=method)
    assert_close(got, reference("attention", [qkv], attrs), dtype)


@pytest.mark.parametrize("sequences,heads,workers", [(1, 12, 2), (3, 4, 2), (8, 12, 2), (2, 3, 5), (1, 1, 4)])
def test_attention_work_items_cover_every_head_once_evenly(sequences, heads, workers):
    shares = attention_mod.work_items(sequences, heads, workers)
    assert len(shares) == workers
    units = sorted((b, h) for share in shares for b, h0, h1 in share for h in range(h0, h1))
    assert units == [(b, h) for b in range(sequences) for h in range(heads)]
    loads = [sum(h1 - h0 for _, h0, h1 in share) for share in shares]
    assert max(loads) - min(loads) <= max(h1 - h0 for share in shares for _, h0, h1 in share)


def test_attention_score_block_keeps_whole_sequences_while_they_fit(monkeypatch):
    monkeypatch.setattr(attention_mod, "SCORE_BLOCK_BYTES", 4 * 2**20)
    assert attention_mod.score_block(12, 128, 4) == (12, 128)  # 64 KiB a head
    assert attention_mod.score_block(12, 512, 4) == (4, 512)  # 1 MiB a head
    assert attention_mod.score_block(6, 2048, 4) == (1, 512)  # 16 MiB a head: rows in blocks
    assert attention_mod.score_block(3, 4096, 8) == (1, 128)


@pytest.mark.parametrize("blas,workers", [(1, 5), (2, 1), (None, 5)])
def test_attention_blas_workers_follow_the_blas_pool(blas, workers, monkeypatch):
    """With BLAS on one thread (as the executor keeps it) or unknown, the
    heads go to Numba's thread count of workers, here 5 (more than this
    machine's cores); with a larger BLAS pool the calling thread does all."""
    import threading

    monkeypatch.setattr(attention_mod, "num_threads", lambda: 5)
    monkeypatch.setattr(attention_mod, "blas_threads", lambda: blas)
    calls, real = [], attention_mod._blas_items
    monkeypatch.setattr(attention_mod, "_blas_items", lambda *a: (calls.append(threading.get_ident()), real(*a)))
    qkv = make_tensor("f32", (3 * 32, 3 * 48), rng(19))
    attrs = {"heads": 4, "seq": 32, "causal": 1}
    got = attention_mod.attention(qkv, heads=4, seq=32, causal=True, method="blas")
    assert_close(got, reference("attention", [qkv], attrs), "f32")
    assert len(calls) == workers  # one share of the items each
    assert (len(set(calls)) > 1) == (workers > 1)  # the pool's threads (as many as cores) beside the caller


def test_attention_picks_blas_for_large_units(monkeypatch):
    x = make_tensor("f32", (64, 3 * 64), rng(18))
    calls = []
    real = attention_mod._attention_blas
    monkeypatch.setattr(attention_mod, "_attention_blas", lambda *a: (calls.append(a[4:]), real(*a)))
    attention_mod.attention(x, heads=2, seq=32, causal=True)  # 32 x 32 x 32 per GEMM: BLAS
    attention_mod.attention(x, heads=4, seq=16, causal=True)  # 16 x 16 x 16: direct
    assert calls == [(2, 32, True)]


def test_attention_causal_first_row_is_first_value():
    r = rng(15)
    q, k, v = (make_tensor("f64", (6, 4), r) for _ in range(3))
    out = run_kernel("attention", [q, k, v], {"heads": 2, "seq": 3, "causal": 1})
    np.testing.assert_allclose(out[[0, 3]], v[[0, 3]])  # a sequence's first query sees only itself


@pytest.mark.parametrize("ids_dtype", ["i32", "i64"])
@pytest.mark.parametrize("table_dtype", ["f16", "f32", "c128"])
@pytest.mark.parametrize("shape", [(2, 3), (), (5,)])
def test_embedding(ids_dtype, table_dtype, shape):
    r = rng(16)
    check("embedding", [make_ids(shape, 9, r, ids_dtype), make_tensor(table_dtype, (9, 6), r)], {}, table_dtype)


# -- elementwise and broadcasting ------------------------------------------------------------
BROADCAST = [((3, 1, 5), (4, 1)), ((), (2, 3)), ((2, 3), (2, 3)), ((1,), (6,)), ((5, 1), (1,)),
             ((2, 1, 3, 1, 2, 1, 2), (1, 2, 1, 3, 1, 2, 1))]


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
@pytest.mark.parametrize("dtype", ["f16", "f32", "f64", "c128", "i64"])
@pytest.mark.parametrize("sa,sb", BROADCAST)
def test_binary(op, dtype, sa, sb):
    r = rng(17)
    check(op, [make_tensor(dtype, sa, r), make_tensor(dtype, sb, r)], {}, dtype)


def test_integer_div_is_floor_with_zero_divisor():
    a = np.array([7, -7, 5, 3], dtype=np.int64)
    b = np.array([2, 2, 0, -2], dtype=np.int64)
    out = check("div", [a, b], {}, "i64")
    assert out.tolist() == [3, -4, 0, -2]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3), st.booleans(), st.booleans()), min_size=0, max_size=6))
def test_binary_broadcast_property(dims):
    sa = tuple(1 if drop else n for n, drop, _ in dims)
    sb = tuple(1 if drop else n for n, _, drop in dims)[1:]
    r = rng(18)
    check("mul", [make_tensor("f64", sa, r), make_tensor("f64", sb, r)], {}, "f64")


FNS = ["exp", "log", "sqrt", "tanh", "neg", "abs", "square", "sigmoid", "scale"]


@pytest.mark.parametrize("fn", FNS)
@pytest.mark.parametrize("dtype", ["f16", "f32", "f64", "c128"])
def test_elementwise(fn, dtype):
    x = make_tensor(dtype, (4, 9), rng(19), positive=fn in ("log", "sqrt"))
    check("elementwise", [x], {"fn": fn, "alpha": -1.5} if fn == "scale" else {"fn": fn}, dtype)


def test_sigmoid_is_stable():
    out = run_kernel("elementwise", [np.array([-1000.0, 0.0, 1000.0])], {"fn": "sigmoid"})
    assert out.tolist() == [0.0, 0.5, 1.0]


# -- data movement --------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["bool", "i64", "f32", "c128"])
def test_layout_ops(dtype):
    r = rng(20)
    parts = [make_tensor(dtype, (2, n, 3), r) for n in (1, 4, 2)]
    check("concat", parts, {"axis": 1}, dtype)
    check("concat", parts[:1], {}, dtype)
    x = make_tensor(dtype, (6, 5, 4), r)
    check("split", [x], {"parts": 3, "index": 2}, dtype)
    check("split", [x], {"parts": 2, "index": 1, "axis": -1}, dtype)
    check("reshape", [x], {"shape": [3, -1, 4]}, dtype)
    check("transpose", [x], {}, dtype)
    check("transpose", [x], {"perm": [1, 0, 2]}, dtype)


@settings(max_examples=20, deadline=None)
@given(st.permutations(range(6)))
def test_transpose_rank6_property(perm):
    x = make_tensor("f32", (2, 3, 1, 2, 3, 2), rng(21))
    check("transpose", [x], {"perm": list(perm)}, "f32")


# -- scientific kernels -----------------------------------------------------------------
@pytest.mark.parametrize("shape,points", [((7, 9), 5), ((7, 9), 9), ((5, 6, 7), 7), ((2, 5), 5), ((3, 3), 9)])
@pytest.mark.parametrize("steps", [0, 1, 3])
@pytest.mark.parametrize("dtype", ["f16", "f32", "f64"])
def test_stencil(shape, points, steps, dtype):
    check("stencil", [make_tensor(dtype, shape, rng(22))], {"points": points, "steps": steps}, dtype)


def test_stencil_coefficients_and_boundary():
    x = np.zeros((3, 3))
    x[1, 1], x[0, 1], x[1, 0], x[2, 2] = 5.0, 10.0, 20.0, 9.0
    five = run_kernel("stencil", [x], {"points": 5})
    nine = run_kernel("stencil", [x], {"points": 9})
    assert five[1, 1] == (5 + 10 + 20) / 5 and nine[1, 1] == (5 + 10 + 20 + 9) / 9
    mask = np.ones((3, 3), dtype=bool)
    mask[1, 1] = False
    assert (five[mask] == x[mask]).all() and (nine[mask] == x[mask]).all()
    y = np.zeros((3, 3, 3))
    y[1, 1, 1], y[0, 1, 1], y[1, 1, 2], y[0, 0, 0] = 7.0, 14.0, 21.0, 99.0
    seven = run_kernel("stencil", [y], {"points": 7})
    assert seven[1, 1, 1] == (7 + 14 + 21) / 7 and seven[0, 0, 0] == 99.0


@pytest.mark.parametrize("shape,points", [((9, 11), 5), ((9, 11), 9), ((6, 7, 8), 7)])
@pytest.mark.parametrize("steps", [1, 2, 3, 4])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_stencil_bit_identical_from_read_only_input(shape, points, steps, dtype):
    """Both parities of ``steps`` (the first sweep's destination flips), a
    read-only input left untouched, the result a fresh writable array."""
    x = rng(40).standard_normal(shape).astype(dtype)
    x.flags.writeable = False
    before = x.copy()
    got = stencil_mod.stencil(x, points=points, steps=steps)
    want = reference("stencil", [x], {"points": points, "steps": steps})
    assert got.dtype == x.dtype and np.array_equal(got, want)
    assert np.array_equal(x, before) and got.flags.writeable and not np.shares_memory(got, x)
    more = stencil_mod.stencil(x, points=points, steps=steps + 1)
    assert np.array_equal(more, reference("stencil", [x], {"points": points, "steps": steps + 1}))


def test_stencil_non_contiguous_input_and_tiny_grids():
    x = rng(41).standard_normal((10, 14))[:, ::2]  # a strided view
    got = stencil_mod.stencil(x, points=5, steps=3)
    assert np.array_equal(got, reference("stencil", [np.ascontiguousarray(x)], {"points": 5, "steps": 3}))
    for shape, steps in [((2, 6), 3), ((5, 6), 0)]:
        y = rng(42).standard_normal(shape)
        out = stencil_mod.stencil(y, points=5, steps=steps)
        assert np.array_equal(out, y) and not np.shares_memory(out, y)


@pytest.mark.parametrize("m,n,nnz", [(13, 11, 30), (20, 7, 5), (1, 1, 1), (6, 5, 30), (4, 3, 0)])
@pytest.mark.parametrize("dtype", ["f16", "f32", "c128"])
def test_spmv(m, n, nnz, dtype):
    r = rng(23)
    a = make_csr((m, n), nnz, dtype, r)
    x = make_tensor(dtype, (n,), r)
    out = check("spmv", [a, x], {}, dtype)
    rtol, atol = tolerance(dtype)
    np.testing.assert_allclose(out, a.to_dense() @ x, rtol=rtol, atol=atol)


@pytest.mark.parametrize("op", ["fft", "ifft"])
@pytest.mark.parametrize("shape", [(1,), (2,), (8,), (64,), (12,), (3, 4, 16), (2, 5, 3)])
@pytest.mark.parametrize("dtype", ["c64", "c128"])
def test_fft(op, shape, dtype):
    check(op, [make_tensor(dtype, shape, rng(24))], {}, dtype)


@pytest.mark.parametrize("method", ["rows", "wide"])
@pytest.mark.parametrize("dtype", ["c64", "c128"])
def test_fft_both_radix2_paths_and_roundtrip(method, dtype):
    x = make_tensor(dtype, (3, 1024), rng(25))
    y = fft_mod.fft(x, method=method)
    assert_close(y, np.fft.fft(x).astype(x.dtype), dtype="c64")  # magnitudes ~sqrt(N)
    assert_close(fft_mod.ifft(y, method=method), x, dtype)


@pytest.mark.parametrize("kind", ["sum", "max", "mean"])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("dtype", ["f16", "f32", "f64", "i64"])
def test_reduce(kind, axis, dtype):
    attrs = {"kind": kind} if axis is None else {"kind": kind, "axis": axis}
    out = check("reduce", [make_tensor(dtype, (3, 5, 4), rng(26))], attrs, dtype)
    assert out.ndim == (0 if axis is None else 2)


@pytest.mark.parametrize("kind", ["sum", "max", "mean"])
def test_reduce_long_rows_and_specials(kind):
    check("reduce", [make_tensor("f64", (10001,), rng(27))], {"kind": kind}, "f64")
    check("reduce", [make_tensor("f64", (2, 9000), rng(27))], {"kind": kind, "axis": 1}, "f64")
    check("reduce", [make_tensor("i64", (10001,), rng(27))], {"kind": kind}, "i64")
    if kind != "max":
        check("reduce", [make_tensor("c128", (7, 3), rng(27))], {"kind": kind, "axis": 0}, "c128")


def test_reduce_max_nan_and_int_mean_floor():
    x = np.arange(9000, dtype=np.float64)
    x[5000] = np.nan
    assert np.isnan(run_kernel("reduce", [x], {"kind": "max"}))
    assert run_kernel("reduce", [np.array([-1, -2], dtype=np.int64)], {"kind": "mean"}) == -2


def _max_equal(x: np.ndarray, axis: int | None) -> None:
    got = reduce_mod.reduce(x, kind="max", axis=axis)
    want = np.max(x, axis=axis)
    assert got.dtype == x.dtype and got.shape == want.shape
    assert np.array_equal(got, want, equal_nan=x.dtype.kind == "f"), (axis, got, want)


# NaN or inf at: the first element of a 4096 block, inside the 64-lane loop, in a
# block's scalar tail, the very last element; rows of 9000 = two full blocks + 808.
MAX_SPECIAL_AT = [0, 4096, 4096 + 70, 8191, 8192 + 805, 8999]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("at", MAX_SPECIAL_AT)
def test_reduce_max_nan_anywhere_in_long_rows(dtype, at):
    x = rng(28).standard_normal((3, 9000)).astype(dtype)
    x[1, at] = np.nan  # only row 1 is NaN
    x[2, at] = np.inf
    _max_equal(x, 1)
    _max_equal(x, None)
    y = np.full((2, 9000), -np.inf, dtype=dtype)
    y[1, at] = -1.0
    _max_equal(y, 1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,axis", [((9000, 37), 0), ((5, 300, 3000), 1), ((20000, 3, 4), 1)])
def test_reduce_max_nan_per_column(dtype, shape, axis):
    """Only the columns holding a NaN become NaN; a NaN in the first reduced
    row, the last and in between; many small columns per parallel task."""
    x = rng(29).standard_normal(shape).astype(dtype)
    n = shape[axis]
    idx = [slice(None)] * len(shape)
    for j, col in [(0, 1), (n // 2, 2), (n - 1, shape[-1] - 1)]:
        idx[axis] = j
        x[tuple(idx)][..., col] = np.nan  # last axis is never the reduced one here
    idx[axis] = n // 3
    x[tuple(idx)][..., 0] = np.inf
    _max_equal(x, axis)
    assert np.isnan(reduce_mod.reduce(x, kind="max", axis=axis)[..., 1]).all()
    assert not np.isnan(reduce_mod.reduce(x, kind="max", axis=axis)[..., 0]).any()


@pytest.mark.parametrize("kind", ["sum", "mean"])
@pytest.mark.parametrize("dtype", ["f64", "i64"])
def test_reduce_middle_axis_in_column_chunks(kind, dtype):
    """Columns cut into several chunks per outer index (row slices of ragged
    length), and many outer indices with three columns each."""
    for shape in [(3, 40, 5003), (20000, 5, 3)]:
        check("reduce", [make_tensor(dtype, shape, rng(32))], {"kind": kind, "axis": 1}, dtype)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_reduce_max_integers_exact(dtype, axis):
    info = np.iinfo(dtype)
    x = rng(30).integers(info.min, info.max, size=(300, 700), dtype=dtype, endpoint=True)
    x[7, 650] = info.max
    _max_equal(x, axis)
    _max_equal(np.full((3, 500), info.min, dtype=dtype), axis)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 400), st.integers(1, 300), st.sampled_from([None, 0, 1]),
       st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from([np.nan, np.inf, -np.inf])), max_size=4))
def test_reduce_max_matches_numpy_property(m, n, axis, specials):
    x = rng(31).standard_normal((m, n))
    for pos, v in specials:
        x.flat[pos % x.size] = v
    _max_equal(x, axis)


# -- large enough to run on all threads, in several chunks per row -----------------------------
PARALLEL_CASES = [
    ("relu", [("f64", (300_000,))], {}),
    ("elementwise", [("f64", (300_000,))], {"fn": "tanh"}),
    ("add", [("f64", (600, 500)), ("f64", (500,))], {}),
    ("mul", [("f64", (300_000,)), ("f64", (300_000,))], {}),
    ("transpose", [("f32", (400, 300))], {}),
    ("concat", [("f32", (300, 200)), ("f32", (300, 300))], {"axis": 1}),
    ("dot", [("f32", (300_000,)), ("f32", (300_000,))], {}),
    ("axpy", [("f32", (300_000,)), ("f32", (300_000,))], {"alpha": 0.5}),
    ("reduce", [("f64", (300_000,))], {"kind": "sum"}),
    ("reduce", [("f64", (3, 100_000))], {"kind": "max", "axis": 0}),
    ("reduce", [("f64", (100_000, 3))], {"kind": "mean", "axis": 0}),
    ("reduce", [("i64", (50, 3000))], {"kind": "sum", "axis": 1}),
    ("stencil", [("f64", (300, 300))], {"points": 9, "steps": 2}),
    ("stencil", [("f64", (40, 50, 60))], {"points": 7, "steps": 2}),
    ("batchnorm", [("f64", (4, 8, 50, 50))], {}),
    ("softmax", [("f64", (300, 400))], {"axis": 0}),
    ("layernorm", [("f64", (300, 400))], {}),
    ("maxpool", [("f64", (2, 8, 64, 64))], {"kernel": 3, "stride": 2, "padding": 1}),
    ("conv2d", [("f64", (2, 3, 40, 40)), ("f64", (4, 3, 3, 3))], {"padding": 1}),
    ("attention", [("f64", (256, 96))], {"heads": 4, "seq": 64, "causal": 1}),
    ("fft", [("c128", (70, 1024))], {}),
    ("fft", [("c128", (8192,))], {}),
]


@pytest.mark.parametrize("op,specs,attrs", PARALLEL_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(PARALLEL_CASES)])
def test_large_inputs_on_all_threads(op, specs, attrs):
    r = rng(30)
    check(op, [make_tensor(d, s, r) for d, s in specs], attrs, specs[0][0])


def test_large_spmv_on_all_threads():
    r = rng(31)
    a = make_csr((100_000, 90_000), 500_000, "f32", r)
    check("spmv", [a, make_tensor("f32", (90_000,), r)], {}, "f32")


def test_float32_tanh_is_rational_and_close_to_libm():
    """float32 tanh and gelu use a branch-free rational tanh (vectorised):
    within 4e-7 of float64's tanh everywhere, exact at the special values."""
    from mapper.kernels.elementwise import elementwise, gelu

    x = np.linspace(-12.0, 12.0, 480001).astype(np.float32)
    exact = np.tanh(x.astype(np.float64))
    assert np.max(np.abs(elementwise(x, fn="tanh", alpha=1.0) - exact)) < 4e-7
    special = np.array([0.0, -0.0, 3e-4, -3e-4, 9.5, -9.5, np.inf, -np.inf, np.nan], dtype=np.float32)
    got = elementwise(special, fn="tanh", alpha=1.0)
    assert np.allclose(got, np.tanh(special), rtol=1e-6, atol=0.0, equal_nan=True)
    assert np.signbit(got[1]) and got[6] == 1.0 and got[7] == -1.0 and np.isnan(got[8])
    with np.errstate(invalid="ignore", over="ignore"):
        assert np.array_equal(gelu(special), reference("gelu", [special], {}), equal_nan=True)


def test_float32_exp_is_within_two_units_in_the_last_place():
    """float32 exp (elementwise, softmax, attention) has no libm call: within 2
    ulp for normal results, 0 below exp(-87.34), inf above exp(88.72), NaN kept."""
    from mapper.kernels.elementwise import elementwise

    x = np.concatenate([np.linspace(-100.0, 100.0, 400001), [88.72, 88.73, -87.33, -87.34]]).astype(np.float32)
    got = elementwise(x, fn="exp", alpha=1.0)
    with np.errstate(over="ignore"):
        exact = np.exp(x.astype(np.float64))
    normal = (exact >= np.finfo(np.float32).tiny) & (exact <= np.finfo(np.float32).max)
    assert np.all(np.abs(got[normal] - exact[normal]) <= 2 * 2.0**-24 * exact[normal])
    assert np.all(got[x < -87.34] == 0.0) and np.all(np.isinf(got[x > 88.73]))
    special = elementwise(np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], dtype=np.float32), fn="exp", alpha=1.0)
    assert np.isnan(special[0]) and special[1] == np.inf and special[2] == 0.0 and special[3] == special[4] == 1.0


# -- ops of exported models: transposed convolution, instance norm, running sums, hard-swish,
# -- gathers and scatters by index ----------------------------------------------------------
@pytest.mark.parametrize("dtype", ["f16", "f32", "f64"])
@pytest.mark.parametrize("xs,ws,stride,pad,opad,groups", [
    ((2, 4, 5, 6), (4, 3, 3, 3), 1, 0, 0, 1),
    ((1, 6, 4, 4), (6, 2, 3, 2), 2, 1, 1, 3),
    ((2, 2, 3, 3), (2, 5, 4, 4), [2, 3], [1, 0], [1, 2], 1),
    ((1, 32, 4, 4), (32, 16, 2, 2), 2, 0, 0, 1),  # a U-Net's 2x2/2 upsampling
])
def test_conv_transpose2d(xs, ws, stride, pad, opad, groups, dtype):
    r = rng(40)
    attrs = {"stride": stride, "padding": pad, "output_padding": opad, "groups": groups}
    check("conv_transpose2d", [make_tensor(dtype, xs, r), make_tensor(dtype, ws, r)], attrs, dtype)


def test_conv_transpose2d_is_the_adjoint_of_conv2d():
    """<conv2d(x, w), y> = <x, conv_transpose2d(y, w)> for the same stride and padding."""
    r = rng(41)
    x, w = make_tensor("f64", (2, 3, 9, 8), r), make_tensor("f64", (4, 3, 3, 3), r)
    y = run_kernel("conv2d", [x, w], {"stride": 2, "padding": 1})
    dy = make_tensor("f64", y.shape, r)
    back = run_kernel("conv_transpose2d", [dy, w], {"stride": 2, "padding": 1, "output_padding": [0, 1]})
    assert back.shape == x.shape
    assert np.isclose(np.sum(y * dy), np.sum(x * back))


@pytest.mark.parametrize("dtype", ["f16", "f32", "f64"])
@pytest.mark.parametrize("shape", [(2, 3, 7), (1, 4, 5, 6), (2, 1, 1, 1)])
def test_instancenorm(shape, dtype):
    out = check("instancenorm", [make_tensor(dtype, shape, rng(42))], {"eps": 1e-3}, dtype)
    if shape[2:] != (1, 1) and dtype == "f64":
        assert np.allclose(out.reshape(shape[0] * shape[1], -1).mean(axis=1), 0.0)


@pytest.mark.parametrize("dtype", ["f16", "f32", "f64", "i32", "i64", "c128"])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("exclusive, reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum(dtype, axis, exclusive, reverse):
    out = check("cumsum", [make_tensor(dtype, (3, 5, 4), rng(43))],
                {"axis": axis, "exclusive": exclusive, "reverse": reverse}, dtype)
    assert out.shape == (3, 5, 4)


def test_cumsum_values():
    x = np.arange(1, 5, dtype=np.int64)
    assert run_kernel("cumsum", [x], {}).tolist() == [1, 3, 6, 10]
    assert run_kernel("cumsum", [x], {"exclusive": 1}).tolist() == [0, 1, 3, 6]
    assert run_kernel("cumsum", [x], {"reverse": 1}).tolist() == [10, 9, 7, 4]
    assert run_kernel("cumsum", [x], {"exclusive": 1, "reverse": 1}).tolist() == [9, 7, 4, 0]


@pytest.mark.parametrize("dtype", ["f16", "f32", "f64"])
def test_hardswish(dtype):
    x = make_tensor(dtype, (4, 9), rng(44)) * 4
    out = check("elementwise", [x], {"fn": "hardswish"}, dtype)
    v = run_kernel("elementwise", [np.array([-4.0, -3.0, 0.0, 1.5, 3.0, 5.0])], {"fn": "hardswish"})
    assert v.tolist() == [0.0, 0.0, 0.0, 1.125, 3.0, 5.0] and out.dtype == x.dtype


@pytest.mark.parametrize("dtype", ["f16", "f32", "i64", "bool"])
@pytest.mark.parametrize("ishape,batch_dims", [((6, 2), 0), ((2, 7, 2), 1), ((2, 3, 1), 2), ((5, 4), 0)])
def test_gather_nd(dtype, ishape, batch_dims):
    data = make_tensor(dtype, (2, 3, 4, 5), rng(45))
    dims = data.shape[batch_dims:batch_dims + ishape[-1]]
    r = rng(46)
    idx = np.stack([r.integers(-d, d, size=ishape[:-1]) for d in dims], -1)
    out = check("gather_nd", [data, idx], {"batch_dims": batch_dims})
    assert out.shape == ishape[:-1] + data.shape[batch_dims + ishape[-1]:]


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype", ["f32", "f64", "i64"])
def test_scatter_elements(reduction, axis, dtype):
    r = rng(47)
    data = make_tensor(dtype, (4, 5, 6), r)
    idx = r.integers(-data.shape[axis], data.shape[axis], size=(3, 4, 5))  # repeated positions too
    upd = make_tensor(dtype, (3, 4, 5), r)
    check("scatter_elements", [data, idx, upd], {"axis": axis, "reduction": reduction})


def test_scatter_elements_of_more_updates_than_rows():
    """A GNN's aggregation: E = 40 edge messages summed into N = 6 nodes along axis 0."""
    r = rng(48)
    data, idx, upd = np.zeros((6, 3)), r.integers(0, 6, size=(40, 3)), make_tensor("f64", (40, 3), r)
    out = check("scatter_elements", [data, idx, upd], {"axis": 0, "reduction": "add"})
    assert np.allclose(out.sum(), upd.sum())


def test_scatter_elements_repeated_positions_last_wins_or_combine():
    data, idx, upd = np.zeros(4), np.array([1, 1, 3, 1]), np.array([1.0, 2.0, 3.0, 4.0])
    assert run_kernel("scatter_elements", [data, idx, upd], {}).tolist() == [0.0, 4.0, 0.0, 3.0]
    assert run_kernel("scatter_elements", [data, idx, upd], {"reduction": "add"}).tolist() == [0.0, 7.0, 0.0, 3.0]
