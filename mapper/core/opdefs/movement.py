"""Shape rules of the data-movement ops: concat, split, reshape, transpose,
and the gathers and scatters by index (no FLOPs but a scatter's reduction;
docs/ops.md)."""

from __future__ import annotations

from math import prod

from mapper.core.opdefs.call import ANY_DTYPES, NUMERIC_DTYPES, Call, OpInfo, dense, fmt

#: Index operands' dtypes.
INDEX_DTYPES = ("i32", "i64")


def concat(c: Call) -> OpInfo:
    """Concatenation along ``axis``: a copy, 0 flops."""
    c.dtypes(ANY_DTYPES, "a tensor")
    first = c.args[0]
    c.min_ndim(0, 1, "at least 1-D")
    ax = c.axis("axis", len(first.shape))
    total = 0
    for i, t in enumerate(c.args):
        same = len(t.shape) == len(first.shape) and all(
            d == e for j, (d, e) in enumerate(zip(t.shape, first.shape)) if j != ax)
        if not same:
            raise c.fail(f"shapes differ outside axis {ax}: {c.desc(0)}, {c.desc(i)}", arg=i)
        total += t.shape[ax]
    shape = list(first.shape)
    shape[ax] = total
    return c.info(dense(shape, first.dtype), 0)


def split(c: Call) -> OpInfo:
    """The ``index``-th of ``parts`` equal chunks: reads and writes only that chunk."""
    (x,) = c.args
    c.dtypes(ANY_DTYPES, "a tensor")
    c.min_ndim(0, 1, "at least 1-D")
    ax = c.axis("axis", len(x.shape))
    parts, index = c.attrs["parts"], c.attrs["index"]
    if x.shape[ax] % parts:
        raise c.fail(f"parts = {parts} does not divide axis {ax} of {c.desc(0)} "
                     f"({x.shape[ax]} % {parts} != 0)", attr="parts")
    if not 0 <= index < parts:
        raise c.fail(f"index = {index} is out of range for parts = {parts} (valid: 0 .. {parts - 1})",
                     attr="index")
    shape = list(x.shape)
    shape[ax] //= parts
    out = dense(shape, x.dtype)
    return c.info(out, 0, out.nbytes)


def reshape(c: Call) -> OpInfo:
    """A view with a new shape: no flops and no bytes."""
    (x,) = c.args
    c.dtypes(ANY_DTYPES, "a tensor")
    shape = list(c.attrs["shape"])
    if any(d == 0 or d < -1 for d in shape) or shape.count(-1) > 1:
        raise c.fail(f"shape = {fmt(shape)} must hold positive sizes and at most one -1",
                     attr="shape")
    known = prod(d for d in shape if d != -1)
    if -1 in shape:
        if x.numel % known:
            raise c.fail(f"cannot infer the -1 in shape = {fmt(shape)}: x ({x}) has "
                         f"{x.numel} elements, not a multiple of {known}", attr="shape")
        shape[shape.index(-1)] = x.numel // known
    elif known != x.numel:
        raise c.fail(f"shape = {fmt(shape)} has {known} elements but x ({x}) has {x.numel}",
                     attr="shape")
    return c.info(dense(shape, x.dtype), 0, 0, 0)


def transpose(c: Call) -> OpInfo:
    """An axis permutation, materialised: a copy, 0 flops."""
    (x,) = c.args
    c.dtypes(ANY_DTYPES, "a tensor")
    nd = len(x.shape)
    perm = c.attrs["perm"]
    if perm is None:
        perm = tuple(reversed(range(nd)))
        c.attrs["perm"] = perm
    if sorted(perm) != list(range(nd)):
        raise c.fail(f"perm = {fmt(perm)} is not a permutation of the axes 0 .. {nd - 1} "
                     f"of {c.desc(0)}", attr="perm")
    return c.info(dense(tuple(x.shape[i] for i in perm), x.dtype), 0)


