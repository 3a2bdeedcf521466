"""float32 ``exp`` and ``tanh`` without a libm call per element.

Numba compiles ``math.exp`` and ``np.tanh`` to one call into the C library
per element, which LLVM cannot vectorise: in the attention kernel the
softmax's exponentials took most of the time (GPT-2's causal attention, 6.3
million of them). These are branch-free (selects only), so a loop of them
vectorises; float64 keeps the library's functions (its tolerance, 1e-10, is
tighter than a short polynomial's).

- :func:`tanh32`: Eigen's rational approximation ``x p(x^2) / q(x^2)`` on
  ``[-9, 9]`` (``generic_fast_tanh_float``), ``x`` below 0.0004: within
  4e-7 of the exact value.
- :func:`exp32_into`: Cephes' ``expf`` (Moshier, "Methods and Programs for
  Mathematical Functions", 1989): ``exp(x) = 2^k exp(r)``, ``k`` the nearest
  integer to ``x / ln 2``, ``r = x - k ln 2`` (ln 2 in two parts), ``exp(r)``
  a degree-6 polynomial; ``2^k`` built from its exponent bits through an
  int32 scratch array viewed as float32. Within 2 units in the last place
  for normal results; below ``exp(-87.3)`` (subnormal) it returns 0, above
  ``exp(88.7)`` infinity.
- :func:`scaled_exp_sum`: a softmax's exponentials and their sum, in float32
  through :func:`exp32_into`, in float64 through ``math.exp``; :func:`row_max`
  its shift.
"""

from __future__ import annotations

import math

import numpy as np

from mapper.kernels._jit import REASSOC, jit, overload, types

#: Eigen's tanh coefficients, highest power first.
TANH_P = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08,
          1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03)
TANH_Q = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03)

#: Cephes expf: log2(e), ln 2 in two parts, the polynomial of exp(r) - 1 - r
#: divided by r^2, highest power first, and the range with normal results.
LOG2E = 1.44269504088896341
LN2_HI = 0.693359375
LN2_LO = -2.12194440e-4
EXP_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
EXP_LO = -87.33654
EXP_HI = 88.72283


@jit()
def tanh32(v):
    """tanh of a float32; NaN stays NaN (no comparison clamps it)."""
    lim = np.float32(9.0)
    x = lim if v > lim else (-lim if v < -lim else v)
    x2 = x * x
    p = np.float32(TANH_P[0])
    for c in TANH_P[1:]:
        p = p * x2 + np.float32(c)
    q = np.float32(TANH_Q[0])
    for c in TANH_Q[1:]:
        q = q * x2 + np.float32(c)
    return v if abs(v) < np.float32(0.0004) else x * p / q


@jit()
def exp32_into(src, dst, n, bits, shift=0.0, scale=1.0):
    """``dst[:n] = exp((src[:n] - shift) * scale)`` for float32 arrays,
    ``bits`` an int32 scratch array of at least ``n``; NaN stays NaN. ``dst``
    must not overlap ``src`` (the loop then vectorises: LLVM's overlap check
    would send an in-place call to its scalar loop)."""
    lo, hi = np.float32(EXP_LO), np.float32(EXP_HI)
    zero, inf = np.float32(0.0), np.float32(np.inf)
    sh, sc = np.float32(shift), np.float32(scale)
    for j in range(n):
        v = (src[j] - sh) * sc
        x = lo if v < lo else (hi if v > hi else v)
        k = np.floor((x if x == x else zero) * np.float32(LOG2E) + np.float32(0.5))  # NaN: k = 0
        r = x - k * np.float32(LN2_HI) - k * np.float32(LN2_LO)
        p = np.float32(EXP_P[0])
        for c in EXP_P[1:]:
            p = p * r + np.float32(c)
        e = p * r * r + r + np.float32(1.0)
        top = k > np.float32(127.0)  # 2^128 is not a float32: 2^127 times 2
        e = e * np.float32(2.0) if top else e
        dst[j] = zero if v < lo else (inf if v > hi else e)
        bits[j] = (np.int32(k) + np.int32(126 if top else 127)) << np.int32(23)
    pow2 = bits[:n].view(np.float32)  # 2^k
    for j in range(n):
        dst[j] *= pow2[j]


@jit()
def row_max(p, n):
    """The largest of ``p[:n]`` (``n >= 1``), a softmax's shift, as eight
    independent running maxima, so that no comparison waits for the one
    before: 0.27 against 1.2 ns an element for the one-accumulator loop on
    the development VM (LLVM vectorises neither; a float max reduction needs
    no-NaN semantics). A NaN in ``p`` may be skipped; the softmax it feeds
    is NaN either way, through that element's exponential and the sum.
    ``reduce``'s ``_lanes_max`` is its twin for ``reduce(kind = "max")``,
    which must return a NaN it meets: it flags them, and keeps 64 maxima in
    an array, an allocation a softmax would pay per row."""
    m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = p[0]
    full = n - n % 8
    for j in range(0, full, 8):
        m0 = p[j] if p[j] > m0 else m0
        m1 = p[j + 1] if p[j + 1] > m1 else m1
        m2 = p[j + 2] if p[j + 2] > m2 else m2
        m3 = p[j + 3] if p[j + 3] > m3 else m3
        m4 = p[j + 4] if p[j + 4] > m4 else m4
        m5 = p[j + 5] if p[j + 5] > m5 else m5
        m6 = p[j + 6] if p[j + 6] > m6 else m6
        m7 = p[j + 7] if p[j + 7] > m7 else m7
    for j in range(full, n):
        m0 = p[j] if p[j] > m0 else m0
    m0 = m1 if m1 > m0 else m0
    m2 = m3 if m3 > m2 else m2
    m4 = m5 if m5 > m4 else m4
    m6 = m7 if m7 > m6 else m6
    m0 = m2 if m2 > m0 else m0
    m4 = m6 if m6 > m4 else m4
    return m4 if m4 > m0 else m0


def scaled_exp_sum(p, e, end, m, scale, bits):
    """``e[:end] = exp((p[:end] - m) * scale)``; returns their sum (float64):
    a softmax's numerators and normaliser. float32 through
    :func:`exp32_into` (``bits`` its int32 scratch), float64 through
    ``math.exp`` (inside kernels only)."""
    raise NotImplementedError("scaled_exp_sum is only callable inside Numba kernels")


@overload(scaled_exp_sum)
def _scaled_exp_sum(p, e, end, m, scale, bits):
    if isinstance(p.dtype, types.Float) and p.dtype.bitwidth == 32:
        return lambda p, e, end, m, scale, bits: _scaled_exp_sum32(p, e, end, m, scale, bits)
    return lambda p, e, end, m, scale, bits: _scaled_exp_sum64(p, e, end, m, scale)


@jit()
def _scaled_exp_sum32(p, e, end, m, scale, bits):
    exp32_into(p, e, end, bits, m, scale)
    return _sum64(e, end)


@jit(fastmath=REASSOC)
def _sum64(e, end):
    total = 0.0
    for j in range(end):
        total += e[j]
    return total


@jit()
def _scaled_exp_sum64(p, e, end, m, scale):
    total = 0.0
    for j in range(end):
        x = math.exp((p[j] - m) * scale)
        e[j] = x
        total += x
    return total
