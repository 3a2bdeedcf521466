"""What a calibration is asked (:class:`Settings`) and what it measured
(:class:`Rate`, :class:`Probe`, :class:`Calibration`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Settings:
    """Sizes and time budgets of one calibration (``quick`` for tests)."""

    rounds: int = 3  # the rate measurements repeat in rounds; the best round counts
    gemm_sizes: tuple[int, ...] = (256, 512, 1024)
    gemm_budget: float = 0.4  # seconds per dtype and round
    serial_size: int = 512
    serial_budget: float = 1.0
    measure_serial: bool = True
    stream_mib: int = 0  # per array; 0: 2 x LLC, clamped to [64, 256] MiB
    stream_budget: float = 0.8  # seconds per round
    launch_calls: int = 2000
    probes: bool = True
    probe_passes: int = 9  # timed passes over the probes, one call of each per pass; the median counts
    cache_sizes_mib: tuple[float, ...] = (0.5, 1, 2, 4, 8, 16, 32, 64)  # per array, for the cache sweep
    cache_budget: float = 1.5  # seconds for the whole sweep (at least 5 calls per size)

    @staticmethod
    def quick() -> Settings:
        return Settings(
            rounds=1, gemm_sizes=(128, 256), gemm_budget=0.25, measure_serial=False, stream_mib=64,
            stream_budget=0.4, launch_calls=200, probes=False, cache_sizes_mib=(1, 4, 16, 64), cache_budget=0.5,
        )


@dataclass(frozen=True, slots=True)
class Rate:
    """One measured quantity: the measured ``value``, the ``stored`` value
    (after dividing by the model's efficiency factor), and how it was measured."""

    key: str
    value: float
    stored: float
    how: str


@dataclass(frozen=True, slots=True)
class Probe:
    """One op class checked against the calibrated model: a probe task's
    fastest timed call, the model's time (``ratio`` = model / measured), and
    the rates the kernel achieved net of the launch overhead."""

    op_class: str
    task: str
    measured: float
    model: float
    bound: str
    flops: float = 0.0
    bytes: float = 0.0
    launch: float = 0.0  # seconds, the platform's launch overhead
    rate_dtype: str = "f32"  # the dtype whose peak rates the task
    feeds: str = ""  # a key (``reduce.max``, ``elementwise:f64``) this probe alone feeds; "" for its class and op
    working_set: float = 0.0  # bytes of the distinct tensors the task touches (mapper.costing.work.working_set)
    vector: int = 0  # Hockney's vector length n of the task (mapper.costing.work.vector_length; 0: none)
    gemm: tuple[int, ...] = ()  # (batch, M, N, K) of the task's GEMM (mapper.costing.work.gemm_dims; () for none)
    copy_bytes: float = 0.0  # bytes conv2d's im2col writes (mapper.costing.work.im2col_bytes)
    gemm_cold: tuple[bool, ...] = ()  # whether the GEMM's A and B come from memory (mapper.costing.work.gemm_cold)
    # bytes moved when the working set is in cache (mapper.costing.work.in_cache_bytes; 0: bytes)
    cache_bytes: float = 0.0

    @property
    def op(self) -> str:
        """The probe task's op (the first word of ``task``)."""
        return self.task.split(" ", 1)[0]

    @property
    def ratio(self) -> float:
        return self.model / self.measured if self.measured > 0 else float("inf")

    @property
    def gflops(self) -> float | None:
        """FLOP rate net of the launch overhead; None when the call took no longer than a launch."""
        body = self.measured - self.launch
        return self.flops / body / 1e9 if body > 0 else None

    @property
    def gbs(self) -> float | None:
        """Byte rate net of the launch overhead; None when the call took no longer than a launch."""
        body = self.measured - self.launch
        return self.bytes / body / 1e9 if body > 0 else None


@dataclass(frozen=True, slots=True)
class Calibration:
    """What :func:`calibrate` measured on this machine."""

    name: str
    when: str  # ISO 8601 UTC
    threads: int
    peak_gflops: tuple[Rate, ...]  # per dtype, key "f32"/"f64"
    serial_gflops: Rate
    mem_bandwidth_gbs: Rate
    launch_us: Rate
    memory_gib: float
    probes: tuple[Probe, ...] = ()
    seconds: float = 0.0
    blas_threads: int | None = None  # the BLAS pool's limit while measuring; None: not controlled
    cache_mib: Rate | None = None  # the cache roofline's step (None: no cache effect measured)
    cache_bandwidth_gbs: Rate | None = None
    cache_sweep: tuple[tuple[float, float], ...] = ()  # (working set MiB, GB/s net of launch)
