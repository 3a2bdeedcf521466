"""Model fits from the probes: per-op efficiencies and fixed times
(Hockney's ``t0`` and ``n_1/2``), the GEMM shape model (:func:`gemm_fit`)
and the bandwidth for a working set."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import numpy as np

from mapper.core.ops import OP_CLASSES
from mapper.costing.work import gemm_shape_factor
from mapper.platform.schema import MAX_STREAM_FRACTION
from mapper.run.calibration.probes import MEMORY_CLASSES, STREAMING_OPS, streams
from mapper.run.calibration.records import Calibration, Probe


@dataclass(frozen=True, slots=True)
class Entry:
    """One key of the calibrated ``efficiency`` / ``overhead_us`` tables: an
    op class, op or op variant, the compute efficiency, the fixed time per
    call (Hockney's ``t0``, seconds; 0 when not fitted) or per MiB of the
    working set, and how many probes gave it."""

    key: str
    efficiency: float
    overhead: float = 0.0
    probes: int = 1
    per_mib: float = 0.0  # fixed seconds per MiB of working set (the other form of t0; 0 when not fitted)
    half: float = 0.0  # Hockney's n_1/2 in the op's vector length (0 when not fitted)
    memory: float = 0.0  # fraction of the bandwidth (a MEMORY_CLASSES key: then efficiency is 0)


#: A fixed time per call (or a half-performance length) is fitted only where
#: the probes show it beyond this machine's noise: the rate alone leaves a
#: probe off by more than this fraction, and the fit at least halves the
#: worst error. Two probes always fit two parameters exactly, so they need
#: this much; three or more, where the fit has a residual to show, half.
FIT_NOISE = 0.25


def model_entries(cal: Calibration) -> tuple[Entry, ...]:
    """The per-op-class model entries that make the model reproduce the probes.

    Per probe, ``w = F / peak`` (its compute time at full efficiency) and
    ``t = measured - launch``. A group of probes of one kernel at two or
    more amounts of work (``w`` differing by 10 % or more) gets Hockney's
    two-parameter fit (Hockney, "The science of computer benchmarking",
    SIAM 1996) ``t = t0 + w / e``: least squares on the relative error, with
    ``t0 >= 0`` and ``e <= 1`` (:func:`hockney_fit`), where it passes the
    :data:`FIT_NOISE` test. Any other group gets ``t0 = 0`` and ``e`` the
    geometric mean of ``min(w / t, 1)`` over its counting probes (the factor
    that minimises the squared log errors).

    Groups: each class (its probes keyed by the class), each op of a class
    probed with several ops (norm: layernorm and batchnorm; the class entry
    then covers its other ops, with no fixed time; an op named as its class,
    fft, gives the class key its own fit), and each op variant
    (``reduce.max``, fed only by its own probes). A probe counts where it ran
    slower than the model with the default efficiencies (the kernel is below
    the model's roofline; the compute term then explains the time) or where
    the model calls it compute-bound; a group with no counting probe gets no
    entry, and the geometric mean leaves out probes faster than the model's
    memory term. Hockney's fit takes all the group's probes: the fast large
    ones are what separates the fixed time from the rate. A probe no longer
    than a launch counts for nothing.
    """
    return model_entries_with_fit(cal, gemm_fit(cal))


def model_entries_with_fit(cal: Calibration, fit: GemmFit | None) -> tuple[Entry, ...]:
    """:func:`model_entries` with the GEMM fit already made (None: none)."""
    peaks = {r.key: r.stored for r in cal.peak_gflops}
    groups: dict[str, list[tuple[str, float, float, bool, float, int]]] = {}  # key -> (op, w, t, counts, MiB, n)
    ops_of: dict[str, set[str]] = {}
    streamed: dict[str, list[tuple[str, float, float]]] = {}  # streaming key -> (op, w at the bandwidth, t)
    for p in cal.probes:
        peak = peaks.get(p.rate_dtype)
        body = p.measured - p.launch
        if streams(p.op):
            if body > 0 and p.bytes > 0:
                bw, cached = model_bandwidth(cal, p.working_set)
                moved = p.cache_bytes or p.bytes if cached else p.bytes  # as the model counts them
                for key in (p.feeds,) if p.feeds else dict.fromkeys((p.op_class, p.op)):  # stencil: op = class
                    streamed.setdefault(key, []).append((p.op, moved / (bw * 1e9), body))
            continue
        if body <= 0 or not peak or p.flops <= 0:
            continue
        counts = bool(p.feeds) or p.ratio < 1.0 or p.bound in ("compute", "serial")
        point = (p.op, p.flops / (peak * 1e9), body, counts, p.working_set / 2**20, p.vector)
        if p.feeds:
            groups.setdefault(p.feeds, []).append(point)
            continue
        groups.setdefault(p.op_class, []).append(point)
        ops_of.setdefault(p.op_class, set()).add(p.op)
    for cls, ops in ops_of.items():
        if len(ops) > 1:
            points = list(groups[cls])
            for op in sorted(ops, key=lambda o: [q[0] for q in points].index(o)):
                groups[op] = [x for x in points if x[0] == op]  # an op named as its class (fft) takes the key
    stream_ops = {c: {p.op for p in cal.probes if p.op_class == c and not p.feeds} for c in MEMORY_CLASSES}
    out = [_stream_entry(key, v) for key, v in streamed.items()
           if key in OP_CLASSES or key in STREAMING_OPS or ":" in key or "." in key
           or any(key in ops and len(ops) > 1 for ops in stream_ops.values())]  # an op key where its class has several
    if fit is not None:  # the GEMM shape model prices matmul and conv2d (see platform_toml)
        out.append(Entry("gemm", fit.efficiency, probes=fit.probes))
    for key, points in groups.items():
        if fit is not None and key in ("gemm", "conv"):
            continue
        if not any(p[3] for p in points):
            continue
        e, t0, per_mib, half = _fit(points)
        out.append(Entry(key, float(f"{e:.3g}"), float(f"{t0:.3g}"), len(points), float(f"{per_mib:.3g}"),
                         float(f"{half:.3g}")))
    return tuple(out)


def _beyond_noise(worst_rate: float, worst: float, probes: int) -> bool:
    """The :data:`FIT_NOISE` test of a fixed time or half-length: the rate
    alone leaves a probe off by more than the noise (half of it for three or
    more probes, where the fit has a residual to show) and the fit at least
    halves the worst error."""
    noise = FIT_NOISE if probes <= 2 else FIT_NOISE / 2
    return worst_rate > noise and worst <= worst_rate / 2


def _stream_entry(key: str, probes: list[tuple[str, float, float]]) -> Entry:
    """The entry of a streaming key from its probes' ``(op, w, t)``, ``w`` the
    time at the full (stored) bandwidth and ``t`` the measured time net of
    the launch: the fraction of the bandwidth (geometric mean of ``w / t``,
    at most :data:`mapper.platform.schema.MAX_STREAM_FRACTION`), or, where probes of
    one kernel at two or more amounts of data show a fixed time per call
    beyond the noise (:data:`FIT_NOISE`, as for compute classes), Hockney's
    ``t = t0 + w / e``."""
    points = [(w, t) for _, w, t in probes]
    e = _geomean_raw([min(w / t, MAX_STREAM_FRACTION) for w, t in points])
    t0 = 0.0
    ws = [w for w, _ in points]
    if len({op for op, _, _ in probes}) == 1 and len(points) >= 2 and max(ws) >= 1.1 * min(ws):
        worst_rate = max(abs(w / e / t - 1.0) for w, t in points)
        e2, c = hockney_fit(points, None, MAX_STREAM_FRACTION)
        worst = max(abs((c + w / e2) / t - 1.0) for w, t in points)
        if c > 0 and _beyond_noise(worst_rate, worst, len(points)):
            e, t0 = e2, c
    return Entry(key, 0.0, float(f"{t0:.3g}"), len(points), memory=float(f"{e:.3g}"))


def model_bandwidth(cal: Calibration, working_set: float) -> tuple[float, bool]:
    """The stored bandwidth (GB/s) the model uses for a task touching
    ``working_set`` bytes, and whether that is the cache's: the cache's where
    it fits (the cache-aware roofline of :func:`mapper.costing.latency.estimate`), else
    the memory's."""
    cache = cal.cache_mib
    if cache is not None and cal.cache_bandwidth_gbs is not None and working_set <= cache.stored * 2**20:
        return cal.cache_bandwidth_gbs.stored, True
    return cal.mem_bandwidth_gbs.stored, False


def _fit(points: list[tuple[str, float, float, bool, float, int]]) -> tuple[float, float, float, float]:
    """``(e, t0, t0 per MiB, n_1/2)`` for one group of :func:`model_entries`:
    the best of the three forms of Hockney's model (a fixed time per call, one
    in proportion to the working set, a half-performance vector length,
    ``t = w / e (1 + n_1/2 / n)``, fitted as ``t = c w / n + w / e`` with
    ``n_1/2 = c e``) that passes the :data:`FIT_NOISE` test, else the rate
    alone; with four or more probes also a fixed time and a half-length
    together (:func:`hockney_fit_both`), where it at least halves the worst
    error of the best single form (attention: a call's fixed time on the
    worker threads, and short sequences' small GEMMs and short softmax rows)."""
    ws = [x[1] for x in points]
    mean = _geomean_raw([min(w / t, 1.0) for _, w, t, counts, _, _ in points if counts])
    best: tuple[float, float, float, float, float] | None = None  # (worst error, e, t0, per MiB, n_1/2)
    if len({x[0] for x in points}) == 1 and max(ws) >= 1.1 * min(ws):
        worst_rate = max(abs(w / mean / t - 1.0) for _, w, t, *_ in points)
        ns = [x[5] for x in points]
        forms = [("t0", [1.0] * len(points))]
        if all(x[4] > 0 for x in points):
            forms.append(("mib", [x[4] for x in points]))
        halves = all(n > 0 for n in ns) and max(ns) >= 1.1 * min(ns)
        if halves:
            forms.append(("half", [w / n for w, n in zip(ws, ns)]))
        for form, scale in forms:
            e, c = hockney_fit([(w, t) for _, w, t, *_ in points], scale)
            worst = max(abs((c * k + x[1] / e) / x[2] - 1.0) for x, k in zip(points, scale))
            if c > 0 and _beyond_noise(worst_rate, worst, len(points)) and (best is None or worst < best[0]):
                best = (worst, e, c if form == "t0" else 0.0, c if form == "mib" else 0.0,
                        c * e if form == "half" else 0.0)
        if halves and len(points) >= 4:
            e, t0, half = hockney_fit_both([(w, t, n) for (_, w, t, *_), n in zip(points, ns)])
            worst = max(abs((t0 + w / e * (1.0 + half / n)) / t - 1.0) for (_, w, t, *_), n in zip(points, ns))
            bar = best[0] if best is not None else worst_rate
            if t0 > 0 and half > 0 and _beyond_noise(worst_rate, worst, len(points)) and worst <= bar / 2:
                best = (worst, e, t0, 0.0, half)
    return (mean, 0.0, 0.0, 0.0) if best is None else best[1:]


def hockney_fit_both(points: list[tuple[float, float, int]]) -> tuple[float, float, float]:
    """``(e, t0, n_1/2)`` of ``t = t0 + w / e (1 + n_1/2 / n)`` over ``(w, t,
    n)`` points: Hockney's fixed time and half-performance length together,
    least squares on the relative error (linear in ``t0``, ``1 / e`` and
    ``n_1/2 / e``) with every coefficient >= 0 (:func:`nonneg_least_squares`)
    and ``e <= 1``."""
    a = np.array([[1.0 / t, w / t, w / n / t] for w, t, n in points])
    t0, inv_e, c = nonneg_least_squares(a, np.ones(len(points)))
    if inv_e < 1.0:  # e above 1: hold it at 1 and refit the rest
        inv_e = 1.0
        t0, c = nonneg_least_squares(a[:, [0, 2]], 1.0 - a[:, 1])
    return 1.0 / inv_e, float(t0), float(c / inv_e)


def hockney_fit(points: list[tuple[float, float]], scale: list[float] | None = None,
                e_max: float = 1.0) -> tuple[float, float]:
    """``(e, t0)`` minimising ``sum((t0 k + w / e) / t - 1)^2`` over ``(w, t)``
    points with scales ``k`` (default 1; the working set in MiB for a fixed
    time per MiB), with ``t0 >= 0`` and ``e <= e_max``: Hockney's fixed time per
    call and asymptotic fraction of the peak (Hockney, SIAM 1996;
    ``r_inf = e P``, ``n_1/2 = t0 e P``). Where the free fit breaks a bound,
    the bound holds and the other parameter is refitted."""
    ks = scale or [1.0] * len(points)
    u = [k / t for (_, t), k in zip(points, ks)]
    x = [w / t for w, t in points]
    suu, sux, sxx = sum(a * a for a in u), sum(a * b for a, b in zip(u, x)), sum(b * b for b in x)
    su, sx = sum(u), sum(x)
    det = suu * sxx - sux * sux
    t0, a = (0.0, 0.0) if det <= 0 else ((su * sxx - sx * sux) / det, (suu * sx - sux * su) / det)
    if det <= 0 or t0 < 0:
        t0, a = 0.0, sx / sxx
    if a < 1.0 / e_max:
        a = 1.0 / e_max
        t0 = max((su - a * sux) / suu, 0.0)
    return 1.0 / a, t0


@dataclass(frozen=True, slots=True)
class GemmFit:
    """The GEMM model fitted to the matmul probes, and conv2d's im2col rate.

    ``form`` is ``"pack"`` (the compute time plus per-element costs of
    packing A and B and updating C, ``pack`` = ns per element of A, B, C) or
    ``"half"`` (Hockney's half-performance factor per dimension, ``half`` =
    ``n_1/2`` of ``M, N, K``), whichever leaves the smaller root-mean-square
    log error on the probes (``rms``; ``worst`` the largest relative error).
    ``efficiency`` is the asymptotic fraction of the stored peak (``raw``
    before the cap at 1; above 1 the peak is raised). ``im2col_gbs`` (None when
    the conv probes show no copy time) is the rate of conv2d's im2col (fitted
    with the pack form, or on the conv probes beside their GEMMs' model times
    for the half form); ``conv_worst`` the largest relative error on those
    probes.
    """

    efficiency: float
    half: tuple[float, float, float] | None
    probes: int
    worst: float
    im2col_gbs: float | None = None
    conv_probes: int = 0
    conv_worst: float = 0.0
    raw: float = 1.0
    pack: tuple[float, float, float] | None = None
    rms: float = 0.0
    pack_cold: tuple[float, float] | None = None  # ns per element of an A or B read from memory

    @property
    def form(self) -> str:
        """``"pack"`` or ``"half"``: the form fitted (the other's parameters are None)."""
        return "pack" if self.pack is not None else "half"


#: Candidate half-performance lengths of the grid search in :func:`gemm_fit`:
#: 0 and 1 to 4096 in steps of sqrt(2), refined around the best in steps of 2^(1/8).
_HALF_GRID = (0.0, *(2.0 ** (j / 2) for j in range(25)))


def _fit_half(y: np.ndarray, sizes: np.ndarray) -> tuple[float, tuple[float, float, float]]:
    """``(log of seconds per peak-FLOP, n_1/2 of M, N, K)`` minimising the squared
    log error of ``prod (1 + n_1/2 / n)``: a grid search, then a finer grid."""

    def search(grids: list[np.ndarray]) -> tuple[float, tuple[float, float, float]]:
        lm, ln, lk = (np.log1p(g[None, :] / sizes[:, d:d + 1]) for d, g in enumerate(grids))
        r = y[:, None, None, None] - lm[:, :, None, None] - ln[:, None, :, None] - lk[:, None, None, :]
        sse = ((r - r.mean(axis=0)) ** 2).sum(axis=0)
        a, b, c = np.unravel_index(int(np.argmin(sse)), sse.shape)  # first minimum: deterministic
        return float(r[:, a, b, c].mean()), (float(grids[0][a]), float(grids[1][b]), float(grids[2][c]))

    grid = np.array(_HALF_GRID)
    _, best = search([grid] * 3)
    fine = [np.array(sorted({h * 2.0 ** (j / 8) for j in range(-4, 5)} | ({0.0, 0.5} if h == 0 else set())))
            for h in best]
    return search(fine)


def nonneg_least_squares(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``x >= 0`` minimising ``|a x - b|``, for a few columns: every subset of
    columns is solved by least squares and the best all-nonnegative solution
    kept (exact for the up to 7 unknowns of the GEMM fit; ties go to the
    first subset in order)."""
    n = a.shape[1]
    best, best_res = np.zeros(n), float(np.sum(b * b))
    for mask in range(1, 1 << n):
        cols = [j for j in range(n) if mask >> j & 1]
        sol, *_ = np.linalg.lstsq(a[:, cols], b, rcond=None)
        if np.any(sol < 0):
            continue
        x = np.zeros(n)
        x[cols] = sol
        res = float(np.sum((a @ x - b) ** 2))
        if res < best_res - 1e-15:
            best, best_res = x, res
    return best


#: The pack form's fit: ns per element of A, B and C; of a cold A and B (None: not split); im2col GB/s.
_PackFit = tuple[tuple[float, float, float], tuple[float, float] | None, float | None]


def gemm_fit(cal: Calibration) -> GemmFit | None:
    """Fit the GEMM model to the matmul probes, in two forms, and keep the one
    with the smaller root-mean-square log error:

    - ``pack``: ``t = launch + F / (e P) + a M K + b K N + c M N`` (per GEMM
      of a batch), the multiply-adds at the asymptotic rate plus the
      memory-bound packing of ``A`` and ``B`` and the update of ``C`` (Goto
      and van de Geijn, ACM TOMS 2008), least squares on the relative error
      with every coefficient >= 0 (:func:`nonneg_least_squares`);
    - ``half``: ``t = launch + F / (e P) prod_d (1 + n_1/2,d / n_d)`` over
      ``d = M, N, K`` (Hockney's half-performance law per dimension, Hockney,
      SIAM 1996), least squares on the log of the time by grid search.

    conv2d's im2col rate, ``t = launch + GEMM model + bytes / rate``
    (:func:`mapper.costing.work.im2col_bytes`): the pack form fits it jointly with
    the GEMM, the conv probes as rows beside the matmul probes with their
    bytes as one more column (so that the GEMMs conv2d calls, a cold weight
    times a column matrix just written, weigh in the packing rates); the
    half form fits it afterwards on the conv probes beside their GEMMs' model
    times. Both forms are scored on all the probes. None with fewer than 5
    matmul probes.
    """
    from mapper.costing.work import gemm_pack_time

    peaks = {r.key: r.stored * 1e9 for r in cal.peak_gflops}
    pts = [(p, p.measured - p.launch, peaks.get(p.rate_dtype, 0.0)) for p in cal.probes]
    gemms = [(p, body, peak) for p, body, peak in pts if p.op == "matmul" and p.gemm and body > 0 and peak > 0]
    if len(gemms) < 5:
        return None
    y = np.array([math.log(body * peak / p.flops) for p, body, peak in gemms])
    sizes = np.array([p.gemm[1:] for p, _, _ in gemms], dtype=float)  # [probe, (M, N, K)]
    mean, half = _fit_half(y, sizes)
    h3 = tuple(float(f"{h:.3g}") for h in half)
    # form -> (raw rate factor, half lengths (half form), (A, B, C ns; cold A, B ns; im2col GB/s) (pack form))
    fits: dict[str, tuple[float, tuple[float, float, float] | None, _PackFit | None]] = {
        "half": (math.exp(-mean), (h3[0], h3[1], h3[2]), None)}
    # columns: F / peak, then A's and B's elements (split by whether the operand comes from
    # memory where the probes have both), then C's, then im2col's bytes; one coefficient each
    convs = [(p, body, peak) for p, body, peak in pts if p.op == "conv2d" and p.gemm and body > 0 and peak > 0]
    joint = gemms + convs  # the pack form fits conv2d's im2col rate with the GEMM (one more column)
    colds = [tuple(p.gemm_cold) or (False, False) for p, _, _ in joint]
    split = [len({c[i] for c in colds}) > 1 for i in (0, 1)]
    rows = []
    for (p, _, peak), cold in zip(joint, colds):
        batch, m, n, k = p.gemm
        row = [p.flops / peak]
        for i, elems in ((0, batch * m * k), (1, batch * k * n)):
            row += [elems * (not cold[i]), elems * cold[i]] if split[i] else [elems]
        rows.append(row + [batch * m * n, p.copy_bytes])
    bodies = np.array([body for _, body, _ in joint])
    coef = nonneg_least_squares(np.array(rows, dtype=float) / bodies[:, None], np.ones(len(joint)))
    if coef[0] > 0:
        ns = [float(f"{c * 1e9:.3g}") for c in coef[1:-1]]
        a_hot, a_cold = (ns.pop(0), ns.pop(0)) if split[0] else (ns[0], ns.pop(0))
        b_hot, b_cold = (ns.pop(0), ns.pop(0)) if split[1] else (ns[0], ns.pop(0))
        cold_ns = (a_cold, b_cold) if any(split) else None
        copy_gbs = float(f"{1.0 / coef[-1] * 1e-9:.3g}") if coef[-1] > 0 else None
        fits["pack"] = (1.0 / coef[0], None, ((a_hot, b_hot, ns[0]), cold_ns, copy_gbs))

    def model(form: str, e: float, p: Probe, peak: float) -> float:
        _, h, pack = fits[form]
        dims = (p.gemm[0], p.gemm[1], p.gemm[2], p.gemm[3])
        if h is not None:
            return p.flops / (e * peak * gemm_shape_factor(dims, h))
        assert pack is not None  # the pack form
        hot_ns, cold_ns, _ = pack
        cold = (p.gemm_cold[0], p.gemm_cold[1]) if p.gemm_cold else (False, False)
        return p.flops / (e * peak) + gemm_pack_time(dims, hot_ns, cold_ns, cold)

    def copy_rate(form: str) -> float | None:
        """conv2d's im2col rate (GB/s) with ``form``: the pack form's joint
        fit, or, for the half form, fitted on the conv probes beside their
        GEMMs' model times; None where the probes show no copy time."""
        if form == "pack":
            pack = fits["pack"][2]
            return pack[2] if pack is not None else None
        pairs = [(p.copy_bytes / body, model(form, effs[form], p, peak) / body) for p, body, peak in convs]
        num = sum(c * (1.0 - g) for c, g in pairs)
        den = sum(c * c for c, _ in pairs)
        return float(f"{den / num * 1e-9:.3g}") if den > 0 and num > 0 else None

    def probe_time(form: str, p: Probe, peak: float) -> float:
        gbs = rates[form]
        return model(form, effs[form], p, peak) + (p.copy_bytes / (gbs * 1e9) if gbs else 0.0)

    # each form's efficiency as written (3 digits, at most 1) times the peak's raise when raw > 1
    effs = {form: float(f"{min(raw, 1.0):.3g}") * raw / min(raw, 1.0) for form, (raw, _, _) in fits.items()}
    rates = {form: copy_rate(form) for form in fits}
    scored = []
    for form in fits:
        logs = [math.log(probe_time(form, p, peak) / body) for p, body, peak in joint]
        scored.append((math.sqrt(statistics.fmean(v * v for v in logs)), form))
    rms, form = min(scored)
    raw, half_t, pack_t = fits[form]
    e = float(f"{min(raw, 1.0):.3g}")
    worst = max(abs(probe_time(form, p, peak) / body - 1.0) for p, body, peak in gemms)
    conv_worst = max((abs(probe_time(form, p, peak) / body - 1.0) for p, body, peak in convs), default=0.0)
    pack_ns, pack_cold = pack_t[:2] if pack_t is not None else (None, None)
    return GemmFit(e, half_t, len(gemms), worst, rates[form], len(convs), conv_worst, raw, pack_ns, rms, pack_cold)


def class_efficiency(cal: Calibration) -> tuple[tuple[str, float], ...]:
    """``(key, efficiency)`` of each of :func:`model_entries`."""
    return tuple((e.key, e.efficiency) for e in model_entries(cal) if e.efficiency > 0)


def _geomean_raw(values: list[float]) -> float:
    """Geometric mean."""
    return math.exp(statistics.fmean(math.log(v) for v in values))
