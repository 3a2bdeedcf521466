"""What a task moves and computes, as the cost model sees it: working set,
bytes in and out of the cache, the FLOPs of its kernel, Hockney's vector
length, and the GEMM view of matmul and conv2d (dimensions, shape factor,
packing and im2col copies)."""

from __future__ import annotations

import math

from mapper.core.graph import DTYPE_BYTES, Task
from mapper.core.opdefs.dnn import held_positions, visible_keys
from mapper.core.ops import ATTENTION_OPS
from mapper.platform.loader import Device

MIB = float(2**20)


def working_set(task: Task) -> float:
    """Bytes of the distinct tensors ``task`` touches: its operands (each once)
    and its output; a task without operands (explicit or hand-counted work)
    counts its traffic, bytes read + written. An iterated kernel (a stencil
    with ``steps``) moves its tensors many times but touches them once."""
    if not task.operands or task.output is None:
        return float(task.bytes_read + task.bytes_written)
    distinct = {(op.kind, op.name): op.type.nbytes for op in task.operands}
    return float(sum(distinct.values()) + task.output.nbytes)


#: Binary ops with NumPy broadcasting (the ``elementwise`` class's two-operand ops).
BROADCAST_OPS = frozenset({"add", "sub", "mul", "div"})


def in_cache_bytes(task: Task) -> float:
    """Bytes a broadcasting binary op loads and stores when its working set is
    in cache: one access per operand per output element (a broadcast bias is
    loaded as often as a full operand: bound by loads and stores, not by the
    distinct bytes) plus the output; ``task.bytes`` for other tasks. Measured:
    GPT-2's bias adds took as long as its residual adds of the same output,
    while the distinct bytes put them at two thirds."""
    out = task.output
    if task.op not in BROADCAST_OPS or out is None or len(task.operands) < 2:
        return float(task.bytes)
    return float(sum(out.numel * DTYPE_BYTES[o.type.dtype] for o in task.operands) + out.nbytes)


#: Operand kinds that a task reads from memory even when its working set
#: fits the cache: in a graph run, weights and graph inputs were last touched
#: a whole pass earlier (a task's output was just written by its producer).
COLD_KINDS = ("weight", "input")


def cold_bytes(task: Task) -> float:
    """Bytes ``task`` reads from its weights and graph inputs
    (:data:`COLD_KINDS`; each once, at most the bytes it reads from them: an
    embedding reads the table's gathered rows only). Where the task's
    working set fits the cache these still come from memory (as
    :func:`gemm_cold` has a GEMM's weight packed from memory). Measured:
    GPT-2's first layernorm, on the graph input, took 1.7-1.8 ms against
    1.0 ms for the second, on a task's output, while the executor started a
    thread per pass; with the CPU's lane on the calling thread the two took
    1.14 and 1.09 ms, and counting graph inputs as cached left the share of
    the examples' tasks within 15 % unchanged (docs/execution.md)."""
    cold = {(op.kind, op.name): op.type.nbytes for op in task.operands if op.kind in COLD_KINDS}
    hot = {(op.kind, op.name): op.type.nbytes for op in task.operands if op.kind not in COLD_KINDS}
    return float(max(0.0, min(sum(cold.values()), task.bytes_read - sum(hot.values()))))


def fits_cache(task: Task, device: Device) -> bool:
    """True when ``task``'s :func:`working_set` fits ``device``'s cache."""
    if device.cache_mib is None or device.cache_bandwidth_gbs is None:
        return False
    return working_set(task) <= device.cache_mib * MIB


