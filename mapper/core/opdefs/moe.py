"""Shape and work rules of the mixture-of-experts ops and multi-head latent attention
(formulas in docs/ops.md).

A routed layer is written ``gates = topk(softmax(matmul(x, Wr)), k = K)``, ``xs =
moe_dispatch(x, gates, topk = K)``, expert MLPs as :func:`grouped_matmul` (one GEMM per
expert over the rows routed to it: MegaBlocks, Gale et al., MLSys 2023; Megatron-Core's
GroupedGEMM), then ``moe_combine(ys, gates)``. Routing is dropless: every token reaches its
``K`` experts, so the experts' rows add up to ``T K`` whatever the balance, and the FLOPs
below are exact for any routing (balance only decides how they fall on the experts: the
cost model takes each expert's ``T K / E`` rows).
"""

from __future__ import annotations

from mapper.core.graph import DTYPE_BYTES
from mapper.core.opdefs.call import FLOAT_DTYPES, Call, OpInfo, dense
from mapper.core.opdefs.dnn import UNFUSED_SCORE_BYTES


def topk(c: Call) -> OpInfo:
    """The ``k`` largest entries of each row kept in place, the others 0; ``norm = 1`` divides
    the kept ones by their sum and ``scale`` multiplies them. ``k`` max-scans of the row (a
    comparison each), then ``2k`` per row to normalise (a sum and a multiply by
    ``scale / sum``) or ``k`` to scale alone."""
    c.dtypes(FLOAT_DTYPES, "a real floating-point tensor")
    c.min_ndim(0, 1, "at least 1-D [..., E]")
    x = c.args[0]
    e, k = x.shape[-1], c.attrs["k"]
    if k > e:
        raise c.fail(f"k = {k} is larger than the row ({e} experts): {c.desc(0)}", attr="k")
    rows = x.numel // e if e else 0
    norm = c.attrs["norm"]
    per_row = k * e + k * norm + k * int(bool(norm) or c.attrs["scale"] != 1.0)
    return c.info(dense(x.shape, x.dtype), rows * per_row)


def _routed(c: Call, i: int, gates: int, k: int | None = None) -> tuple[int, int, int]:
    """``(T, E, K)``: operand ``i`` holds ``T K`` routed rows of the ``T`` tokens of ``gates``."""
    c.ndim(gates, (2,), "2-D [T, E]")
    t, e = c.args[gates].shape
    rows = c.args[i].shape[0]
    if k is None:
        if rows % t or not 1 <= rows // t <= e:
            raise c.fail(f"{c.name(i)} must hold T K rows for the T = {t} tokens of gates and 1 <= K <= "
                         f"{e}: {c.desc(i)}, {c.desc(gates)}", arg=i)
        k = rows // t
    return t, e, k


def moe_dispatch(c: Call) -> OpInfo:
    """Each token's row copied once per expert it is routed to, ordered by expert (then token):
    0 FLOPs; reads the rows it copies and the gates."""
    c.dtypes(FLOAT_DTYPES, "a real floating-point tensor")
    c.ndim(0, (2,), "2-D [T, H]")
    x = c.args[0]
    t, e, k = _routed(c, 0, 1, c.attrs["topk"])
    if c.args[1].shape[0] != x.shape[0]:
        raise c.fail(f"x and gates must have a row per token: {c.desc(0)}, {c.desc(1)}", arg=1)
    if k > e:
        raise c.fail(f"topk = {k} is larger than the {e} experts of gates", attr="topk")
    out = dense((t * k, x.shape[1]), x.dtype)
    return c.info(out, 0, out.nbytes + c.args[1].nbytes)


