"""Shape and work rules of the DNN ops: matmul, conv2d, pooling, per-element
activations and norms, broadcasting binary ops, attention, embedding and
embedding bags (formulas in docs/ops.md)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod

from mapper.core.graph import DTYPE_BYTES
from mapper.core.opdefs.call import (
    FLOAT_DTYPES,
    INEXACT_DTYPES,
    INT_DTYPES,
    LAYER_DTYPES,
    NUMERIC_DTYPES,
    Call,
    OpInfo,
    broadcast,
    dense,
)


def matmul(c: Call) -> OpInfo:
    """(Batched) matrix product: ``2*batch*M*N*K``."""
    a, b = c.args
    c.dtypes(NUMERIC_DTYPES, "a numeric tensor")
    c.min_ndim(0, 2, "at least 2-D ([..., M, K])")
    c.min_ndim(1, 2, "at least 2-D ([K, N] or [..., K, N])")
    (m, k), (k2, n) = a.shape[-2:], b.shape[-2:]
    if k != k2:
        raise c.fail(f"inner dimensions differ: {c.desc(0)}, {c.desc(1)} ({k} != {k2})", arg=1)
    batch = broadcast(a.shape[:-2], b.shape[:-2])
    if batch is None:
        raise c.fail(f"batch dimensions do not broadcast: {c.desc(0)}, {c.desc(1)}", arg=1)
    return c.info(dense(batch + (m, n), a.dtype), 2 * prod(batch) * m * n * k)


def _pair(v: int | tuple[int, int]) -> tuple[int, int]:
    """An ``int2`` attribute as ``(height, width)``."""
    return (v, v) if isinstance(v, int) else (v[0], v[1])


def _window(c: Call, hw: Sequence[int], kern: tuple[int, int], what: str, at: dict) -> tuple[int, int]:
    """Output height and width of a sliding window; ``at`` names the error's operand/attr."""
    (kh, kw), (sh, sw) = kern, _pair(c.attrs["stride"])
    ph, pw = _pair(c.attrs["padding"])
    if hw[0] + 2 * ph < kh or hw[1] + 2 * pw < kw:
        raise c.fail(f"the {kh}x{kw} {what} is larger than the padded input: {c.desc(0)}, "
                     f"padding = {c.attrs['padding']}", **at)
    return (hw[0] + 2 * ph - kh) // sh + 1, (hw[1] + 2 * pw - kw) // sw + 1


def _conv_args(c: Call, w_form: str) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """The shapes of a convolution's ``x[N, C, H, W]`` and 4-D filter ``w_form`` (real float or
    quantised int8), and its groups."""
    c.dtypes(LAYER_DTYPES, "a real floating-point or quantised int8 tensor")
    c.ndim(0, (4,), "4-D [N, C, H, W]")
    c.ndim(1, (4,), w_form)
    return c.args[0].shape, c.args[1].shape, c.attrs["groups"]


def conv2d(c: Call) -> OpInfo:
    """Direct 2-D convolution (NCHW, grouped): 2 flops per MAC of each window."""
    (n, ch, h, wd), (k, cg, r, s), g = _conv_args(c, "4-D [K, C/groups, R, S]")
    if ch % g or k % g:
        raise c.fail(f"groups = {g} must divide the input channels ({ch}) and the filters ({k})",
                     attr="groups")
    if cg != ch // g:
        raise c.fail(f"channels differ: {c.desc(0)}, {c.desc(1)} ({ch // g} != {cg}; "
                     f"w must be [K, C/groups, R, S] with C = {ch}, groups = {g})", arg=1)
    ho, wo = _window(c, (h, wd), (r, s), "filter", {"arg": 1})
    return c.info(dense((n, k, ho, wo), c.args[0].dtype), 2 * n * k * ho * wo * cg * r * s)


