"""2-D convolution (cross-correlation, as in DNN frameworks) with stride,
zero padding and groups: a direct Numba loop nest, and im2col (Numba) + GEMM;
and its transpose (:func:`conv_transpose2d`), a GEMM + col2im (Numba).

The direct kernel runs in parallel over (image, block of four output
channels of one group, output row); each input element loaded updates the
four channels' row accumulators, and for each filter tap the inner loop runs
over the output columns whose input lies inside the image (bounds worked out
once per tap, so it has no branches). im2col lowers each group of a batch of images to one batched GEMM
(Chellapilla, Puri, Simard, "High Performance Convolutional Neural Networks
for Document Processing", IWFHR 2006); the GEMM is BLAS through NumPy.
For a 1x1 filter without padding im2col is the identity (stride 1) or a
strided slice of the input (stride > 1, one contiguous copy of the kept
pixels), so that path skips the im2col kernel and its buffer and runs the
GEMM on a view of the input.
:func:`conv2d` picks im2col when the GEMM is big enough to pay for the copy.
"""

from __future__ import annotations

import numpy as np

from mapper.kernels._jit import jit, prange, readonly, threads_for

#: im2col is chosen when the per-group GEMM's inner size (Cg*R*S) and output
#: channels (K/groups) both reach this.
IM2COL_MIN = 16

#: The im2col buffer holds at most this many elements (images are done in batches).
COL_MAX_ELEMENTS = 1 << 24