def opaque(c: Call) -> OpInfo:
    """An op mapper has no rule or kernel for (``kind`` names it, e.g. an imported
    ONNX op): its output shape, dtype (default: the first operand's) and FLOPs are
    given; bytes are its operands' and output's."""
    for i in range(len(c.args)):  # operands of any dtypes, each a known one
        c.dtypes(ANY_DTYPES, "a tensor", indices=(i,))
    dtype = c.attrs["dtype"]
    if dtype is not None and dtype not in ANY_DTYPES:
        raise c.fail(f"dtype = {dtype!r} is not a dtype ({', '.join(ANY_DTYPES)})", attr="dtype")
    shape = list(c.attrs["shape"])
    if any(d < 1 for d in shape):
        raise c.fail(f"shape = {fmt(shape)} must hold positive sizes", attr="shape")
    flops = c.attrs["flops"]
    if flops < 0 or flops > 1e30:
        raise c.fail(f"flops = {flops!r} must be between 0 and 1e30", attr="flops")
    return c.info(dense(shape, dtype or c.args[0].dtype), flops)


def gather_nd(c: Call) -> OpInfo:
    """ONNX GatherND: each ``k``-tuple in the last axis of ``indices`` picks a slice of ``data``
    after its ``batch_dims`` leading axes. No FLOPs; reads the indices and the slices it picks."""
    data, idx = c.args
    c.dtypes(ANY_DTYPES, "a tensor", (0,))
    c.dtypes(INDEX_DTYPES, "an integer tensor (i32 or i64)", (1,))
    b = c.attrs["batch_dims"]
    c.min_ndim(1, 1, "at least 1-D [..., k]")
    k = idx.shape[-1]
    if b >= min(len(data.shape), len(idx.shape)) or data.shape[:b] != idx.shape[:b]:
        raise c.fail(f"batch_dims = {b} must count leading axes that data and indices share: "
                     f"{c.desc(0)}, {c.desc(1)}", attr="batch_dims")
    if not 1 <= k <= len(data.shape) - b:
        raise c.fail(f"the index tuples' length {k} (indices' last axis) must be 1 .. {len(data.shape) - b}, "
                     f"the axes of data after batch_dims = {b}: {c.desc(0)}", arg=1)
    out = dense(idx.shape[:-1] + data.shape[b + k:], data.dtype)
    return c.info(out, 0, idx.nbytes + out.nbytes)


#: ``scatter_elements`` reductions.
SCATTER_REDUCTIONS = ("none", "add", "mul", "max", "min")


def scatter_elements(c: Call) -> OpInfo:
    """ONNX ScatterElements: a copy of ``data`` with each ``updates`` element written (or, with a
    ``reduction``, combined: one FLOP each) at its position with the ``axis`` coordinate
    ``indices`` gives."""
    data, idx, upd = c.args
    c.dtypes(ANY_DTYPES if c.attrs["reduction"] == "none" else NUMERIC_DTYPES,
             "a tensor" if c.attrs["reduction"] == "none" else "a numeric tensor", (0, 2))
    c.dtypes(INDEX_DTYPES, "an integer tensor (i32 or i64)", (1,))
    c.min_ndim(0, 1, "at least 1-D")
    axis = c.axis("axis", len(data.shape))
    if idx.shape != upd.shape or len(idx.shape) != len(data.shape):
        raise c.fail(f"indices and updates must have one shape, of data's rank: {c.desc(0)}, {c.desc(1)}, "
                     f"{c.desc(2)}", arg=2)
    if any(i > d for k, (i, d) in enumerate(zip(idx.shape, data.shape)) if k != axis):
        raise c.fail(f"indices must be no larger than data along the axes other than axis = {axis}: "
                     f"{c.desc(0)}, {c.desc(1)}", arg=1)
    return c.info(dense(data.shape, data.dtype), 0 if c.attrs["reduction"] == "none" else upd.numel)