def conv_transpose2d(c: Call) -> OpInfo:
    """Transposed 2-D convolution (NCHW, grouped), the gradient of :func:`conv2d` with respect
    to its input: each input element times each of its ``K/groups x R x S`` weights,
    ``Ho = (H - 1) sh - 2 ph + R + oph`` (Dumoulin and Visin, "A guide to convolution
    arithmetic for deep learning", arXiv:1603.07285, section 4)."""
    (n, ch, h, wd), (cw, kg, r, s), g = _conv_args(c, "4-D [C, K/groups, R, S]")
    if ch % g:
        raise c.fail(f"groups = {g} must divide the input channels ({ch})", attr="groups")
    if cw != ch:
        raise c.fail(f"channels differ: {c.desc(0)}, {c.desc(1)} ({ch} != {cw}; "
                     f"w must be [C, K/groups, R, S] with C = {ch})", arg=1)
    (sh, sw), (ph, pw) = _pair(c.attrs["stride"]), _pair(c.attrs["padding"])
    oph, opw = _pair(c.attrs["output_padding"])
    if oph >= sh or opw >= sw:
        raise c.fail(f"output_padding = {c.attrs['output_padding']} must be smaller than the stride "
                     f"({c.attrs['stride']})", attr="output_padding")
    ho, wo = (h - 1) * sh - 2 * ph + r + oph, (wd - 1) * sw - 2 * pw + s + opw
    if ho < 1 or wo < 1:
        raise c.fail(f"padding = {c.attrs['padding']} leaves no output of {c.desc(0)} and the {r}x{s} filter",
                     attr="padding")
    return c.info(dense((n, kg * g, ho, wo), c.args[0].dtype), 2 * n * ch * h * wd * kg * r * s)


def pool(c: Call) -> OpInfo:
    """Max or average pooling: ``kh*kw`` flops (adds or comparisons) per output element."""
    (x,) = c.args
    if c.spec.name == "maxpool":
        c.dtypes(INT_DTYPES + FLOAT_DTYPES, "a real tensor")
    else:
        c.dtypes(LAYER_DTYPES, "a real floating-point or quantised int8 tensor")
    c.ndim(0, (4,), "4-D [N, C, H, W]")
    if c.attrs["stride"] is None:
        c.attrs["stride"] = c.attrs["kernel"]
    kern, pad = _pair(c.attrs["kernel"]), _pair(c.attrs["padding"])
    if pad[0] > kern[0] // 2 or pad[1] > kern[1] // 2:
        raise c.fail(f"padding = {c.attrs['padding']} must be at most half the kernel "
                     f"({c.attrs['kernel']})", attr="padding")
    n, ch, h, w = x.shape
    ho, wo = _window(c, (h, w), kern, "kernel", {"attr": "kernel"})
    out = dense((n, ch, ho, wo), x.dtype)
    return c.info(out, kern[0] * kern[1] * out.numel)


def per_element(flops_per_element: int, dtypes: Sequence[str] = LAYER_DTYPES,
                 what: str = "a real floating-point or quantised int8 tensor", min_ndim: int = 0,
                 form: str = "") -> Callable[[Call], OpInfo]:
    """An op whose output has its operand's type and costs a fixed count per element."""

    def fn(c: Call) -> OpInfo:
        c.dtypes(dtypes, what)
        c.min_ndim(0, min_ndim, form)
        x = c.args[0]
        if "axis" in c.attrs:
            c.axis("axis", len(x.shape))
        return c.info(dense(x.shape, x.dtype), flops_per_element * x.numel)

    return fn


def instancenorm(c: Call) -> OpInfo:
    """Instance normalisation (Ulyanov, Vedaldi and Lempitsky, arXiv:1607.08022): each
    ``(n, c)`` plane of ``x[N, C, ...]`` normalised over its own elements, 8 flops per
    element as :func:`layernorm` counts them."""
    c.dtypes(FLOAT_DTYPES, "a real floating-point tensor")
    c.min_ndim(0, 3, "at least 3-D [N, C, ...]")
    x = c.args[0]
    return c.info(dense(x.shape, x.dtype), 8 * x.numel)


