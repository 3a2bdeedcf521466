"""The kernel registry's interface: coverage of docs/ops.md, errors, operand
generators, tolerances, lazy import and the Numba cache location."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mapper.errors import InputError
from mapper.kernels.registry import (
    KERNELS,
    Csr,
    make_csr,
    make_ids,
    make_tensor,
    numpy_dtype,
    reference,
    round_bf16,
    run_kernel,
    tolerance,
)

ROOT = Path(__file__).resolve().parents[1]


def _ops_in_catalogue() -> set[str]:
    ops: set[str] = set()
    for line in (ROOT / "docs" / "ops.md").read_text().splitlines():
        m = re.match(r"\|\s*([a-z0-9_, ]+?)\s*\|", line)
        if m and m.group(1) not in ("op",):
            ops.update(w.strip() for w in m.group(1).split(","))
    return ops


def test_every_catalogue_op_has_a_kernel_and_a_reference():
    from mapper.core.ops import KERNEL_LESS

    ops = _ops_in_catalogue()
    assert len(ops) >= 25
    assert ops - KERNEL_LESS == set(KERNELS) and not KERNEL_LESS & set(KERNELS)
    for op, info in KERNELS.items():
        assert info.name == op and info.impl and info.module.startswith("mapper.kernels.")
        assert info.dtypes


def test_impl_notes_are_honest_about_non_numba_paths():
    assert "numpy" in KERNELS["reshape"].impl
    assert "numpy.fft" in KERNELS["fft"].impl and "radix-2" in KERNELS["fft"].impl
    assert "BLAS" in KERNELS["matmul"].impl and "BLAS" in KERNELS["conv2d"].impl
    assert "bf16" in KERNELS["relu"].impl and "bf16" in KERNELS["relu"].dtypes


def _run_python(code: str, env: dict | None = None) -> str:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env=full_env).stdout.strip()


def test_importing_the_package_is_light_and_the_registry_compiles_nothing():
    assert _run_python("import sys, mapper.kernels; print('numba' in sys.modules)") == "False"
    code = (
        "import numba, pkgutil, importlib, mapper.kernels as K, mapper.kernels.registry\n"
        "n = 0\n"
        "for m in pkgutil.iter_modules(K.__path__):\n"
        "    mod = importlib.import_module('mapper.kernels.' + m.name)\n"
        "    for v in vars(mod).values():\n"
        "        if isinstance(v, numba.core.registry.CPUDispatcher):\n"
        "            n += 1; assert not v.signatures, v\n"
        "print(n)"
    )
    assert int(_run_python(code)) >= 15


def test_numba_cache_dir_is_user_writable_and_overridable(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["XDG_CACHE_HOME"] = str(tmp_path)
    out = subprocess.run([sys.executable, "-c", "import os, mapper.kernels._jit; print(os.environ['NUMBA_CACHE_DIR'])"],
                         capture_output=True, text=True, check=True, env=env).stdout.strip()
    assert out == str(tmp_path / "mapper" / "numba")
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "mine")
    out = subprocess.run([sys.executable, "-c", "import mapper.kernels._jit, numba; print(numba.config.CACHE_DIR)"],
                         capture_output=True, text=True, check=True, env=env).stdout.strip()
    assert out == str(tmp_path / "mine")


# -- errors --------------------------------------------------------------------------------
F = np.ones((2, 3), dtype=np.float32)
BAD_CALLS = [
    ("nosuchop", [F], {}, "no kernel"),
    ("relu", [F, F], {}, "takes 1 operands"),
    ("relu", [F], {"alpha": 1}, "unknown attribute"),
    ("matmul", [F, F], {}, "inner dimensions"),
    ("matmul", [np.ones(3), np.ones((3, 2))], {}, "at least 2-D"),
    ("add", [F, np.ones((4,), np.float32)], {}, "do not broadcast"),
    ("add", [F, F.astype(np.float64)], {}, "dtypes differ"),
    ("conv2d", [np.ones((1, 3, 5, 5)), np.ones((4, 2, 3, 3))], {"groups": 2}, "groups"),
    ("conv2d", [np.ones((1, 1, 2, 2)), np.ones((1, 1, 3, 3))], {}, "larger than"),
    ("conv2d", [np.ones((1, 1, 4, 4)), np.ones((1, 1, 3, 3))], {"stride": 0}, ">= 1"),
    ("maxpool", [np.ones((1, 1, 4, 4))], {}, "missing attribute kernel"),
    ("avgpool", [np.ones((1, 1, 4, 4))], {"kernel": 2, "padding": 2}, "at most half"),
    ("avgpool", [np.ones((1, 1, 4, 4), dtype=np.int64)], {"kernel": 2}, "dtype i64"),
    ("softmax", [F], {"axis": 2}, "out of range"),
    ("attention", [np.ones((4, 6))], {"heads": 4, "seq": 2}, "divisible"),
    ("attention", [np.ones((5, 6))], {"heads": 1, "seq": 2}, "multiple of seq"),
    ("attention", [np.ones((4, 6)), np.ones((4, 6))], {"heads": 1, "seq": 2}, "2 operands"),
    ("embedding", [np.array([0, 5]), np.ones((5, 2))], {}, "must lie in"),
    ("embedding", [np.array([0.0]), np.ones((5, 2))], {}, "dtype f64"),
    ("concat", [F, np.ones((2, 4), np.float32)], {"axis": 0}, "shapes differ"),
    ("split", [F], {"parts": 2, "index": 0, "axis": 1}, "equal parts"),
    ("split", [F], {"parts": 3, "index": 3, "axis": 1}, "index"),
    ("reshape", [F], {"shape": [4, -1]}, "cannot reshape"),
    ("reshape", [F], {"shape": [-1, -1]}, "at most one -1"),
    ("transpose", [F], {"perm": [0, 0]}, "not a permutation"),
    ("stencil", [F], {"points": 7}, "not valid"),
    ("stencil", [F], {"points": 5, "steps": -1}, ">= 0"),
    ("spmv", [F, np.ones(3, np.float32)], {}, "Csr"),
    ("fft", [F], {}, "dtype f32"),
    ("dot", [np.ones(3), np.ones(4)], {}, "equal length"),
    ("axpy", [np.ones(()), np.ones(3), np.ones(3)], {"alpha": 2.0}, "alpha is only"),
    ("axpy", [np.ones(3, np.int64), np.ones(3, np.int64)], {"alpha": 0.5}, "must be an integer"),
    ("reduce", [np.ones(3, np.complex128)], {"kind": "max"}, "no order"),
    ("reduce", [np.ones(3)], {"kind": "median"}, "kind"),
    ("reduce", [np.ones(0)], {"kind": "max"}, "empty"),
    ("elementwise", [F], {"fn": "cube"}, "unknown fn"),
    ("elementwise", [F], {"fn": "exp", "alpha": 2.0}, "only for"),
    ("elementwise", [np.ones(3, np.int64)], {"fn": "exp"}, "dtype i64"),
    ("elementwise", [np.ones(3, np.complex64)], {"fn": "hardswish"}, "no order"),
    ("conv_transpose2d", [np.ones((1, 4, 3, 3)), np.ones((3, 2, 3, 3))], {}, "do not fit groups"),
    ("conv_transpose2d", [np.ones((1, 2, 3, 3)), np.ones((2, 2, 3, 3))], {"stride": 2, "output_padding": 2},
     "smaller than the stride"),
    ("instancenorm", [F], {}, "at least 3-D"),
    ("cumsum", [F], {"axis": 2}, "out of range"),
    ("cumsum", [F], {"exclusive": 2}, "0 or 1"),
    ("gather_nd", [F, np.array([[2, 0]])], {}, "must lie in [-2, 2)"),
    ("gather_nd", [F, np.array([[0.0]])], {}, "dtype f64"),
    ("gather_nd", [F, np.array([[0, 0, 0]])], {}, "last axis (3)"),
    ("scatter_elements", [F, np.zeros((2, 3), np.int64), np.ones((2, 2), np.float32)], {}, "one shape"),
    ("scatter_elements", [F, np.full((2, 3), 2), np.ones((2, 3), np.float32)], {}, "must lie in"),
    ("scatter_elements", [F, np.zeros((2, 3), np.int64), np.ones((2, 3), np.float32)], {"reduction": "sum"},
     "reduction must be"),
]


@pytest.mark.parametrize("path", [run_kernel, reference])
@pytest.mark.parametrize("op,inputs,attrs,words", BAD_CALLS, ids=[f"{c[0]}-{c[3]}" for c in BAD_CALLS])
def test_bad_calls_raise_input_error_naming_the_op(path, op, inputs, attrs, words):
    with pytest.raises(InputError) as err:
        path(op, inputs, attrs)
    assert words in str(err.value)
    assert err.value.obj == op and err.value.exit_code == 2


@pytest.mark.parametrize("broken,words", [
    (Csr(np.array([0, 2, 1], np.int32), np.array([0, 1], np.int32), np.ones(2), (2, 3)), "rise"),
    (Csr(np.array([0, 1, 2], np.int32), np.array([0, 3], np.int32), np.ones(2), (2, 3)), "column indices"),
    (Csr(np.array([0, 1], np.int32), np.array([0], np.int32), np.ones(1), (2, 3)), "indptr has shape"),
    (Csr(np.array([0, 1, 2], np.int32), np.array([0, 1], np.int32), np.ones(3), (2, 3)), "same length"),
])
def test_malformed_csr_is_rejected(broken, words):
    with pytest.raises(InputError, match=words):
        run_kernel("spmv", [broken, np.ones(3)], {})


def test_outputs_are_fresh_arrays():
    x = make_tensor("f32", (3, 4), np.random.default_rng(0))
    for op, attrs in [("transpose", {"perm": [0, 1]}), ("split", {"parts": 1, "index": 0}), ("relu", {}),
                      ("stencil", {"points": 5, "steps": 0}), ("concat", {})]:
        out = run_kernel(op, [x], attrs)
        assert not np.shares_memory(out, x), op
        out[...] = 0
    assert x.any()


# -- operand generators and dtypes ---------------------------------------------------------
@pytest.mark.parametrize("dtype", ["bool", "i8", "i32", "i64", "f16", "bf16", "f32", "f64", "c64", "c128"])
def test_make_tensor_is_seeded_and_typed(dtype):
    a = make_tensor(dtype, (3, 5), np.random.default_rng(7))
    b = make_tensor(dtype, (3, 5), np.random.default_rng(7))
    assert a.dtype == numpy_dtype(dtype) and a.shape == (3, 5)
    assert a.tobytes() == b.tobytes()
    assert a.tobytes() != make_tensor(dtype, (3, 5), np.random.default_rng(8)).tobytes()
    if dtype not in ("bool",):
        assert (np.real(make_tensor(dtype, (50,), np.random.default_rng(1), positive=True)) > 0).all()


def test_bf16_is_float32_with_bf16_values():
    x = make_tensor("bf16", (1000,), np.random.default_rng(2))
    assert x.dtype == np.float32
    assert not (x.view(np.uint32) & 0xFFFF).any()
    assert round_bf16(np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8], np.float32)).tolist() == [1.0, 1 + 2 ** -6]
    assert np.isnan(round_bf16(np.array([np.nan], np.float32)))[0]


def test_make_ids():
    ids = make_ids((4, 50), 7, np.random.default_rng(3), "i32")
    assert ids.dtype == np.int32 and ids.min() >= 0 and ids.max() < 7
    assert make_ids((3,), 7, np.random.default_rng(3)).dtype == np.int64
    with pytest.raises(InputError):
        make_ids((3,), 0, np.random.default_rng(3))


@pytest.mark.parametrize("m,n,nnz", [(100, 80, 500), (10, 10, 100), (7, 1000, 3), (5, 4, 0), (1000, 30, 25000)])
def test_make_csr(m, n, nnz):
    a = make_csr((m, n), nnz, "f64", np.random.default_rng(4))
    b = make_csr((m, n), nnz, "f64", np.random.default_rng(4))
    assert a.nnz == nnz and a.shape == (m, n) and a.indptr.dtype == a.indices.dtype == np.int32
    assert all(np.array_equal(u, v) for u, v in zip(a[:3], b[:3]))
    per_row = np.diff(a.indptr)
    assert per_row.max() - per_row.min() <= 1
    for r in range(m):
        cols = a.indices[a.indptr[r]:a.indptr[r + 1]]
        assert (np.diff(cols) > 0).all() and (cols < n).all()
    with pytest.raises(InputError):
        make_csr((3, 3), 10, "f64", np.random.default_rng(0))


def test_tolerances():
    assert tolerance("f64") == tolerance(np.float64) == (1e-10, 1e-10)
    assert tolerance("i32") == (0.0, 0.0)
    assert tolerance("f16")[0] > tolerance("f32")[0] > tolerance("f64")[0]
    assert tolerance("bf16")[0] >= 2 ** -8
    assert tolerance("c64") == tolerance("f32")
    with pytest.raises(InputError):
        tolerance("q7")


def test_f16_inputs_compute_in_f32_and_round():
    r = np.random.default_rng(5)
    a, b = make_tensor("f16", (4, 6), r), make_tensor("f16", (6, 3), r)
    out = run_kernel("matmul", [a, b], {})
    assert out.dtype == np.float16
    want = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(out, want)


def test_concurrent_calls_from_threads_agree_with_serial_ones():
    from concurrent.futures import ThreadPoolExecutor

    r = np.random.default_rng(9)
    calls = [("relu", [make_tensor("f64", (200_000,), r)], {}),
             ("softmax", [make_tensor("f64", (300, 300), r)], {}),
             ("stencil", [make_tensor("f64", (300, 300), r)], {"points": 5, "steps": 2}),
             ("add", [make_tensor("f64", (400, 300), r), make_tensor("f64", (300,), r)], {}),
             ("relu", [make_tensor("f64", (50,), r)], {})] * 4
    want = [run_kernel(op, xs, at) for op, xs, at in calls]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda c: run_kernel(*c), calls))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_first_call_in_a_process_may_nest_kernel_launches():
    code = ("import numpy as np\n"
            "from mapper.kernels.registry import run_kernel\n"
            "x = np.ones((1, 16, 6, 6), np.float32); w = np.ones((16, 16, 3, 3), np.float32)\n"
            "print(float(run_kernel('conv2d', [x, w], {'padding': 1})[0, 0, 2, 2]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "144.0"


def test_random_operand_follows_the_tensor_type():
    from mapper.core.graph import TensorType
    from mapper.kernels.registry import random_operand

    r = np.random.default_rng(6)
    dense = random_operand(TensorType("bf16", (3, 4)), r)
    assert dense.dtype == np.float32 and dense.shape == (3, 4)
    sparse = random_operand(TensorType("f64", (10, 8), "csr", 20), r)
    assert isinstance(sparse, Csr) and sparse.nnz == 20 and sparse.shape == (10, 8)
    ids = random_operand(TensorType("i32", (5,)), r, vocab=3)
    assert ids.dtype == np.int32 and ids.max() < 3


def test_blas_pool_limits_and_restores_the_blas_threads():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from mapper.kernels.blas import blas_pool

    def sizes():
        return [p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]

    before = sizes()
    with blas_pool(1) as n:
        assert n == 1 and sizes() and all(s == 1 for s in sizes())
    assert sizes() == before


def test_blas_threads_reports_the_pool_as_blas_calls_see_it():
    pytest.importorskip("threadpoolctl")
    from mapper.kernels.blas import blas_pool, blas_threads

    with blas_pool(1):
        assert blas_threads() == 1
    with blas_pool(2):
        assert blas_threads() in (1, 2)  # 1 where the library has one thread at most