def kernel_flops(task: Task) -> float:
    """FLOPs the kernel performs: the catalogue's count (``task.flops``),
    except for causal ``attention``, whose kernel visits only the keys up to
    each query, ``(S + 1) / (2 S)`` of the score matrix the catalogue counts (after ``C`` cached
    positions, ``(C + (S + 1) / 2) / (C + S)``; with a sliding window only the last ``W`` of them,
    :func:`~mapper.core.opdefs.dnn.visible_keys`)
    (measured: 512-token causal attention takes 0.57 of the full one's time);
    unfused attention (``fused = 0``) computes the whole matrix and masks it."""
    flops = float(task.flops)
    attrs = dict(task.attrs)
    if task.op in ATTENTION_OPS and attrs.get("causal") and attrs.get("fused", 1):
        seq, cache = int(attrs.get("seq") or 0), int(attrs.get("cache") or 0)
        if seq > 0:  # a query sees the cache and the new keys up to its own (in its window)
            flops *= visible_keys(seq, cache, int(attrs.get("window") or 0)) / (seq * (cache + seq))
    return flops


def vector_length(task: Task) -> int | None:
    """The length ``n`` of Hockney's ``r = r_inf n / (n + n_1/2)`` for
    ``task``'s kernel: for ``matmul`` and ``conv2d`` (an im2col GEMM per
    image) the smallest of the GEMM's dimensions ``M, N, K`` (output rows or
    channels, output columns or pixels, the reduction), since a GEMM short in
    any one of them runs below the asymptotic rate; for ``attention`` the keys
    a query attends, the sequence plus its cache (a decode's one query over a
    long cache is a long kernel, not a length-1 one); for ``maxpool`` and ``avgpool`` the output row's width
    (the kernel sweeps a row's window taps at a time, and a row's edges cost
    the same however long it is: one thread's maxpool 3x3 stride 2 took 10.1,
    11.2, 13.1 and 16.8 ns per output at rows of 112, 56, 28 and 14, a
    half-length of about 10); None for other ops (their ``half_length``
    entries do nothing)."""
    out = task.output
    if task.op == "matmul" and out is not None and len(out.shape) >= 1 and task.operands:
        m = math.prod(out.shape[:-1]) if len(out.shape) > 1 else 1
        k = task.operands[0].type.shape[-1] if task.operands[0].type.shape else 1
        return int(min(m, out.shape[-1], k)) or None
    if task.op == "conv2d" and out is not None and len(out.shape) == 4 and len(task.operands) > 1:
        w = task.operands[1].type.shape
        if len(w) == 4:
            return int(min(w[0], w[1] * w[2] * w[3], out.shape[2] * out.shape[3])) or None
    if task.op == "conv_transpose2d":
        dims = gemm_dims(task)
        return None if dims is None else int(min(dims[1:])) or None
    if task.op == "grouped_matmul":
        dims = _grouped_dims(task)
        return int(min(dims[1:])) if dims is not None else None
    if task.op in ATTENTION_OPS:
        attrs = dict(task.attrs)
        seq = attrs.get("seq")
        return int(seq) + int(attrs.get("cache") or 0) if seq else None
    if task.op in ("maxpool", "avgpool") and out is not None and len(out.shape) == 4:
        return int(out.shape[3]) or None
    return None


#: conv2d lowers to a GEMM through im2col when the per-group GEMM's inner
#: size ``Cg R S`` and output channels ``K / groups`` both reach this (the
#: kernel's ``mapper.kernels.conv.IM2COL_MIN``; a test keeps them equal).
IM2COL_MIN = 16

#: Dtypes whose GEMMs run in the BLAS library (the others in Numba loops).
GEMM_DTYPES = frozenset({"f16", "bf16", "f32", "f64", "c64", "c128"})


