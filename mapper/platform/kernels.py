"""Attention kernels a GPU may run: a platform's named alternatives to its own attention rates.

A GPU's ``efficiency`` and ``half_length`` entries for attention price the kernel its
framework picks by default, named by ``attention_kernel`` (``"cudnn"`` on Hopper: Transformer
Engine selects cuDNN's fused attention on sm90 when both it and FlashAttention qualify,
``transformer_engine/pytorch/attention.py`` from v1.2 on). A run may have used another:
NeMo's 24.03 launcher set ``NVTE_FUSED_ATTN=0``, so Transformer Engine ran FlashAttention-2.
``attention_kernels = { NAME = { efficiency = {...}, half_length = {...} } }`` declares each
alternative's entries, keyed like the device's own and only for attention ops;
``--parallel ...,attn=NAME`` (:func:`with_kernel`) prices a plan with them (docs/platforms.md).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from mapper.core.ops import ATTENTION_OPS
from mapper.errors import OptionsError
from mapper.platform.devices import Device, Platform

Entries = tuple[tuple[str, float], ...]


def attention_key(key: str) -> bool:
    """True for a per-op key of an attention op (``attention``, ``attention.causal``, ``mla_attention:bf16``)."""
    return key.partition(":")[0].partition(".")[0] in ATTENTION_OPS


def read_kernels(check: Any, tab: dict[str, Any], path: str) -> dict[str, Any]:
    """A device's ``attention_kernel`` and ``attention_kernels`` (module docstring) as Device fields,
    read with ``check`` (the schema's :class:`~mapper.platform.schema.Checker`)."""
    out: dict[str, Any] = {}
    if "attention_kernel" in tab:
        out["kernel"] = check.string(tab["attention_kernel"], f"{path}.attention_kernel")
    if "attention_kernels" not in tab:
        return out
    if "kernel" not in out:
        raise check.fail(f"{path}.attention_kernels", "needs attention_kernel, the name of the kernel the "
                                                      "device's own attention entries price")
    kpath = f"{path}.attention_kernels"
    kernels = []
    for name, raw in sorted(check.table(tab["attention_kernels"], kpath).items()):
        sub = check.table(raw, f"{kpath}.{name}")
        check.keys(sub, f"{kpath}.{name}", ("efficiency", "half_length"), ())
        eff = check.per_op(sub, f"{kpath}.{name}", "efficiency", lambda v, kp: check.fraction(v, kp))
        half = check.per_op(sub, f"{kpath}.{name}", "half_length",
                            lambda v, kp: check.number(v, kp, "nonneg", "vector elements"))
        bad = next((k for k, _ in (*eff, *half) if not attention_key(k)), None)
        if bad is not None:
            raise check.fail(f"{kpath}.{name}", f"{bad!r} is not an attention op's key; an attention kernel "
                                                f"prices only {', '.join(sorted(ATTENTION_OPS))}")
        if name == out["kernel"]:
            raise check.fail(f"{kpath}.{name}", "is the device's own attention_kernel")
        kernels.append((name, eff, half))
    out["kernels"] = tuple(kernels)
    return out


def names(platform: Platform) -> tuple[str, ...]:
    """The attention kernels ``platform``'s GPUs (every fleet kind's) declare, defaults first."""
    devices = [d for p in _platforms(platform) for d in p.devices if d.kind == "gpu"]
    own = [d.kernel for d in devices if d.kernel]
    other = [k for d in devices for k, _, _ in d.kernels]
    return tuple(dict.fromkeys([*own, *other]))


def default(platform: Platform) -> str:
    """The attention kernel ``platform``'s GPUs run unless told (``""`` where none is named)."""
    own = names(platform)
    return own[0] if own else ""


def with_kernel(platform: Platform, name: str) -> Platform:
    """``platform`` with each GPU that declares attention kernel ``name`` priced with it (its own
    attention entries replaced by the kernel's); an OptionsError naming ``--parallel`` where no
    GPU declares it."""
    if name not in names(platform):
        known = names(platform)
        raise OptionsError(f"attn={name!r}: {platform.name}'s GPUs declare "
                           + (f"the attention kernels {', '.join(known)}" if known else "no attention kernels"),
                           obj="--parallel")
    return _swap(platform, name)


def _platforms(platform: Platform) -> tuple[Platform, ...]:
    """``platform`` and each of its fleet kinds' platforms."""
    return (platform, *(k.platform for k in platform.fleet.kinds)) if platform.fleet is not None else (platform,)


def _swap(platform: Platform, name: str) -> Platform:
    fleet = platform.fleet
    if fleet is not None:
        fleet = replace(fleet, kinds=tuple(replace(k, platform=_swap(k.platform, name)) for k in fleet.kinds))
    return replace(platform, devices=tuple(_device(d, name) for d in platform.devices), fleet=fleet)


def _device(device: Device, name: str) -> Device:
    kernel = next(((e, h) for k, e, h in device.kernels if k == name), None)
    if kernel is None or device.kernel == name:
        return device
    eff, half = kernel
    return replace(device, kernel=name, kernels=(),
                   efficiency=_merged(device.efficiency, eff), half_length=_merged(device.half_length, half))


def _merged(own: Entries, kernel: Entries) -> Entries:
    """``own`` without its attention entries, then ``kernel``'s, in key order."""
    return tuple(sorted([(k, v) for k, v in own if not attention_key(k)] + list(kernel)))