def binary(c: Call) -> OpInfo:
    """add, mul, sub, div with NumPy broadcasting: 1 flop per output element."""
    a, b = c.args
    c.dtypes(NUMERIC_DTYPES, "a numeric tensor")
    shape = broadcast(a.shape, b.shape)
    if shape is None:
        raise c.fail(f"shapes do not broadcast: {c.desc(0)}, {c.desc(1)}", arg=1)
    out = dense(shape, a.dtype)
    return c.info(out, out.numel)


def allreduce(c: Call) -> OpInfo:
    """The sum of same-shaped partial results: one participant's combine step
    of an all-reduce (:mod:`mapper.parallel`); ``rank`` is its own operand."""
    c.dtypes(NUMERIC_DTYPES, "a numeric tensor")
    first = c.args[0]
    for i, t in enumerate(c.args[1:], 1):
        if t.shape != first.shape:
            raise c.fail(f"every part must have the same shape: {c.desc(0)}, {c.desc(i)}", arg=i)
    if c.attrs["rank"] >= len(c.args):
        raise c.fail(f"rank = {c.attrs['rank']} is out of range for {len(c.args)} parts "
                     f"(valid: 0 .. {len(c.args) - 1})", attr="rank")
    out = dense(first.shape, first.dtype)
    return c.info(out, (len(c.args) - 1) * out.numel)