def gemm_dims(task: Task) -> tuple[int, int, int, int] | None:
    """``(batch, M, N, K)`` of the GEMM a ``matmul`` or ``conv2d`` task runs,
    as the kernels call it (``C[M, N] = A[M, K] B[K, N]``, ``batch`` times),
    or None for other tasks (and for conv2d's direct path, integer dtypes,
    undeclared shapes, and matrix-vector products, ``M`` or ``N`` of 1: BLAS
    runs them without packing, at the speed of reading the matrix, which
    the roofline prices; ResNet-50's 1 x 2048 x 1000 classifier ran in 1.2
    ms, the packing model said 2.5).

    ``matmul`` with a 2-D right operand folds its batch into the rows of
    ``A`` (one GEMM); with batched right operands it is a batch of GEMMs.
    ``conv2d`` is an im2col GEMM per image and group: ``M`` the group's
    output channels, ``N`` the output pixels, ``K = Cg R S``
    (Chellapilla et al., IWFHR 2006). ``conv_transpose2d`` is the GEMM of
    that product's transpose per image and group, ``col = w_g^T x_g``: ``M =
    (K/groups) R S``, ``N`` the input pixels, ``K = C/groups``, whose columns
    col2im adds into the output (:func:`im2col_bytes`).
    """
    out = task.output
    if out is None or task.dtype not in GEMM_DTYPES or len(task.operands) < 2:
        return None
    if task.op == "grouped_matmul":
        return _grouped_dims(task)
    a, b = task.operands[0].type.shape, task.operands[1].type.shape
    if task.op == "matmul" and len(a) >= 2 and len(b) >= 2 and len(out.shape) >= 2:
        m, k, n = a[-2], a[-1], b[-1]
        batch = math.prod(out.shape[:-2])
        folded = len(b) == 2 or all(d == 1 for d in b[:-2])
        if (batch * m if folded else m) == 1 or n == 1:
            return None  # a matrix-vector product: no packing, bound by reading the matrix (the roofline)
        return (1, batch * m, n, k) if folded else (batch, m, n, k)
    if task.op == "conv2d" and len(a) == 4 and len(b) == 4 and len(out.shape) == 4:
        groups = int(dict(task.attrs).get("groups") or 1)
        kg, crs = b[0] // groups, b[1] * b[2] * b[3]
        if crs < IM2COL_MIN or kg < IM2COL_MIN or out.shape[2] * out.shape[3] == 1:
            return None
        return (a[0] * groups, kg, out.shape[2] * out.shape[3], crs)
    if task.op == "conv_transpose2d" and len(a) == 4 and len(b) == 4 and a[2] * a[3] > 1:
        groups = int(dict(task.attrs).get("groups") or 1)
        return (a[0] * groups, b[1] * b[2] * b[3], a[2] * a[3], b[0] // groups)
    return None


def _grouped_dims(task: Task) -> tuple[int, int, int, int] | None:
    """``(E, M, N, K)`` of a ``grouped_matmul``: a GEMM per expert over its share of the ``R``
    routed rows, ``M = R / E`` under balanced routing (rounded up); None for a matrix-vector
    product or other shapes."""
    if len(task.operands) != 3 or task.output is None:
        return None
    (rows, k), w = task.operands[0].type.shape, task.operands[2].type.shape
    if len(w) != 3 or len(task.output.shape) != 2:
        return None
    experts, n = w[0], w[2]
    m = math.ceil(rows / experts)
    return None if m == 1 or n == 1 else (experts, m, n, k)


def im2col_bytes(task: Task) -> float:
    """Bytes ``conv2d``'s im2col moves per call: it writes the column matrix
    once and reads the input along each of its rows at the filter's column
    stride ``s``, touching ``s`` times as many input bytes as it writes, so
    ``(1 + s)`` times the matrix's bytes (a stride-2 stem gathered at 0.4 GB/s
    where stride-1 3x3 layers ran at 11 GB/s counted by the matrix alone).
    0 for a 1x1 filter with stride 1 and no padding (the input is the matrix)
    and for tasks that are not im2col GEMMs. ``conv_transpose2d``'s col2im
    reads the column matrix its GEMM wrote and adds it into the output: twice
    the matrix's bytes."""
    if task.op == "conv_transpose2d":  # col2im reads the GEMM's columns and adds them into the output
        dims = gemm_dims(task)
        return 0.0 if dims is None else float(2 * dims[0] * dims[1] * dims[2] * DTYPE_BYTES[task.dtype])
    dims = gemm_dims(task) if task.op == "conv2d" else None
    if dims is None:
        return 0.0
    attrs = dict(task.attrs)
    _, _, r, s = task.operands[1].type.shape
    stride = _pair(attrs.get("stride"), 1)
    if (r, s) == (1, 1) and stride == (1, 1) and _pair(attrs.get("padding"), 0) == (0, 0):
        return 0.0
    batch, _, n, k = dims
    return float(batch * n * k * DTYPE_BYTES[task.operands[0].type.dtype] * (1 + stride[1]))


def _pair(value: object, default: int) -> tuple[int, int]:
    """An ``int2`` attribute (an int or a pair; None: ``default``) as a pair."""
    if value is None:
        return (default, default)
    if isinstance(value, (tuple, list)):
        return (int(value[0]), int(value[-1]))
    return (int(value), int(value))  # type: ignore[call-overload]


def gemm_shape_factor(dims: tuple[int, int, int, int], half: tuple[float, float, float]) -> float:
    """``prod n / (n + n_1/2)`` over the GEMM's ``M, N, K``: Hockney's
    half-performance law (Hockney, SIAM 1996) for each dimension, the
    fraction of the asymptotic rate a GEMM of that shape reaches."""
    _, m, n, k = dims
    f = 1.0
    for size, h in zip((m, n, k), half):
        f *= size / (size + h) if size > 0 else 0.0
    return f


def gemm_cold(task: Task) -> tuple[bool, bool]:
    """Whether the ``A`` and ``B`` operands of ``task``'s GEMM come from
    memory rather than the cache: a weight does (a graph's weights were last
    used a whole pass earlier); a tensor a task or the caller has just
    written does not. matmul: ``A``, ``B`` are operands 0 and 1; conv2d:
    ``A`` is the filter and ``B`` the column matrix im2col has just written,
    or for a 1x1 filter without im2col the input itself."""
    ops = task.operands
    if task.op == "conv2d" and len(ops) >= 2:
        return (ops[1].kind == "weight", im2col_bytes(task) == 0 and ops[0].kind == "weight")
    if task.op == "conv_transpose2d" and len(ops) >= 2:  # A: the filter, transposed; B: the input
        return (ops[1].kind == "weight", ops[0].kind == "weight")
    if task.op == "grouped_matmul" and len(ops) == 3:
        return (ops[0].kind == "weight", ops[2].kind == "weight")
    if len(ops) >= 2:
        return (ops[0].kind == "weight", ops[1].kind == "weight")
    return (False, False)


def gemm_pack_time(dims: tuple[int, int, int, int], pack_ns: tuple[float, float, float],
                   cold_ns: tuple[float, float] | None = None, cold: tuple[bool, bool] = (False, False)) -> float:
    """Seconds a GEMM spends beside its multiply-adds: packing ``A[M, K]`` and
    ``B[K, N]`` into the kernel's panels and updating ``C[M, N]`` (the three
    memory-bound layers of Goto and van de Geijn, "Anatomy of
    high-performance matrix multiplication", ACM TOMS 34(3), 2008),
    ``batch (a M K + b K N + c M N)`` nanoseconds for ``pack_ns = (a, b, c)``;
    an operand that comes from memory (``cold``, :func:`gemm_cold`) packs at
    ``cold_ns = (a, b)`` where given."""
    batch, m, n, k = dims
    a, b, c = pack_ns
    if cold_ns is not None:
        a = cold_ns[0] if cold[0] else a
        b = cold_ns[1] if cold[1] else b
    return batch * (a * m * k + b * k * n + c * m * n) * 1e-9


#: Rows of the smallest tensor-core tile: the m16n8k16 MMA of SM80 and later (NVIDIA, PTX ISA,
#: "Matrix multiply-accumulate operation using mma instruction", shapes .m16n8k16).
MMA_ROWS = 16
#: Block-scaled formats (OCP MX and NVFP4), run by Blackwell's ``tcgen05.mma ... .block_scale``.
BLOCK_SCALED = frozenset({"mxfp8", "nvfp4"})
#: Rows of the smallest block-scaled MMA a CTA issues: ``tcgen05.mma`` of kinds ``mxf8f6f4`` and
#: ``mxf4nvf4`` takes M = 128 per CTA (NVIDIA, PTX ISA, "tcgen05.mma" valid shapes; two CTAs pair
#: up for 256), so a decode GEMM of 8 token rows does the MMA work of 128. vLLM's SM100 NVFP4
#: kernels use a 128-row tile per SM at every M, 1 to 16, 17 to 256 and above
#: (csrc/quantization/fp4/nvfp4_scaled_mm_kernels.cu, ``PerSmTileShape_MNK``).
SCALED_MMA_ROWS = 128


def mma_rows(task: Task) -> int:
    """Rows of the smallest MMA ``task``'s GEMM can issue: :data:`SCALED_MMA_ROWS` for a block-scaled
    format (``task.precision``), :data:`MMA_ROWS` otherwise."""
    return SCALED_MMA_ROWS if task.precision in BLOCK_SCALED else MMA_ROWS


def gemm_tile(tile: tuple[int, int, int], m: int, rows: int = MMA_ROWS) -> tuple[int, int, int]:
    """The block tile a GEMM of ``m`` rows runs: the device's tile, with its rows cut to ``m``
    rounded up to whole MMA rows (``rows``, :func:`mma_rows`) when ``m`` is smaller, as the
    libraries' small-M kernels do (a decode step's GEMM of a few token rows does not pay for 128
    where the MMA is 16 rows; it does where the MMA is 128)."""
    tm, tn, tk = tile
    return min(tm, rows * max(1, math.ceil(m / rows))), tn, tk


def gemm_grid(task: Task, dims: tuple[int, int, int, int], tile: tuple[int, int, int], units: int,
               max_split: int) -> tuple[int, int, int, int]:
    """``(useful, blocks, split, waves)`` of a GEMM's grid (:func:`wave_efficiency`). A block-scaled
    GEMM is not split along K: the SM100 block-scaled kernels run CUTLASS's persistent
    data-parallel tile scheduler (``GemmUniversal`` with no scheduler named: one output tile per
    CTA; vLLM's nvfp4_scaled_mm_kernels.cu, FlashInfer's ``mm_fp4`` CUTLASS backend)."""
    batch, m, n, k = dims
    if task.op in ("conv2d", "conv_transpose2d"):
        groups = int(dict(task.attrs).get("groups") or 1)
        batch, n = groups, n * (batch // max(groups, 1))
    tm, tn, tk = gemm_tile(tile, m, mma_rows(task))
    if task.precision in BLOCK_SCALED:
        max_split = 1
    blocks = batch * math.ceil(m / tm) * math.ceil(n / tn)
    split = max(1, min(max_split, units // blocks, math.ceil(k / tk))) if blocks else 1
    return batch * m * n, blocks, split, math.ceil(blocks * split / units)


def wave_efficiency(task: Task, dims: tuple[int, int, int, int], tile: tuple[int, int, int], units: int,
                    max_split: int = 1) -> float:
    """The share of a GPU's matrix throughput a GEMM keeps busy. The output
    is cut into ``tile[0] x tile[1]`` blocks, one per unit (SM) at a time,
    in whole waves of ``units`` blocks; where the blocks cannot fill the
    units, ``K`` is split into up to ``max_split`` slices of at least
    ``tile[2]`` (split-K, as cuBLAS and CUTLASS do; Osama et al.,
    "Stream-K", PPoPP 2023, section 2). So a GEMM pays for whole tiles and
    whole waves (NVIDIA, "Matrix Multiplication Background User's Guide":
    tile and wave quantization): ``useful / (waves * units * tile area /
    split)``; a GEMM of fewer rows than the tile runs a shorter one
    (:func:`gemm_tile`). conv2d runs as an implicit GEMM whose rows are all images'
    output pixels (Chetlur et al., "cuDNN", arXiv:1410.0759, 2014)."""
    useful, blocks, split, waves = gemm_grid(task, dims, tile, units, max_split)
    if blocks == 0:
        return 1.0
    tm, tn, _ = gemm_tile(tile, dims[1], mma_rows(task))
    return useful / (waves * units * tm * tn / split)


def pipeline_fill_time(task: Task, dims: tuple[int, int, int, int], tile: tuple[int, int, int], units: int,
                       max_split: int, stages: int, bandwidth_gbs: float) -> float:
    """Seconds a GEMM's software pipeline is not yet (or no longer) busy: a
    unit loads its first ``stages`` K blocks of A and B (``(m + n) k``
    elements each, at most as many as its K slice holds) before its first
    multiply and stores its output block after its last, each at its share
    ``bandwidth / units`` of the memory bandwidth, as every unit does the
    same at once. The multistage mainloop of CUTLASS (``kStages``; NVIDIA,
    CUTLASS ``default_gemm_configuration.h``) and cuBLAS: the latency that a
    one- or two-wave GEMM cannot hide, paid once per call."""
    if stages <= 0 or bandwidth_gbs <= 0:
        return 0.0
    _, blocks, split, _ = gemm_grid(task, dims, tile, units, max_split)
    if blocks == 0:
        return 0.0
    tm, tn, tk = gemm_tile(tile, dims[1], mma_rows(task))
    item = float(DTYPE_BYTES.get(task.dtype, 4))
    depth = min(stages, math.ceil(math.ceil(dims[3] / split) / tk))
    return (depth * (tm + tn) * tk * item + tm * tn * item) / (bandwidth_gbs * 1e9 / units)


def attention_wave_efficiency(task: Task, tile_rows: int, units: int) -> float:
    """The share of a GPU's units a fused attention kernel keeps busy: one
    block per (sequence, head, ``tile_rows`` queries), in whole waves of
    ``units`` blocks (the grid of FlashAttention, Dao et al., NeurIPS 2022,
    algorithm 1, and of TensorRT's fused multi-head attention). With fewer
    queries per sequence than the tile (a decode step's one), a block holds
    the queries of every head that shares a key-value head (FlashAttention-2
    packs a grouped-query group into the rows when decoding,
    ``seqlenq_ngroups_swapped`` in its ``flash_api.cpp``), runs as few rows as
    whole MMA steps hold (:func:`gemm_tile`), and where the blocks cannot
    fill the units the keys are split into chunks of at least ``tile_rows``
    run side by side (Dao, Haziza, Massa, Sizov, "Flash-Decoding for
    long-context inference", 2023; FlashAttention's ``num_splits``), as
    split-K splits a GEMM. An attention's gradient task has the forward's grid (its sequences from
    the forward's query rows). 1 for other tasks and undeclared shapes."""
    attrs = dict(task.attrs)
    seq, heads, out = int(attrs.get("seq") or 0), int(attrs.get("heads") or 0), task.output
    if task.op not in ATTENTION_OPS or seq <= 0 or heads <= 0 or out is None or not out.shape:
        return 1.0
    tokens = out.shape[0]
    if task.backward and task.operands and task.operands[0].type.shape:  # its output is the flat gradients
        tokens = task.operands[0].type.shape[0]
    batch = max(tokens // seq, 1)
    groups, per_block, split = heads, seq, 1  # blocks per sequence, and query rows each
    if seq < tile_rows:
        kv = int(attrs.get("kv_heads") or heads)
        if kv > 0 and heads % kv == 0:
            groups, per_block = kv, seq * (heads // kv)
    rows = gemm_tile((tile_rows, 1, 1), per_block)[0]
    blocks = batch * groups * math.ceil(per_block / rows)
    if seq < tile_rows:
        keys = seq + held_positions(int(attrs.get("cache") or 0), int(attrs.get("window") or 0))
        split = max(1, min(units // blocks, math.ceil(keys / tile_rows)))
    waves = math.ceil(blocks * split / units)
    return (batch * groups * per_block / rows) * split / (waves * units)