@jit(parallel=True)
def _conv_direct(x, w, out, sh, sw, ph, pw, groups):
    nn, _, h, wd = x.shape
    kk, cg, rr, ss = w.shape
    ho, wo = out.shape[2], out.shape[3]
    kg = kk // groups
    nblk = (kg + 3) // 4  # blocks of up to 4 output channels of one group share each input load
    for t in prange(nn * groups * nblk * ho):
        oh = t % ho
        u = t // ho
        blk = u % nblk
        u //= nblk
        g = u % groups
        n = u // groups
        k0 = g * kg + 4 * blk
        nk = min(4, (g + 1) * kg - k0)
        k1 = k0 + min(1, nk - 1)  # repeats of the last channel when the block is short
        k2 = k0 + min(2, nk - 1)
        k3 = k0 + min(3, nk - 1)
        acc = np.zeros((4, wo), dtype=out.dtype)
        for cc in range(cg):
            c = g * cg + cc
            for r in range(rr):
                ih = oh * sh - ph + r
                if ih < 0 or ih >= h:
                    continue
                for s in range(ss):
                    ow_lo = max(0, (pw - s + sw - 1) // sw)
                    ow_hi = min(wo, (wd - 1 + pw - s) // sw + 1)
                    w0 = w[k0, cc, r, s]
                    if nk == 1:  # e.g. depthwise: one channel per group
                        for ow in range(ow_lo, ow_hi):
                            acc[0, ow] += w0 * x[n, c, ih, ow * sw - pw + s]
                        continue
                    w1 = w[k1, cc, r, s]
                    w2 = w[k2, cc, r, s]
                    w3 = w[k3, cc, r, s]
                    for ow in range(ow_lo, ow_hi):
                        xv = x[n, c, ih, ow * sw - pw + s]
                        acc[0, ow] += w0 * xv
                        acc[1, ow] += w1 * xv
                        acc[2, ow] += w2 * xv
                        acc[3, ow] += w3 * xv
        for q in range(nk):
            for ow in range(wo):
                out[n, k0 + q, oh, ow] = acc[q, ow]


@jit(inline=True)
def _im2col_row(x, n, c, ih, s, sw, pw, wo, col, b, row, base):
    """One output row of one tap: ``col[b, row, base + ow]`` for ``ow < wo``."""
    wd = x.shape[3]
    for ow in range(wo):
        iw = ow * sw - pw + s
        col[b, row, base + ow] = x[n, c, ih, iw] if 0 <= iw < wd else 0


@jit(parallel=True)
def _im2col(x, n0, c0, rr, ss, sh, sw, ph, pw, ho, wo, col):
    """``col[b, (c, r, s), (oh, ow)]`` = the input under tap (r, s) of channel
    ``c0 + c`` for output pixel (oh, ow) of image ``n0 + b`` (0 in the padding).
    Strides 1 and 2 get a row loop of their own (the row helper inlined with a
    constant stride), which LLVM vectorises: stride 2 ran 1.6-2.1x faster."""
    h = x.shape[2]
    rows = col.shape[1]
    for t in prange(col.shape[0] * rows):
        b = t // rows
        row = t % rows
        cc = row // (rr * ss)
        r = (row // ss) % rr
        s = row % ss
        for oh in range(ho):
            ih = oh * sh - ph + r
            base = oh * wo
            if ih < 0 or ih >= h:
                for ow in range(wo):
                    col[b, row, base + ow] = 0
            elif sw == 1:
                _im2col_row(x, n0 + b, c0 + cc, ih, s, 1, pw, wo, col, b, row, base)
            elif sw == 2:
                _im2col_row(x, n0 + b, c0 + cc, ih, s, 2, pw, wo, col, b, row, base)
            else:
                _im2col_row(x, n0 + b, c0 + cc, ih, s, sw, pw, wo, col, b, row, base)


def _out_shape(x, w, stride, padding):
    ho = (x.shape[2] + 2 * padding[0] - w.shape[2]) // stride[0] + 1
    wo = (x.shape[3] + 2 * padding[1] - w.shape[3]) // stride[1] + 1
    return (x.shape[0], w.shape[0], ho, wo)


def _gemm_1x1(x: np.ndarray, w: np.ndarray, out: np.ndarray, stride: tuple[int, int], groups: int) -> None:
    """The im2col path for a 1x1 filter without padding: each group's ``col``
    is the (strided) input itself, ``x[n, g*Cg:(g+1)*Cg].reshape(Cg, Ho*Wo)``."""
    if stride[0] != 1 or stride[1] != 1:
        x = np.ascontiguousarray(x[:, :, ::stride[0], ::stride[1]])  # shape (N, C, Ho, Wo)
    n, k, ho, wo = out.shape
    kg, cg = k // groups, w.shape[1]
    for g in range(groups):
        np.matmul(w[g * kg:(g + 1) * kg].reshape(kg, cg), x[:, g * cg:(g + 1) * cg].reshape(n, cg, ho * wo),
                  out=out[:, g * kg:(g + 1) * kg].reshape(n, kg, ho * wo))


def conv2d(x: np.ndarray, w: np.ndarray, *, stride: tuple[int, int], padding: tuple[int, int],
           groups: int, method: str | None = None) -> np.ndarray:
    """``x[N, C, H, W]`` correlated with ``w[K, C/groups, R, S]``; ``method``
    "direct" or "im2col" forces a path (im2col includes the 1x1 shortcut)."""
    x = readonly(x)
    w = readonly(w)
    k, cg, r, s = w.shape
    kg = k // groups
    if method is None:
        method = "im2col" if cg * r * s >= IM2COL_MIN and kg >= IM2COL_MIN else "direct"
    out = np.empty(_out_shape(x, w, stride, padding), dtype=x.dtype)
    if out.size == 0:
        return out
    if method == "direct":
        _conv_direct(x, w, out, stride[0], stride[1], padding[0], padding[1], groups)
        return out
    if r == 1 and s == 1 and padding[0] == 0 and padding[1] == 0:
        _gemm_1x1(x, w, out, stride, groups)
        return out
    ho, wo = out.shape[2], out.shape[3]
    per_image = cg * r * s * ho * wo
    batch = max(1, min(x.shape[0], COL_MAX_ELEMENTS // per_image))
    col = np.empty((batch, cg * r * s, ho * wo), dtype=x.dtype)
    for n0 in range(0, x.shape[0], batch):
        nb = min(batch, x.shape[0] - n0)
        for g in range(groups):
            with threads_for(0):  # one thread: Numba workers would fight the BLAS threads (3-4x slower)
                _im2col(x, n0, g * cg, r, s, stride[0], stride[1], padding[0], padding[1], ho, wo, col[:nb])
            wg = w[g * kg:(g + 1) * kg].reshape(kg, cg * r * s)
            np.matmul(wg, col[:nb], out=out[n0:n0 + nb, g * kg:(g + 1) * kg].reshape(nb, kg, ho * wo))
    return out


@jit(parallel=True)
def _col2im(col, out, n0, k0, kg, rr, ss, h, wd, sh, sw, ph, pw):
    """``out[n0 + b, k0 + k]`` += each column entry ``col[b, (k, r, s), (i, j)]`` at
    ``(i sh - ph + r, j sw - pw + s)`` where that lies inside the output; one
    worker per output plane, so no two workers add into the same element."""
    ho, wo = out.shape[2], out.shape[3]
    for t in prange(col.shape[0] * kg):
        b = t // kg
        k = t % kg
        for r in range(rr):
            i_lo = max(0, (ph - r + sh - 1) // sh)  # the input rows whose tap r lands inside the output
            i_hi = min(h, (ho - 1 + ph - r) // sh + 1)
            for s in range(ss):
                row = (k * rr + r) * ss + s
                j_lo = max(0, (pw - s + sw - 1) // sw)
                j_hi = min(wd, (wo - 1 + pw - s) // sw + 1)
                for i in range(i_lo, i_hi):
                    oh = i * sh - ph + r
                    base = i * wd
                    for j in range(j_lo, j_hi):
                        out[n0 + b, k0 + k, oh, j * sw - pw + s] += col[b, row, base + j]


def conv_transpose2d(x: np.ndarray, w: np.ndarray, *, stride: tuple[int, int], padding: tuple[int, int],
                     output_padding: tuple[int, int], groups: int) -> np.ndarray:
    """``x[N, C, H, W]`` through the transposed convolution of ``w[C, K/groups, R, S]``: per
    image and group the GEMM ``col = w_g^T x_g`` (BLAS through NumPy), then col2im adds each
    column into the output (Caffe's deconvolution layer: Jia et al., "Caffe", ACM MM 2014)."""
    x = readonly(x)
    w = readonly(w)
    n, c, h, wd = x.shape
    _, kg, r, s = w.shape
    cg = c // groups
    ho = (h - 1) * stride[0] - 2 * padding[0] + r + output_padding[0]
    wo = (wd - 1) * stride[1] - 2 * padding[1] + s + output_padding[1]
    out = np.zeros((n, kg * groups, ho, wo), dtype=x.dtype)
    if out.size == 0 or x.size == 0:
        return out
    batch = max(1, min(n, COL_MAX_ELEMENTS // max(1, kg * r * s * h * wd)))
    col = np.empty((batch, kg * r * s, h * wd), dtype=x.dtype)
    for n0 in range(0, n, batch):
        nb = min(batch, n - n0)
        for g in range(groups):
            wg = w[g * cg:(g + 1) * cg].reshape(cg, kg * r * s)
            np.matmul(wg.T, x[n0:n0 + nb, g * cg:(g + 1) * cg].reshape(nb, cg, h * wd), out=col[:nb])
            with threads_for(0):  # one thread, as im2col: Numba workers would fight the BLAS threads
                _col2im(col[:nb], out, n0, g * kg, kg, r, s, h, wd, stride[0], stride[1], padding[0], padding[1])
    return out