def grouped_matmul(c: Call) -> OpInfo:
    """Expert ``e``'s rows of ``x`` (as :func:`moe_dispatch` orders them) times ``w[e]``:
    ``2 * R * K * N`` for the ``R = T topk`` rows. It reads the matrices of the experts that
    balanced routing reaches: all ``E``, or ``R`` of them when there are fewer rows (a decode
    step's few tokens)."""
    c.dtypes(FLOAT_DTYPES, "a real floating-point tensor")
    c.ndim(0, (2,), "2-D [T topk, K]")
    c.ndim(2, (3,), "3-D [E, K, N]")
    x, _, w = c.args
    _, e, _ = _routed(c, 0, 1)
    if w.shape[0] != e:
        raise c.fail(f"w must have a matrix per expert ({e} in gates): {c.desc(2)}", arg=2)
    if w.shape[1] != x.shape[1]:
        raise c.fail(f"inner dimensions differ: {c.desc(0)}, {c.desc(2)} ({x.shape[1]} != {w.shape[1]})", arg=2)
    out = dense((x.shape[0], w.shape[2]), x.dtype)
    # the experts a balanced routing reaches: all of them, or one per row when there are fewer rows
    read = x.nbytes + c.args[1].nbytes + w.nbytes * min(e, x.shape[0]) / e
    return c.info(out, 2 * x.shape[0] * x.shape[1] * w.shape[2], read)


def moe_combine(c: Call) -> OpInfo:
    """Each token's expert outputs weighted by its gates and summed: a multiply and an add per
    routed row's element, ``2 * T * topk * H``."""
    c.dtypes(FLOAT_DTYPES, "a real floating-point tensor")
    c.ndim(0, (2,), "2-D [T topk, H]")
    y = c.args[0]
    t, _, _ = _routed(c, 0, 1)
    return c.info(dense((t, y.shape[1]), y.dtype), 2 * y.numel)


def mla_attention(c: Call) -> OpInfo:
    """Multi-head latent attention's core (DeepSeek-AI, "DeepSeek-V2", arXiv:2405.04434, 2.1.3,
    decoupled RoPE): rotary embedding of each query head's last ``dr`` columns and of the
    shared key ``kr`` (3 FLOPs per rotated element), each head's key ``[k_nope | kr]``, then
    attention with query-key width ``dn + dr`` and value width ``dv``:
    ``2 B heads S^2 (dn + dr + dv) + 5 B heads S^2``. ``fused = 0`` adds the score matrix's
    traffic as unfused attention does."""
    c.dtypes(FLOAT_DTYPES, "a real floating-point tensor")
    for i, form in enumerate(("2-D [T, heads (dn + dr)]", "2-D [T, heads (dn + dv)]", "2-D [T, dr]")):
        c.ndim(i, (2,), form)
    q, kv, kr = c.args
    h, s = c.attrs["heads"], c.attrs["seq"]
    t, dr = q.shape[0], kr.shape[1]
    for i in (1, 2):
        if c.args[i].shape[0] != t:
            raise c.fail(f"q, kv and kr must have a row per token: {c.desc(0)}, {c.desc(i)}", arg=i)
    for i in (0, 1):
        if c.args[i].shape[1] % h:
            raise c.fail(f"heads = {h} must divide {c.name(i)}'s width: {c.desc(i)}", attr="heads")
    dq = q.shape[1] // h
    dn = dq - dr
    dv = kv.shape[1] // h - dn
    if dn < 1 or dv < 1 or dr % 2:
        raise c.fail(f"each query head (width {dq}) must be dn columns then the dr = {dr} (even) rotary "
                     f"columns of kr, and each kv head (width {kv.shape[1] // h}) dn key then dv value "
                     f"columns, dn and dv >= 1", arg=2)
    if t % s:
        raise c.fail(f"seq = {s} must divide the token count T = {t} (T = batch * seq)", attr="seq")
    b = t // s
    pairs = b * h * s * s
    flops = 3 * t * dr * (h + 1) + 2 * pairs * (dq + dv) + 5 * pairs
    out = dense((t, h * dv), q.dtype)
    read, written = float(sum(x.nbytes for x in c.args)), float(out.nbytes)
    if not c.attrs["fused"]:
        scores = pairs * DTYPE_BYTES[q.dtype]
        read += UNFUSED_SCORE_BYTES[0] * scores
        written += UNFUSED_SCORE_BYTES[1] * scores
    return c.info(out, flops, read, written)
