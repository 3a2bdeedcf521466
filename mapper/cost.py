"""The cost table: what each task costs on each device, and each edge between
each pair of devices.

:func:`build_cost_table` applies the device-latency model of
``docs/cost_model.md``: a roofline (Williams, Waterman, Patterson, "Roofline",
CACM 52(4), 2009) with a launch overhead, whose compute side follows Amdahl's
law (Amdahl, AFIPS 1967): the serial fraction runs at one lane's rate, as in
the heterogeneous cost model of Wilhelm et al., arXiv:2208.06321. The memory
side is cache-aware (Ilic, Pratas, Sousa, "Cache-aware roofline model", IEEE
CAL 13(1), 2014): a working set that fits the device's declared cache moves
at the cache's bandwidth. Explicit
per-device costs win over the model. Transfers follow DESIGN.md section 3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from mapper.errors import InfeasibleError, InputError, OptionsError, SourceSpan
from mapper.graph import DTYPE_BYTES, Task, TaskGraph
from mapper.platform import DEVICE_KINDS, Device, Platform

INF = math.inf
GIB = float(2**30)
MIB = float(2**20)

#: Compute efficiency: the fraction of a device's peak FLOP rate that an op
#: class reaches, per device kind. Sources in docs/cost_model.md.
EFF_COMPUTE: dict[str, dict[str, float]] = {
    "cpu": {
        "gemm": 0.90, "conv": 0.70, "attention": 0.50, "elementwise": 0.50, "activation": 0.50,
        "norm": 0.50, "pool": 0.50, "reduction": 0.50, "stencil": 0.50, "sparse": 0.50,
        "fft": 0.30, "shape": 0.50, "embedding": 0.50, "task": 1.00,
    },
    "gpu": {
        "gemm": 0.90, "conv": 0.75, "attention": 0.60, "elementwise": 0.50, "activation": 0.50,
        "norm": 0.50, "pool": 0.50, "reduction": 0.50, "stencil": 0.50, "sparse": 0.50,
        "fft": 0.30, "shape": 0.50, "embedding": 0.50, "task": 1.00,
    },
    "fpga": {
        "gemm": 0.70, "conv": 0.60, "attention": 0.50, "elementwise": 0.50, "activation": 0.50,
        "norm": 0.50, "pool": 0.50, "reduction": 0.50, "stencil": 0.70,
        "fft": 0.50, "shape": 0.50, "task": 1.00,
    },
}

#: Memory efficiency: the fraction of the declared bandwidth that streaming
#: kernels reach (STREAM / BabelStream / Shuhai), per device kind.
EFF_MEMORY: dict[str, float] = {"cpu": 0.80, "gpu": 0.90, "fpga": 0.90}

#: Dtypes whose rate falls back to another dtype's when not declared:
#: complex arithmetic is counted in real FLOPs of the component type on every
#: kind; f16/bf16 on a CPU without native support run at the f32 rate.
_RATE_FALLBACK: dict[tuple[str, str], str] = {
    ("cpu", "f16"): "f32",
    ("cpu", "bf16"): "f32",
    **{(k, "c64"): "f32" for k in DEVICE_KINDS},
    **{(k, "c128"): "f64" for k in DEVICE_KINDS},
}

#: What each bound code means (the ``bound`` matrix holds the long names).
BOUNDS = ("compute", "memory", "launch", "serial", "explicit", "infeasible")


@dataclass(frozen=True, slots=True)
class CostTable:
    """Per-task, per-device times and per-pair route data. ``inf`` = infeasible.

    All matrices are tuples of tuples: ``time[t][d]``, ``route_latency[a][b]``.
    A device pair without a route has ``inf`` latency and per-byte time and an
    empty ``routes`` entry; an edge between such devices costs ``inf`` unless
    it has an explicit ``comm`` (see :meth:`route_error`).
    """

    graph: TaskGraph
    platform: Platform
    time: tuple[tuple[float, ...], ...]  # [task][device] seconds
    energy: tuple[tuple[float, ...], ...]  # [task][device] joules
    bound: tuple[tuple[str, ...], ...]  # [task][device] compute|memory|launch|serial|explicit|infeasible
    reasons: tuple[tuple[int, int, str], ...]  # (task, device, why) per infeasible entry
    route_latency: tuple[tuple[float, ...], ...]  # [a][b] seconds along the route, 0 on the diagonal
    route_sec_per_byte: tuple[tuple[float, ...], ...]  # [a][b] sum of 1/bandwidth along the route
    routes: tuple[tuple[tuple[int, ...], ...], ...]  # [a][b] link indices along the route
    footprint: tuple[float, ...]  # [task] bytes resident on its device while it runs
    memory_capacity: tuple[float, ...]  # [device] bytes, inf when unknown
    area: tuple[tuple[float, ...], ...]  # [task][device] FPGA area units, 0 off-FPGA
    area_capacity: tuple[float, ...]  # [device] area units, inf off-FPGA

    @property
    def n_tasks(self) -> int:
        return len(self.time)

    @property
    def n_devices(self) -> int:
        return len(self.platform.devices)

    def comm(self, e: int, a: int, b: int) -> float:
        """Transfer time of edge ``e`` from device ``a`` to device ``b`` (0 if same)."""
        if a == b:
            return 0.0
        edge = self.graph.edges[e]
        if edge.comm is not None:
            return edge.comm
        lat = self.route_latency[a][b]
        if lat == INF:
            return INF
        return lat + edge.bytes * self.route_sec_per_byte[a][b]

    def feasible_devices(self, t: int) -> tuple[int, ...]:
        return tuple(d for d, x in enumerate(self.time[t]) if x < INF)

    def has_route(self, a: int, b: int) -> bool:
        """True when data can move from device ``a`` to device ``b``."""
        return self.route_latency[a][b] < INF

    def reason(self, t: int, d: int) -> str | None:
        """Why task ``t`` cannot run on device ``d``; None when it can."""
        for task, dev, why in self.reasons:
            if task == t and dev == d:
                return why
        return None

    def route_error(self, e: int, a: int, b: int) -> InfeasibleError:
        """The error to raise when edge ``e`` would need the missing route ``a -> b``."""
        edge = self.graph.edges[e]
        src, dst = self.graph.tasks[edge.src], self.graph.tasks[edge.dst]
        da, db = self.platform.devices[a].name, self.platform.devices[b].name
        via = f" or via host {self.platform.host}" if self.platform.host not in (None, da, db) else ""
        return InfeasibleError(
            f"edge {src.name} -> {dst.name} would move {edge.bytes:.6g} bytes from {da} to {db}, "
            f"but platform {self.platform.name} has no link {da} -> {db}{via}",
            span=dst.span,
            obj=self.graph.name,
        )

    def require_feasible(self) -> None:
        """Raise :class:`InfeasibleError` naming the first task no device can run."""
        for t in range(self.n_tasks):
            if not self.feasible_devices(t):
                task = self.graph.tasks[t]
                why = "; ".join(
                    f"{self.platform.devices[d].name}: {self.reason(t, d)}" for d in range(self.n_devices)
                )
                raise InfeasibleError(f"task {task.name} can run on no device ({why})", span=task.span, obj=task.name)


# -- transfer routes ----------------------------------------------------------

def route_tables(platform: Platform) -> tuple[
    tuple[tuple[float, ...], ...], tuple[tuple[float, ...], ...], tuple[tuple[tuple[int, ...], ...], ...]
]:
    """``(latency, sec_per_byte, routes)`` for every ordered device pair.

    Store-and-forward along :meth:`Platform.route`: latencies and per-byte
    times of the route's links add; no route gives ``inf`` and ``()``.
    """
    n = len(platform.devices)
    lat = [[0.0] * n for _ in range(n)]
    spb = [[0.0] * n for _ in range(n)]
    rts: list[list[tuple[int, ...]]] = [[()] * n for _ in range(n)]
    for a in range(n):
        for b in range(n):
            route = platform.route(a, b)
            if route is None:
                lat[a][b] = spb[a][b] = INF
                continue
            links = [platform.links[i] for i in route]
            lat[a][b] = sum(link.latency_us for link in links) / 1e6
            spb[a][b] = sum(1.0 / (link.bandwidth_gbs * 1e9) for link in links)
            rts[a][b] = route
    return (tuple(map(tuple, lat)), tuple(map(tuple, spb)), tuple(map(tuple, rts)))


# -- device-latency model -------------------------------------------------------

def op_class(op: str, span: SourceSpan | None = None) -> str:
    """The op class of ``op`` from the catalogue; ``"task"`` for kernel-less tasks."""
    if op == "task":
        return "task"
    from mapper.ops import OPS

    spec = OPS.get(op)
    if spec is None:
        raise InputError(f"unknown op {op!r}: it is not in the op catalogue", span=span)
    return spec.op_class


@dataclass(frozen=True, slots=True)
class Estimate:
    """One task on one device: seconds, what bounds it, and the roofline parts."""

    time: float
    bound: str
    reason: str = ""  # why it is infeasible
    t_parallel: float = 0.0  # parallel compute time at the device's effective peak
    t_serial: float = 0.0  # serial compute time at one lane's rate
    t_memory: float = 0.0  # memory time at the effective bandwidth
    cached: bool = False  # the working set fits the cache: t_memory is at the cache's bandwidth
    t_overhead: float = 0.0  # the device's fixed time per call of this op (Hockney's t0), beyond launch
    t_copy: float = 0.0  # a GEMM's packing (gemm_pack_ns) and conv2d's im2col copy (im2col_gbs); 0 without


def _infeasible(reason: str) -> Estimate:
    return Estimate(INF, "infeasible", reason)


def rate_dtype(device: Device, dtype: str) -> str | None:
    """The dtype whose declared rate ``device`` uses for ``dtype`` work, if any."""
    if device.peak(dtype) is not None:
        return dtype
    fallback = _RATE_FALLBACK.get((device.kind, dtype))
    if fallback is not None and device.peak(fallback) is not None:
        return fallback
    return None


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


def model_keys(task: Task, cls: str) -> tuple[str, ...]:
    """Keys of a device's ``efficiency`` and ``overhead_us`` tables that apply
    to ``task``, most specific first: its op variants (``reduce.max``: the op
    and the value of each of its string attributes with fixed choices;
    ``attention.causal``: the op and each of its flags in
    :data:`mapper.ops.FLAG_VARIANTS` that is set), its op, its op class;
    each first for the task's dtype (``reduce.max:f64``), since a kernel's
    rate need not scale between dtypes as the peaks do."""
    from mapper.ops import FLAG_VARIANTS, OPS

    spec = OPS.get(task.op)
    attrs = dict(task.attrs)
    variants = []
    if spec is not None:
        for attr, _ in spec.choices:
            value = attrs.get(attr, spec.default(attr))
            if isinstance(value, str):
                variants.append(f"{task.op}.{value}")
    variants += [f"{task.op}.{flag}" for flag in FLAG_VARIANTS.get(task.op, ()) if attrs.get(flag)]
    return tuple(k for key in (*variants, task.op, cls) for k in (f"{key}:{task.dtype}", key))


def fitted_keys(device: Device, keys: tuple[str, ...]) -> tuple[str, ...]:
    """The keys whose ``efficiency``, ``overhead_us``, ``overhead_us_per_mib``
    and ``half_length`` entries go with the rate the task gets: ``keys`` up to
    the first one the device's ``efficiency`` or per-op ``memory_efficiency``
    table has (a rate and its fixed time are fitted together: an ``ifft``
    with its own rate must not take the ``fft`` class's fixed time, and a
    ``relu`` with its own fraction of the bandwidth must not take the
    activation class's compute efficiency, fitted to ``gelu``'s tanh), all of
    them when neither table has any."""
    rated = {k for k, _ in device.efficiency} | {k for k, _ in device.memory_efficiency_ops}
    for i, key in enumerate(keys):
        if key in rated:
            return keys[:i + 1]
    return keys


def lookup(table: tuple[tuple[str, float], ...], keys: tuple[str, ...]) -> float | None:
    """The entry of ``table`` under the first of ``keys`` it has, else None."""
    own = dict(table)
    for key in keys:
        if key in own:
            return own[key]
    return None


def kernel_flops(task: Task) -> float:
    """FLOPs the kernel performs: the catalogue's count (``task.flops``),
    except for causal ``attention``, whose kernel visits only the keys up to
    each query, ``(S + 1) / (2 S)`` of the score matrix the catalogue counts
    (measured: 512-token causal attention takes 0.57 of the full one's time)."""
    flops = float(task.flops)
    attrs = dict(task.attrs)
    if task.op == "attention" and attrs.get("causal"):
        seq = int(attrs.get("seq") or 0)
        if seq > 0:
            flops *= (seq + 1) / (2 * seq)
    return flops


def vector_length(task: Task) -> int | None:
    """The length ``n`` of Hockney's ``r = r_inf n / (n + n_1/2)`` for
    ``task``'s kernel: for ``matmul`` and ``conv2d`` (an im2col GEMM per
    image) the smallest of the GEMM's dimensions ``M, N, K`` (output rows or
    channels, output columns or pixels, the reduction), since a GEMM short in
    any one of them runs below the asymptotic rate; for ``attention`` the
    sequence length; for ``maxpool`` and ``avgpool`` the output row's width
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
    if task.op == "attention":
        seq = dict(task.attrs).get("seq")
        return int(seq) if seq else None
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
    (Chellapilla et al., IWFHR 2006).
    """
    out = task.output
    if out is None or task.dtype not in GEMM_DTYPES or len(task.operands) < 2:
        return None
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
    return None


def im2col_bytes(task: Task) -> float:
    """Bytes ``conv2d``'s im2col moves per call: it writes the column matrix
    once and reads the input along each of its rows at the filter's column
    stride ``s``, touching ``s`` times as many input bytes as it writes, so
    ``(1 + s)`` times the matrix's bytes (a stride-2 stem gathered at 0.4 GB/s
    where stride-1 3x3 layers ran at 11 GB/s counted by the matrix alone).
    0 for a 1x1 filter with stride 1 and no padding (the input is the matrix)
    and for tasks that are not im2col GEMMs."""
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


def estimate(task: Task, cls: str, device: Device) -> Estimate:
    """Model time of ``task`` (op class ``cls``) on ``device``, ignoring explicit costs.

    ``T = launch + t0 + max(Tc, Tm)`` with ``Tc = p F / (e_c P) + (1 - p) F / S`` and
    ``Tm = B / (e_m BW)`` (docs/cost_model.md), where ``F`` is
    :func:`kernel_flops`, ``t0`` the device's fixed time for the task
    (Hockney's two-parameter model, "The science of computer benchmarking",
    SIAM 1996: a fixed time per call beside the asymptotic rate): its
    ``overhead_us`` entry plus its ``overhead_us_per_mib`` entry times the
    :func:`working_set` in MiB (a kernel that copies or first-touches its
    tensors once per call; 0 when none), ``e_c`` is scaled by Hockney's
    ``n / (n + n_1/2)`` where the device has a ``half_length`` entry ``n_1/2``
    for the task and :func:`vector_length` gives ``n``, and ``BW`` is the cache's
    bandwidth when the working set fits the device's cache
    (:func:`fits_cache`; Ilic et al., IEEE CAL 2014), else the memory's. ``e_c`` and ``e_m`` are the
    device's own ``efficiency`` / ``memory_efficiency`` (for example measured
    by ``mapper calibrate``) where it declares them (for ``e_c``, ``t0`` and a
    per-op ``memory_efficiency`` table the most specific of :func:`model_keys`),
    else the tables above.
    """
    kind = device.kind
    gemm_model = device.gemm_half_lengths is not None or device.gemm_pack_ns is not None
    dims = gemm_dims(task) if gemm_model else None
    if dims is not None:
        cls = "gemm"  # the device models conv2d's GEMM as a GEMM (its im2col copy is t_copy)
    keys = model_keys(task, cls)
    fitted = fitted_keys(device, keys)
    e_c = lookup(device.efficiency, fitted)  # not a class's rate past an op's own (streaming) entry
    if e_c is None:
        e_c = EFF_COMPUTE[kind].get(cls)
    if e_c is None:
        return _infeasible(f"op {task.op} ({cls}) has no {kind} implementation in the model")
    t_copy = 0.0
    if dims is not None:
        if device.gemm_half_lengths is not None:
            e_c *= gemm_shape_factor(dims, device.gemm_half_lengths)
        if device.gemm_pack_ns is not None:
            t_copy = gemm_pack_time(dims, device.gemm_pack_ns, device.gemm_pack_cold_ns, gemm_cold(task))
        if device.im2col_gbs:
            t_copy += im2col_bytes(task) / (device.im2col_gbs * 1e9)
    else:
        half, n = lookup(device.half_length, fitted), vector_length(task)
        if half and n:
            e_c *= n / (n + half)
    flops, nbytes = kernel_flops(task), float(task.bytes)
    if (flops > 0 or nbytes > 0) and not device.has_rates:
        return _infeasible("no rates: the device declares no peak_gflops or mem_bandwidth_gbs")
    t_par = t_ser = t_mem = 0.0
    if flops > 0:
        rd = rate_dtype(device, task.dtype)
        if rd is None:
            return _infeasible(f"no {task.dtype} rate in peak_gflops")
        peak = e_c * device.peak(rd) * 1e9
        p = min(max(float(task.parallel), 0.0), 1.0)
        serial = device.serial_gflops * 1e9 if device.serial_gflops is not None else peak
        t_par = p * flops / peak
        t_ser = (1.0 - p) * flops / serial
    cached = nbytes > 0 and fits_cache(task, device)
    if nbytes > 0:
        bandwidth = device.cache_bandwidth_gbs if cached else device.mem_bandwidth_gbs
        if bandwidth is None:
            return _infeasible("no mem_bandwidth_gbs for a task that moves bytes")
        e_m = lookup(device.memory_efficiency_ops, keys)
        if e_m is None:
            e_m = device.memory_efficiency if device.memory_efficiency is not None else EFF_MEMORY[kind]
        if cached and device.mem_bandwidth_gbs:  # weights and graph inputs from memory, the rest from the cache
            cold = cold_bytes(task)
            t_mem = ((in_cache_bytes(task) - cold) / bandwidth + cold / device.mem_bandwidth_gbs) / (e_m * 1e9)
        else:
            t_mem = (in_cache_bytes(task) if cached else nbytes) / (e_m * bandwidth * 1e9)
    launch = device.launch_us / 1e6
    per_mib = lookup(device.overhead_us_per_mib, fitted) or 0.0
    overhead = ((lookup(device.overhead_us, fitted) or 0.0) + per_mib * working_set(task) / MIB) / 1e6
    t_comp = t_par + t_ser + t_copy
    body = max(t_comp, t_mem)
    if body == 0.0 or launch + overhead >= body:
        bound = "launch"
    elif t_comp >= t_mem:
        bound = "serial" if t_ser > t_par else "compute"
    else:
        bound = "memory"
    return Estimate(launch + overhead + body, bound, "", t_par, t_ser, t_mem, cached, overhead, t_copy)


def _explicit_costs(task: Task, platform: Platform) -> dict[int, float]:
    """Device index -> seconds from ``task.explicit_cost``; a key names a device or a kind."""
    by_name: dict[int, float] = {}
    by_kind: dict[str, float] = {}
    for key, seconds in task.explicit_cost:
        if not (seconds >= 0 and math.isfinite(seconds)):
            raise InputError(f"task {task.name}: cost for {key} must be a finite time >= 0, got {seconds}", span=task.span)
        if any(d.name == key for d in platform.devices):
            by_name[platform.device_index(key)] = float(seconds)
        elif key in DEVICE_KINDS and any(d.kind == key for d in platform.devices):
            by_kind[key] = float(seconds)
        else:
            names = ", ".join(d.name for d in platform.devices)
            raise InputError(
                f"task {task.name} gives a cost for {key!r}, which platform {platform.name} does not have "
                f"(devices: {names})",
                span=task.span,
                obj=task.name,
            )
    out = {d.index: by_kind[d.kind] for d in platform.devices if d.kind in by_kind}
    out.update(by_name)
    return out


def _fpga_area(task: Task, device: Device, est: Estimate, explicit: bool) -> float:
    """DSP-area units ``task`` occupies on FPGA ``device`` (docs/cost_model.md).

    A streamable task on a streaming FPGA needs only the share of the DSPs that
    keeps its arithmetic in pace with its memory stream, ``A min(1, Tp / Tm)``;
    anything else (and explicit-cost tasks) takes the whole kernel area ``A``.
    """
    cap = device.area
    if cap is None or est.time == INF:
        return 0.0
    if explicit or task.streamable <= 0 or not device.streaming:
        return cap
    if est.t_parallel == 0.0:
        return 0.0
    if est.t_memory == 0.0:
        return cap
    return cap * min(1.0, est.t_parallel / est.t_memory)


def build_cost_table(graph: TaskGraph, platform: Platform) -> CostTable:
    """Cost every task on every device and every device pair's route.

    Order of checks per (task, device): placement, explicit cost, op support,
    rates, footprint vs memory. The first that fails gives the reason.
    """
    devices = platform.devices
    times: list[tuple[float, ...]] = []
    energy: list[tuple[float, ...]] = []
    bounds: list[tuple[str, ...]] = []
    areas: list[tuple[float, ...]] = []
    reasons: list[tuple[int, int, str]] = []
    footprint = tuple(float(t.bytes_read + t.bytes_written) for t in graph.tasks)
    capacity = tuple(d.memory_gib * GIB if d.memory_gib is not None else INF for d in devices)
    for task in graph.tasks:
        explicit = _explicit_costs(task, platform) if task.explicit_cost else None
        cls = op_class(task.op, task.span)
        row_t, row_e, row_b, row_a = [], [], [], []
        for dev in devices:
            if not task.placement.permits(dev.name, dev.kind):
                est = _infeasible(f"placement {task.placement} excludes {dev.name} ({dev.kind})")
            elif explicit is not None:
                sec = explicit.get(dev.index)
                est = _infeasible("no cost given") if sec is None else Estimate(sec, "explicit")
            else:
                est = estimate(task, cls, dev)
            if est.time < INF and footprint[task.index] > capacity[dev.index]:
                est = _infeasible(
                    f"footprint {footprint[task.index] / GIB:.3g} GiB exceeds memory {dev.memory_gib:.3g} GiB"
                )
            if est.time == INF:
                reasons.append((task.index, dev.index, est.reason))
            row_t.append(est.time)
            row_b.append(est.bound)
            power = dev.power_active_w or 0.0
            row_e.append(INF if est.time == INF else power * est.time)
            row_a.append(_fpga_area(task, dev, est, explicit is not None) if dev.kind == "fpga" else 0.0)
        times.append(tuple(row_t))
        energy.append(tuple(row_e))
        bounds.append(tuple(row_b))
        areas.append(tuple(row_a))
    lat, spb, rts = route_tables(platform)
    return CostTable(
        graph=graph,
        platform=platform,
        time=tuple(times),
        energy=tuple(energy),
        bound=tuple(bounds),
        reasons=tuple(reasons),
        route_latency=lat,
        route_sec_per_byte=spb,
        routes=rts,
        footprint=footprint,
        memory_capacity=capacity,
        area=tuple(areas),
        area_capacity=tuple(
            d.area if d.kind == "fpga" and d.area is not None else INF for d in devices
        ),
    )


# -- FPGA streaming -------------------------------------------------------------

def stream_chain_times(times: Sequence[float], chunks: int) -> tuple[tuple[float, float], ...]:
    """(start, end) offsets of each stage of a linear pipeline fed in ``chunks`` chunks.

    Stage ``i`` handles a chunk in ``t_i / chunks``; chunk ``c`` leaves stage
    ``i`` at ``f(i, c) = max(f(i-1, c), f(i, c-1)) + t_i / chunks`` (a
    permutation flow shop of identical jobs). Its closed form, used here, is
    ``f(i, C-1) = sum_{j<=i} t_j / C + (C-1) max_{j<=i} t_j / C``; stage ``i``
    starts when the first chunk leaves stage ``i-1``, ``sum_{j<i} t_j / C``.
    So the chain takes the slowest stage plus the fill latency (Wilhelm et al.,
    arXiv:2208.06321, streaming FPGA chains).
    """
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
        raise OptionsError(f"stream_chain_times: chunks must be an integer >= 1, got {chunks!r}")
    out: list[tuple[float, float]] = []
    head = 0.0  # sum_{j<i} t_j / C: when the first chunk reaches stage i
    slowest = 0.0
    for i, t in enumerate(times):
        t = float(t)
        if not (t >= 0 and math.isfinite(t)):
            raise OptionsError(f"stream_chain_times: stage {i} time must be finite and >= 0, got {t}")
        per_chunk = t / chunks
        slowest = max(slowest, per_chunk)
        start = head
        head += per_chunk
        out.append((start, head + (chunks - 1) * slowest))
    return tuple(out)