def qkv_layout(c: Call, heads: int, kv: int) -> tuple[int, int]:
    """``(D, dh)`` of attention's operands: one ``qkv[T, (heads + 2 kv) dh]`` (``[q | k | v]``
    when ``kv = heads``; else Megatron-LM's grouped layout, ``kv`` groups of ``heads / kv`` query
    heads and their key and value head), or ``q[T, D], k[T, D kv/heads], v`` alike."""
    if heads % kv:
        raise c.fail(f"kv_heads = {kv} must divide heads = {heads}", attr="kv_heads")
    width = c.args[0].shape[1]
    if len(c.args) == 1 and kv == heads and width % 3 == 0:
        if (width // 3) % heads:
            raise c.fail(f"heads = {heads} must divide the model width D = {width // 3}", attr="heads")
        return width // 3, width // 3 // heads
    if len(c.args) == 1:
        if width % (heads + 2 * kv):
            what = "3*D" if kv == heads else f"(heads + 2 kv_heads) * dh = {heads + 2 * kv} * dh"
            raise c.fail(f"qkv's last dimension must be {what}, got {c.args[0]}", arg=0)
        dh = width // (heads + 2 * kv)
        return heads * dh, dh
    if kv == heads:
        for i in (1, 2):
            if c.args[i].shape != c.args[0].shape:
                raise c.fail(f"q, k and v must have the same shape: {c.desc(0)}, {c.desc(i)}", arg=i)
    if width % heads:
        raise c.fail(f"heads = {heads} must divide the model width D = {width}", attr="heads")
    dh = width // heads
    for i in (1, 2):
        if c.args[i].shape != (c.args[0].shape[0], kv * dh):
            raise c.fail(f"k and v must be [T, kv_heads * dh] = [{c.args[0].shape[0]}, {kv * dh}]: "
                         f"{c.desc(0)}, {c.desc(i)}", arg=i)
    return width, dh


def attention(c: Call) -> OpInfo:
    """Multi-head scaled dot-product attention (Vaswani et al., NeurIPS 2017), no projections;
    grouped-query with ``kv_heads`` (Ainslie et al., EMNLP 2023). ``fused = 0``: the score
    matrix goes through memory, as unfused implementations run it (Megatron-LM's core attention:
    scores, a softmax kernel, dropout, then the product with V): :data:`UNFUSED_SCORE_BYTES`.
    ``cache = C``: a generation step's queries also attend to ``C`` earlier positions per sequence
    whose keys and values a KV cache holds (Pope et al., "Efficiently Scaling Transformer
    Inference", MLSys 2023): they are read (``2 b kv C dh`` elements) and the new ones appended.
    ``window = W`` (causal only): each query sees its last ``W`` positions, itself included
    (Mistral 7B's sliding window, Jiang et al., arXiv:2310.06825), and the cache is a rolling
    buffer of ``min(C, W)`` positions (:func:`held_positions`); the count stays the catalogue's
    dense one, the kernel's is :func:`visible_keys` (:func:`mapper.costing.work.kernel_flops`)."""
    if len(c.args) == 2:
        raise c.fail("takes one operand qkv[T, 3D] or three q[T, D], k[T, D], v[T, D]; got 2", arg=1)
    c.dtypes(FLOAT_DTYPES, "a real floating-point tensor")
    for i in range(len(c.args)):
        c.ndim(i, (2,), "2-D [T, 3D]" if len(c.args) == 1 else "2-D [T, D]")
    h, s = c.attrs["heads"], c.attrs["seq"]
    kv = c.attrs.get("kv_heads") or h
    t = c.args[0].shape[0]
    if len(c.args) == 1 and kv == h and c.args[0].shape[1] % 3:
        raise c.fail(f"qkv's last dimension must be 3*D, got {c.args[0]} ({c.args[0].shape[1]} % 3 != 0)", arg=0)
    d, dh = qkv_layout(c, h, kv)
    if t % s:
        raise c.fail(f"seq = {s} must divide the token count T = {t} (T = batch * seq)", attr="seq")
    b = t // s
    cache = int(c.attrs.get("cache") or 0)
    window = int(c.attrs.get("window") or 0)
    if window and not c.attrs.get("causal"):
        raise c.fail(f"window = {window} is a causal sliding window: give causal = 1 too", attr="window")
    keys = cache + s  # keys per sequence: the cached positions and the new ones
    flops = 2 * b * h * s * keys * dh + 5 * b * h * s * keys + 2 * b * h * s * keys * dh
    out = dense((t, d), c.args[0].dtype)
    item = DTYPE_BYTES[c.args[0].dtype]
    read = sum(x.nbytes for x in c.args)
    written = out.nbytes
    if cache:  # the cached keys and values read, the new ones appended
        read += 2 * b * kv * held_positions(cache, window) * dh * item
        written += 2 * b * kv * s * dh * item
    if not c.attrs.get("fused", 1):
        scores = b * h * s * keys * item
        read += UNFUSED_SCORE_BYTES[0] * scores
        written += UNFUSED_SCORE_BYTES[1] * scores
    return c.info(out, flops, read, written)


def held_positions(positions: int, window: int) -> int:
    """Positions of a sequence a KV cache keeps: all of them, or with a sliding window of ``W``
    the last ``W`` (the rolling buffer of Mistral's reference implementation, arXiv:2310.06825
    section 2; vLLM frees the blocks that leave the window, TensorRT-LLM keeps a cyclic cache of
    ``max_attention_window_size`` tokens)."""
    return min(positions, window) if window > 0 else positions


def visible_keys(seq: int, cache: int, window: int) -> int:
    """Query-key pairs a causal kernel computes for one sequence and head: query ``i`` of ``seq``
    new ones after ``cache`` cached positions sees ``min(cache + i + 1, W)`` keys (all ``cache + i
    + 1`` without a window), summed exactly over ``i``."""
    first, last = cache + 1, cache + seq  # the keys the first and the last query see, unwindowed
    if seq <= 0:
        return 0
    if window <= 0 or window >= last:
        return (first + last) * seq // 2
    below = (first + window) * (window - first + 1) // 2 if window >= first else 0  # views not yet cut
    return below + window * (last - max(window, first - 1))


#: Score-matrix traffic of unfused attention, in score-sized tensors (read, written): the scores
#: written by Q K^T; read and their softmax written; that read by dropout, which writes its
#: output and a mask (a byte per score: half a 16-bit tensor); that read by the product with V.
UNFUSED_SCORE_BYTES = (3.0, 3.5)


def swiglu(c: Call) -> OpInfo:
    """``silu(x[..., :F]) * x[..., F:]`` of ``x[..., 2F]`` (Shazeer, arXiv:2002.05202)."""
    c.dtypes(FLOAT_DTYPES, "a real floating-point tensor")
    c.min_ndim(0, 1, "at least 1-D [..., 2F]")
    x = c.args[0]
    if x.shape[-1] % 2:
        raise c.fail(f"the last dimension must be even (gate and up halves), got {x}", arg=0)
    out = dense((*x.shape[:-1], x.shape[-1] // 2), x.dtype)
    return c.info(out, 6 * out.numel)


def rotary(c: Call) -> OpInfo:
    """Rotary position embedding (Su et al., arXiv:2104.09864) of the q and k heads of a fused
    ``qkv`` laid out as :func:`attention` takes it; position = row mod ``seq``; v passes."""
    c.dtypes(FLOAT_DTYPES, "a real floating-point tensor")
    c.ndim(0, (2,), "2-D [T, (heads + 2 kv_heads) dh]")
    h, s = c.attrs["heads"], c.attrs["seq"]
    kv = c.attrs.get("kv_heads") or h
    _, dh = qkv_layout(c, h, kv)
    if dh % 2:
        raise c.fail(f"the head size {dh} must be even (rotated in pairs)", arg=0)
    x = c.args[0]
    if x.shape[0] % s:
        raise c.fail(f"seq = {s} must divide the token count T = {x.shape[0]}", attr="seq")
    rotated = x.shape[0] * (h + kv) * dh
    return c.info(dense(x.shape, x.dtype), 3 * rotated)


def embedding(c: Call) -> OpInfo:
    """Row gather: 0 flops; reads the ids and the gathered rows only."""
    ids, table = c.args
    c.dtypes(("i32", "i64"), "an integer tensor (i32 or i64)", (0,))
    c.dtypes(INEXACT_DTYPES, "a floating-point tensor", (1,))
    c.ndim(1, (2,), "2-D [V, D]")
    out = dense(ids.shape + (table.shape[1],), table.dtype)
    return c.info(out, 0, ids.nbytes + out.nbytes)


#: Pooling modes of :func:`embedding_bag` and the FLOPs per output element beyond ``P - 1`` adds
#: (or comparisons): a mean divides once (PyTorch ``nn.EmbeddingBag`` modes).
BAG_MODES = {"sum": 0, "mean": 1, "max": 0}


def embedding_bag(c: Call) -> OpInfo:
    """Pooled row gather (DLRM's sparse features, Naumov et al., arXiv:1906.00091, 2.1): the
    ``ids`` are ``bags x P`` in bag order, ``P = pooling``; each bag's ``P`` rows of ``table[V, D]``
    combine by ``mode`` into one ``D`` row. ``(P - 1) D`` FLOPs per bag (plus ``D`` for a mean);
    reads the ids and the ``bags P`` gathered rows, writes ``[bags, D]``."""
    ids, table = c.args
    c.dtypes(("i32", "i64"), "an integer tensor (i32 or i64)", (0,))
    c.dtypes(INEXACT_DTYPES, "a floating-point tensor", (1,))
    c.ndim(1, (2,), "2-D [V, D]")
    pooling = c.attrs["pooling"]
    if ids.numel % pooling:
        raise c.fail(f"pooling = {pooling} must divide the {ids.numel} ids of {c.desc(0)}", attr="pooling")
    hit = c.attrs.get("cache_hit", 1.0)
    if not 0.0 <= hit <= 1.0:
        raise c.fail(f"cache_hit must lie in [0, 1], got {hit}", attr="cache_hit")
    bags, dim = ids.numel // pooling, table.shape[1]
    out = dense((bags, dim), table.dtype)
    flops = bags * dim * (pooling - 1 + BAG_MODES[c.attrs["mode"]])
    return c.info(out, flops, ids.nbytes + bags * pooling * dim * DTYPE_BYTES[table.dtype])
