"""Platforms: devices, links and routes between them.

The loader (``load_platform``) and schema checks live here too; the
only TOML reader is the standard library's ``tomllib``.
"""

from __future__ import annotations

from dataclasses import dataclass

DEVICE_KINDS = ("cpu", "gpu", "fpga")


@dataclass(frozen=True, slots=True)
class Device:
    """One compute device. Rates may be absent on minimal platforms."""

    index: int
    name: str
    kind: str  # cpu | gpu | fpga
    peak_gflops: tuple[tuple[str, float], ...] = ()  # per dtype
    mem_bandwidth_gbs: float | None = None
    memory_gib: float | None = None
    launch_us: float = 0.0
    power_active_w: float | None = None
    power_idle_w: float | None = None
    serial_gflops: float | None = None  # one lane's rate, for Amdahl's serial part
    area: float | None = None  # FPGA area capacity (see the platform reference)
    clock_mhz: float | None = None
    reconfig_ms: float | None = None
    streaming: bool = False

    def peak(self, dtype: str) -> float | None:
        for k, v in self.peak_gflops:
            if k == dtype:
                return v
        return None


@dataclass(frozen=True, slots=True)
class Link:
    """A directed link from device ``src`` to device ``dst`` (names)."""

    index: int
    src: str
    dst: str
    bandwidth_gbs: float
    latency_us: float = 0.0


@dataclass(frozen=True, slots=True)
class Platform:
    """Devices and directed links. ``host`` names the device whose memory relays
    transfers between devices that have no direct link."""

    name: str
    devices: tuple[Device, ...]
    links: tuple[Link, ...] = ()
    host: str | None = None
    source: str = "<memory>"

    def device_index(self, name: str) -> int:
        for d in self.devices:
            if d.name == name:
                return d.index
        raise KeyError(name)
