"""Fractional GPUs: MIG slices and MPS shares of a platform's GPU.

A device with ``mig = "PROFILE"`` is one GPU instance of the GPU its other keys describe
(identified by its SM count and memory): its SMs and memory are the profile's, from the
``nvidia-smi mig -lgip`` tables of the NVIDIA Multi-Instance GPU User Guide ("Supported MIG
Profiles", A100-SXM4-40GB, A100-SXM4-80GB and H100-SXM5-80GB), its compute rates scale with its
SMs, and its memory bandwidth and L2 cache with its memory slices (eighths of the GPU: each
instance owns its memory controllers and L2 banks, same guide, "Partitioning"). A slice is not
``k/7`` of a GPU: an A100's 7g slice has 98 of 108 SMs.

A device with ``mps_percent = P`` is a CUDA MPS client limited to ``P`` percent of the SMs
(``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``, NVIDIA Multi-Process Service guide): its compute rates
scale by ``P / 100`` (whole SMs, rounded up); memory, bandwidth and cache stay shared and are not
divided, and the interference between clients sharing them is not modelled.
"""

from __future__ import annotations

import math
from dataclasses import replace

from mapper.platform.devices import Device

#: GPU -> (SMs, GiB as the platform files give it) that identify it.
GPUS = {
    "A100-SXM4-40GB": (108, 40.0),
    "A100-SXM4-80GB": (108, 80.0),
    "H100-SXM5-80GB": (132, 80.0),
}
#: GPU -> profile -> (SMs, memory GiB, memory slices of 8), as ``nvidia-smi mig -lgip`` lists them
#: (NVIDIA MIG User Guide, "Supported MIG Profiles"; ``+me`` profiles add media engines only).
MIG_PROFILES: dict[str, dict[str, tuple[int, float, int]]] = {
    "A100-SXM4-40GB": {
        "1g.5gb": (14, 4.75, 1), "1g.5gb+me": (14, 4.75, 1), "1g.10gb": (14, 9.62, 2), "2g.10gb": (28, 9.75, 2),
        "3g.20gb": (42, 19.62, 4), "4g.20gb": (56, 19.62, 4), "7g.40gb": (98, 39.50, 8),
    },
    "A100-SXM4-80GB": {
        "1g.10gb": (14, 9.50, 1), "1g.10gb+me": (14, 9.50, 1), "1g.20gb": (14, 19.50, 2), "2g.20gb": (28, 19.50, 2),
        "3g.40gb": (42, 39.25, 4), "4g.40gb": (56, 39.25, 4), "7g.80gb": (98, 79.25, 8),
    },
    "H100-SXM5-80GB": {
        "1g.10gb": (16, 9.75, 1), "1g.10gb+me": (16, 9.75, 1), "1g.20gb": (26, 19.62, 2), "2g.20gb": (32, 19.62, 2),
        "3g.40gb": (60, 39.50, 4), "4g.40gb": (64, 39.50, 4), "7g.80gb": (132, 79.25, 8),
    },
}


def gpu_model(device: Device) -> str | None:
    """The GPU of :data:`GPUS` that ``device`` describes (SMs and memory), or None."""
    for model, (sms, gib) in GPUS.items():
        if device.compute_units == sms and device.memory_gib == gib:
            return model
    return None


def _scaled(device: Device, compute: float, memory: float, units: int, gib: float | None) -> Device:
    return replace(
        device,
        peak_gflops=tuple((d, v * compute) for d, v in device.peak_gflops),
        tensor_gflops=tuple((d, v * compute) for d, v in device.tensor_gflops),
        compute_units=units,
        memory_gib=gib,
        mem_bandwidth_gbs=device.mem_bandwidth_gbs * memory if device.mem_bandwidth_gbs else device.mem_bandwidth_gbs,
        cache_mib=device.cache_mib * memory if device.cache_mib else device.cache_mib,
    )


def mig_slice(device: Device, profile: str) -> Device:
    """``device`` (a whole GPU) as its MIG instance ``profile``; ValueError saying why not."""
    model = gpu_model(device)
    if model is None:
        known = ", ".join(f"{m} ({s} SMs, {g:g} GiB)" for m, (s, g) in GPUS.items())
        raise ValueError(f"MIG profiles are known for {known}; this device has "
                         f"{device.compute_units} compute_units and {device.memory_gib} GiB")
    table = MIG_PROFILES[model]
    if profile not in table:
        raise ValueError(f"{model} has no MIG profile {profile!r}; its profiles: {', '.join(table)}")
    sms, gib, slices = table[profile]
    full = GPUS[model][0]
    return replace(_scaled(device, sms / full, slices / 8, sms, gib), mig=profile)


def mps_share(device: Device, percent: float) -> Device:
    """``device`` as an MPS client limited to ``percent`` of its SMs (module docstring)."""
    if not 0 < percent <= 100:
        raise ValueError(f"expected a percentage in (0, 100], got {percent:g}")
    full = device.compute_units
    if full is None:
        raise ValueError("mps_percent needs the GPU's compute_units (its SMs, which MPS limits)")
    units = math.ceil(full * percent / 100)
    return replace(_scaled(device, units / full, 1.0, units, device.memory_gib), mps_percent=float(percent))
