"""The platform file schema: :class:`Checker` reads one parsed TOML document
into a :class:`~mapper.platform.devices.Platform`, naming the file and key at fault
(docs/platforms.md)."""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from mapper.core.graph import DTYPE_BYTES
from mapper.core.ops import ATTENTION_OPS, FLAG_VARIANTS, OP_CLASSES, OPS
from mapper.errors import PlatformError
from mapper.platform.devices import DEVICE_KINDS, Device, Link, Platform, Switch
from mapper.platform.kernels import read_kernels
from mapper.platform.slices import mig_slice, mps_share
from mapper.platform.support import read_support

# Each numeric key: (minimum kind, unit shown in messages). "pos" > 0, "nonneg" >= 0.
_DEVICE_NUMBERS: dict[str, tuple[str, str]] = {
    "mem_bandwidth_gbs": ("pos", "GB/s"),
    "memory_gib": ("pos", "GiB"),
    "launch_us": ("nonneg", "microseconds"),
    "power_active_w": ("nonneg", "watts"),
    "power_idle_w": ("nonneg", "watts"),
    "serial_gflops": ("pos", "GFLOP/s"),
    "area": ("pos", "area units"),
    "clock_mhz": ("pos", "MHz"),
    "reconfig_ms": ("nonneg", "milliseconds"),
    "cache_mib": ("pos", "MiB"),
    "cache_bandwidth_gbs": ("pos", "GB/s"),
    "im2col_gbs": ("pos", "GB/s"),
    "price_per_hour": ("pos", "dollars per hour"),
    "invoke_us": ("nonneg", "microseconds"),
}
#: Numbers in a platform file lie in [-MAX_NUMBER, MAX_NUMBER]; positive ones are at least MIN_POSITIVE
#: (whatever the unit: a rate of 1e-9 GB/s or a latency of 1e15 us is a typo, and the cost model
#: divides by rates).
MAX_NUMBER = 1e15
MIN_POSITIVE = 1e-9
#: Largest per-op ``memory_efficiency`` table entry (see ``stream_fraction``).
MAX_STREAM_FRACTION = 4.0

#: Keys that come only together: (key, its partner).
_PAIRED = (("cache_mib", "cache_bandwidth_gbs"), ("cache_bandwidth_gbs", "cache_mib"))
_FPGA_ONLY = ("area", "clock_mhz", "reconfig_ms", "streaming")
#: Dtypes of a ``tensor_gflops`` table: the DSL's, TF32 (the tensor-core format f32 GEMMs may run in)
#: and the low-precision GEMM formats ``--precision`` selects (mapper.costing.precision).
TENSOR_DTYPES = (*DTYPE_BYTES, "tf32", "fp8", "mxfp8", "nvfp4")
_DEVICE_KEYS = ("name", "kind", "peak_gflops", *_DEVICE_NUMBERS, "streaming", "efficiency", "memory_efficiency",
                "fusion", "tensor_gflops", "f32_matmul", "compute_units", "gemm_tile", "gemm_split_k", "gemm_stages",
                "overlap_exponent", "max_tasks", "max_inbound", "attention_kernel", "attention_kernels",
                "overhead_us", "overhead_us_per_mib", "half_length", "gemm_half_lengths", "gemm_pack_ns",
                "gemm_pack_cold_ns", "supports", "dtypes", "convert", "mig", "mps_percent")
_LINK_NUMBERS: dict[str, tuple[str, str]] = {
    "bandwidth_gbs": ("pos", "GB/s"),
    "latency_us": ("nonneg", "microseconds"),
    "sync_us": ("nonneg", "microseconds"),
}
_LINK_KEYS = ("from", "to", *_LINK_NUMBERS, "bidirectional", "shared_memory")
_TOP_KEYS = ("name", "description", "host", "device", "link", "switch", "throughput_model", "micro_batches",
             "cluster")
#: The most copies one ``[[device]]`` table may stand for (``count``).
MAX_COUNT = 1024
#: The throughput models a platform may name (mapper.mapping.objectives).
THROUGHPUT_MODELS = ("device-load", "max-load", "1f1b")
#: The most devices a platform may have (every pair has a route in the cost table).
MAX_DEVICES = 1024
#: The most micro-batches an iteration may have.
MAX_MICRO_BATCHES = 1_000_000
_SWITCH_KEYS = ("name", "ports", "bandwidth_gbs", "latency_us", "collective_efficiency", "step_latency_us")
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_UNIT_SUFFIXES = (
    "gbs", "gibs", "mbs", "tbs", "gib", "gb", "mib", "mb", "tb", "tib",
    "us", "ns", "ms", "s", "w", "kw", "mhz", "ghz", "khz", "hz", "gflops", "tflops",
)


def _stem(key: str) -> str:
    """``key`` without a trailing unit suffix (``launch_ms`` -> ``launch``)."""
    for suf in sorted(_UNIT_SUFFIXES, key=len, reverse=True):
        if key.endswith("_" + suf):
            return key[: -len(suf) - 1]
    return key


class Checker:
    """Reads one parsed TOML document into a :class:`Platform`, naming the key at fault."""

    def __init__(self, file: str, lists: Callable[[str], Any] | None = None) -> None:
        self.file = file
        self.groups: dict[str, tuple[str, ...]] = {}
        self.lists = lists  # a shipped op-support list's parsed file by name (None: unknown)

    def fail(self, path: str, message: str) -> PlatformError:
        return PlatformError(message, obj=f"{self.file}: {path}")

    # values -------------------------------------------------------------
    def string(self, value: Any, path: str) -> str:
        if not isinstance(value, str):
            raise self.fail(path, f"expected a string, got {_describe(value)}")
        return value

    def number(self, value: Any, path: str, rule: str, unit: str) -> float:
        if isinstance(value, str):
            raise self.fail(
                path,
                f"expected a number in {unit} (the unit is in the key name), got the string {value!r}",
            )
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(path, f"expected a number in {unit}, got {_describe(value)}")
        try:
            x = float(value)
        except OverflowError:  # an integer of hundreds of digits
            x = math.inf
        if not math.isfinite(x) or abs(x) > MAX_NUMBER:
            raise self.fail(path, f"expected a finite number in {unit} of at most {MAX_NUMBER:g}, "
                                  f"got {_short(value)}")
        if rule == "pos" and x <= 0:
            raise self.fail(path, f"expected a positive number in {unit}, got {_short(value)}")
        if rule == "pos" and x < MIN_POSITIVE:
            raise self.fail(path, f"expected a positive number in {unit} of at least {MIN_POSITIVE:g}, "
                                  f"got {_short(value)}")
        if rule == "nonneg" and x < 0:
            raise self.fail(path, f"expected a number >= 0 in {unit}, got {_short(value)}")
        return x

    def fraction(self, value: Any, path: str) -> float:
        """A number in (0, 1]: the share of a peak rate that is reached."""
        x = self.number(value, path, "pos", "a fraction of the peak")
        if x > 1:
            raise self.fail(path, f"expected a fraction of the peak in (0, 1], got {value}")
        return x

    def stream_fraction(self, value: Any, path: str) -> float:
        """A per-op memory efficiency in (0, MAX_STREAM_FRACTION]: above 1 where
        a kernel moves its counted bytes faster than the declared bandwidth
        (a stencil's sweeps reuse cache lines the byte count charges again)."""
        x = self.number(value, path, "pos", "a fraction of the bandwidth")
        if x > MAX_STREAM_FRACTION:
            raise self.fail(path, f"expected a fraction of the bandwidth in (0, {MAX_STREAM_FRACTION:g}], got {value}")
        return x

    def boolean(self, value: Any, path: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(path, f"expected true or false, got {_describe(value)}")
        return value

    def table(self, value: Any, path: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, f"expected a table, got {_describe(value)}")
        return value

    def keys(self, table: dict[str, Any], path: str, allowed: tuple[str, ...], required: tuple[str, ...]) -> None:
        for key in table:
            if key not in allowed:
                raise self.fail(_join(path, key), _unknown_key(key, allowed))
        for key in required:
            if key not in table:
                where = path or "top level"
                raise self.fail(_join(path, key), f"missing required key {key!r} in {where}")

    def name(self, value: Any, path: str) -> str:
        text = self.string(value, path)
        if not _NAME_RE.match(text):
            raise self.fail(path, f"expected an identifier (letters, digits, _), got {text!r}")
        return text

    # sections -----------------------------------------------------------
    def device(self, raw: Any, i: int) -> Device:
        path = f"device[{i}]"
        tab = self.table(raw, path)
        self.keys(tab, path, _DEVICE_KEYS, ("name", "kind"))
        name = self.name(tab["name"], f"{path}.name")
        kind = self.string(tab["kind"], f"{path}.kind")
        if kind not in DEVICE_KINDS:
            raise self.fail(f"{path}.kind", f"expected one of {', '.join(DEVICE_KINDS)}, got {kind!r}")
        if name in DEVICE_KINDS:
            raise self.fail(f"{path}.name", f"a device may not be named after a kind ({name!r})")
        if kind != "fpga":
            for key in _FPGA_ONLY:
                if key in tab:
                    raise self.fail(f"{path}.{key}", f"only valid for kind = \"fpga\", this device is a {kind}")
        peaks = self.peaks(tab, path, "peak_gflops", tuple(DTYPE_BYTES))
        tensor = self.peaks(tab, path, "tensor_gflops", TENSOR_DTYPES)
        f32_matmul = self.string(tab.get("f32_matmul", "f32"), f"{path}.f32_matmul")
        if f32_matmul not in ("f32", "tf32"):
            raise self.fail(f"{path}.f32_matmul", f"expected \"f32\" or \"tf32\", got {f32_matmul!r}")
        if f32_matmul == "tf32" and not any(d == "tf32" for d, _ in tensor):
            raise self.fail(f"{path}.f32_matmul", "\"tf32\" needs a tf32 rate in tensor_gflops")
        fuses = self.boolean(tab["fusion"], f"{path}.fusion") if "fusion" in tab else kind in ("gpu", "npu", "dla")
        units = None
        if "compute_units" in tab:
            units = self.integer(tab["compute_units"], f"{path}.compute_units", "compute units")
        tile = self.named_numbers(tab, path, "gemm_tile", "mnk", "elements")
        if tile is not None and (min(tile) < 1 or any(v != int(v) for v in tile)):
            raise self.fail(f"{path}.gemm_tile", f"expected whole numbers >= 1, got {tile}")
        split = 1
        if "gemm_split_k" in tab:
            split = self.integer(tab["gemm_split_k"], f"{path}.gemm_split_k", "K slices")
        stages = 0
        if "gemm_stages" in tab:
            stages = self.integer(tab["gemm_stages"], f"{path}.gemm_stages", "pipeline stages")
            if tile is None:
                raise self.fail(f"{path}.gemm_stages", "needs gemm_tile and compute_units (the blocks it loads)")
        overlap = None
        if "overlap_exponent" in tab:
            overlap = self.number(tab["overlap_exponent"], f"{path}.overlap_exponent", "pos", "an exponent")
            if overlap < 1:
                raise self.fail(f"{path}.overlap_exponent", f"expected an exponent >= 1, got {overlap:g}")
        most = {key: self.integer(tab[key], f"{path}.{key}", what)
                for key, what in (("max_tasks", "tasks"), ("max_inbound", "inbound nets")) if key in tab}
        if (tile is None) != (units is None):
            raise self.fail(f"{path}.{'gemm_tile' if tile is None else 'compute_units'}",
                            "gemm_tile and compute_units come together (the wave model of a GEMM)")
        nums = {
            key: self.number(tab[key], f"{path}.{key}", rule, unit)
            for key, (rule, unit) in _DEVICE_NUMBERS.items()
            if key in tab
        }
        for key, partner in _PAIRED:
            if key in tab and partner not in tab:
                raise self.fail(f"{path}.{partner}", f"missing {partner!r}: {key!r} needs it (the cache roofline)")
        streaming = self.boolean(tab["streaming"], f"{path}.streaming") if "streaming" in tab else False
        efficiency = self.per_op(tab, path, "efficiency", lambda v, kp: self.fraction(v, kp))
        overhead = self.per_op(tab, path, "overhead_us",
                               lambda v, kp: self.number(v, kp, "nonneg", "microseconds"))
        per_mib = self.per_op(tab, path, "overhead_us_per_mib",
                              lambda v, kp: self.number(v, kp, "nonneg", "microseconds per MiB"))
        half = self.per_op(tab, path, "half_length", lambda v, kp: self.number(v, kp, "nonneg", "vector elements"))
        gemm_half = self.named_numbers(tab, path, "gemm_half_lengths", "mnk", "elements")
        gemm_pack = self.named_numbers(tab, path, "gemm_pack_ns", "abc", "nanoseconds per element")
        gemm_cold = self.named_numbers(tab, path, "gemm_pack_cold_ns", "ab", "nanoseconds per element")
        memory_efficiency = None
        memory_ops: tuple[tuple[str, float], ...] = ()
        if isinstance(tab.get("memory_efficiency"), dict):  # per op, keyed like efficiency
            memory_ops = self.per_op(tab, path, "memory_efficiency", self.stream_fraction)
        elif "memory_efficiency" in tab:
            memory_efficiency = self.fraction(tab["memory_efficiency"], f"{path}.memory_efficiency")
        device = Device(
            index=i,
            name=name,
            kind=kind,
            peak_gflops=tuple(peaks),
            mem_bandwidth_gbs=nums.get("mem_bandwidth_gbs"),
            memory_gib=nums.get("memory_gib"),
            launch_us=nums.get("launch_us", 0.0),
            power_active_w=nums.get("power_active_w"),
            power_idle_w=nums.get("power_idle_w"),
            serial_gflops=nums.get("serial_gflops"),
            area=nums.get("area"),
            clock_mhz=nums.get("clock_mhz"),
            reconfig_ms=nums.get("reconfig_ms"),
            streaming=streaming,
            efficiency=tuple(efficiency),
            memory_efficiency=memory_efficiency,
            memory_efficiency_ops=memory_ops,
            cache_mib=nums.get("cache_mib"),
            cache_bandwidth_gbs=nums.get("cache_bandwidth_gbs"),
            overhead_us=overhead,
            overhead_us_per_mib=per_mib,
            half_length=half,
            gemm_half_lengths=_triple(gemm_half),
            gemm_pack_ns=_triple(gemm_pack),
            gemm_pack_cold_ns=_pair(gemm_cold),
            im2col_gbs=nums.get("im2col_gbs"),
            price_per_hour=nums.get("price_per_hour"),
            fuses=fuses,
            max_tasks=most.get("max_tasks"),
            max_inbound=most.get("max_inbound"),
            tensor_gflops=tensor,
            f32_matmul=f32_matmul,
            compute_units=units,
            gemm_tile=None if tile is None else (int(tile[0]), int(tile[1]), int(tile[2])),
            gemm_split_k=split,
            gemm_stages=stages,
            overlap_exponent=overlap,
            **self.delegate_keys(tab, path), **read_kernels(self, tab, path))
        return self.sliced(device, tab, path)

    def sliced(self, device: Device, tab: dict[str, Any], path: str) -> Device:
        """``device`` as the MIG slice or MPS share its ``mig`` or ``mps_percent`` asks for."""
        if "mig" in tab and "mps_percent" in tab:
            raise self.fail(f"{path}.mps_percent", "a device is a MIG slice or an MPS share, not both")
        try:
            if "mig" in tab:
                return mig_slice(device, self.string(tab["mig"], f"{path}.mig"))
            if "mps_percent" in tab:
                return mps_share(device, self.number(tab["mps_percent"], f"{path}.mps_percent", "pos", "percent"))
        except ValueError as err:
            raise self.fail(f"{path}.{'mig' if 'mig' in tab else 'mps_percent'}", str(err)) from None
        return device

    def delegate_keys(self, tab: dict[str, Any], path: str) -> dict[str, Any]:
        """``supports``, ``dtypes``, ``convert`` and ``invoke_us`` of a device (docs/platforms.md)."""
        out: dict[str, Any] = {}
        if "supports" in tab:
            raw = tab["supports"]
            if isinstance(raw, str):
                doc = self.lists(raw) if self.lists is not None else None
                if doc is None:
                    shipped = self.lists("") if self.lists is not None else []
                    raise self.fail(f"{path}.supports", f"unknown op-support list {raw!r}; shipped: "
                                                        f"{', '.join(shipped or ['none'])} (or an array of op types)")
                out["supports"] = read_support(doc, f"{path}.supports ({raw})", raw, self.fail)
            else:
                out["supports"] = read_support(raw, f"{path}.supports", "inline", self.fail)
        if "dtypes" in tab:
            out["dtypes"] = _dtype_list(self, tab["dtypes"], f"{path}.dtypes")
        if "convert" in tab:
            conv = self.table(tab["convert"], f"{path}.convert")
            pairs = []
            for src in sorted(conv):
                dst = self.string(conv[src], f"{path}.convert.{src}")
                if src not in DTYPE_BYTES or dst not in out.get("dtypes", DTYPE_BYTES):
                    raise self.fail(f"{path}.convert.{src}", f"expected a dtype converted to one of the device's "
                                                             f"dtypes, got {src!r} -> {dst!r}")
                pairs.append((src, dst))
            out["convert"] = tuple(pairs)
        if "invoke_us" in tab:
            out["invoke_us"] = self.number(tab["invoke_us"], f"{path}.invoke_us", "nonneg", "microseconds")
        return out

    def peaks(self, tab: dict[str, Any], path: str, key: str, dtypes: tuple[str, ...]) -> tuple[tuple[str, float], ...]:
        """A table of GFLOP/s per dtype (one of ``dtypes``), in key order; () when ``key`` is absent."""
        if key not in tab:
            return ()
        out: list[tuple[str, float]] = []
        ptab = self.table(tab[key], f"{path}.{key}")
        for dtype in sorted(ptab):
            kpath = f"{path}.{key}.{dtype}"
            if dtype not in dtypes:
                raise self.fail(kpath, f"unknown dtype {dtype!r}; expected one of {', '.join(dtypes)}")
            out.append((dtype, self.number(ptab[dtype], kpath, "pos", "GFLOP/s")))
        return tuple(out)

    def integer(self, value: Any, path: str, unit: str) -> int:
        """A whole number >= 1."""
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_NUMBER:
            raise self.fail(path, f"expected a whole number of {unit} >= 1, got {_describe(value)}")
        return value

    def named_numbers(self, tab: dict[str, Any], path: str, key: str, names: str,
                      unit: str) -> tuple[float, ...] | None:
        """A table with exactly the one-letter keys ``names``, each a number >= 0,
        as a tuple in that order; None when ``key`` is absent."""
        if key not in tab:
            return None
        kpath = f"{path}.{key}"
        sub = self.table(tab[key], kpath)
        self.keys(sub, kpath, tuple(names), tuple(names))
        return tuple(self.number(sub[d], f"{kpath}.{d}", "nonneg", unit) for d in names)

    def per_op(self, tab: dict[str, Any], path: str, key: str, read: Any) -> tuple[tuple[str, float], ...]:
        """A table keyed by op class, op or op variant (:func:`model_key_ok`), in key order."""
        if key not in tab:
            return ()
        out: list[tuple[str, float]] = []
        sub = self.table(tab[key], f"{path}.{key}")
        for name in sorted(sub):
            kpath = f"{path}.{key}." + (f'"{name}"' if "." in name or ":" in name else name)
            if not model_key_ok(name):
                raise self.fail(kpath, f"unknown op class, op or op variant {name!r}; expected an op class "
                                       f"({', '.join(OP_CLASSES)}), an op of docs/ops.md, or an op and one of "
                                       "its string choices or flags such as \"reduce.max\", \"attention.causal\" "
                                       "or \"attention.backward\", "
                                       "each optionally with \":dtype\" (\"elementwise:f64\") or a GEMM "
                                       "format (\"gemm:fp8\")")
            out.append((name, read(sub[name], kpath)))
        return tuple(out)

    def links(self, raws: list[Any], names: set[str]) -> tuple[Link, ...]:
        out: list[Link] = []
        seen: dict[tuple[str, str], int] = {}
        for j, raw in enumerate(raws):
            path = f"link[{j}]"
            tab = self.table(raw, path)
            self.keys(tab, path, _LINK_KEYS, ("from", "to", "bandwidth_gbs"))
            ends = []
            for key in ("from", "to"):
                end = self.string(tab[key], f"{path}.{key}")
                if end not in names:
                    raise self.fail(f"{path}.{key}", f"unknown device {end!r}; devices: {', '.join(sorted(names))}")
                ends.append(end)
            src, dst = ends
            if src == dst:
                raise self.fail(f"{path}.to", f"a link must join two different devices, got {src!r} twice")
            bw = self.number(tab["bandwidth_gbs"], f"{path}.bandwidth_gbs", *_LINK_NUMBERS["bandwidth_gbs"])
            shared = self.boolean(tab["shared_memory"], f"{path}.shared_memory") if "shared_memory" in tab else False
            if "sync_us" in tab and not shared:
                raise self.fail(f"{path}.sync_us", "only valid with shared_memory = true")
            sync = self.number(tab.get("sync_us", 0.0), f"{path}.sync_us", *_LINK_NUMBERS["sync_us"])
            lat = 0.0
            if "latency_us" in tab:
                lat = self.number(tab["latency_us"], f"{path}.latency_us", *_LINK_NUMBERS["latency_us"])
            both = self.boolean(tab["bidirectional"], f"{path}.bidirectional") if "bidirectional" in tab else False
            for a, b in ((src, dst), (dst, src)) if both else ((src, dst),):
                if (a, b) in seen:
                    raise self.fail(path, f"duplicate link {a} -> {b} (already declared by link[{seen[(a, b)]}])")
                seen[(a, b)] = j
                out.append(Link(index=len(out), src=a, dst=b, bandwidth_gbs=bw, latency_us=lat,
                                shared_memory=shared, sync_us=sync))
        return tuple(out)

    def platform(self, doc: dict[str, Any], source: str, most: int = MAX_DEVICES,
                 what: str = "a platform") -> Platform:
        """The platform ``doc`` describes, of at most ``most`` devices (``what`` it is, in the message)."""
        self.keys(doc, "", _TOP_KEYS, ("name", "device"))
        name = self.string(doc["name"], "name")
        if not name.strip():
            raise self.fail("name", "expected a non-empty platform name")
        description = self.string(doc["description"], "description") if "description" in doc else ""
        raw_devices = doc["device"]
        if not isinstance(raw_devices, list) or not raw_devices:
            raise self.fail("device", f"expected one or more [[device]] tables, got {_describe(raw_devices)}")
        declared = sum(raw["count"] if isinstance(raw, dict) and type(raw.get("count")) is int
                       and 1 <= raw["count"] <= MAX_COUNT else 1 for raw in raw_devices)
        if declared > most:  # before any is built
            raise self.fail("device", f"{declared:,} devices; {what} has at most {most:,} (the "
                                      "cost model keeps a route for every pair)")
        devices: list[Device] = []
        first: dict[str, int] = {}
        self.groups = {}  # a device table with a count -> its devices' names
        for i, raw in enumerate(raw_devices):
            for dev in self.counted(raw, i):
                if dev.name in first:
                    raise self.fail(f"device[{i}].name", f"duplicate device name {dev.name!r} (also "
                                                         f"device[{first[dev.name]}])")
                first[dev.name] = i
                devices.append(replace(dev, index=len(devices)))
        if len(devices) > most:
            raise self.fail("device", f"{len(devices):,} devices; {what} has at most {most:,} (the "
                                      "cost model keeps a route for every pair)")
        names = {d.name for d in devices}
        raw_links = doc.get("link", [])
        if not isinstance(raw_links, list):
            raise self.fail("link", f"expected [[link]] tables, got {_describe(raw_links)}")
        links = self.links(raw_links, names)
        raw_switches = doc.get("switch", [])
        if not isinstance(raw_switches, list):
            raise self.fail("switch", f"expected [[switch]] tables, got {_describe(raw_switches)}")
        switches = tuple(self.switch(raw, k, names) for k, raw in enumerate(raw_switches))
        links = switch_links(links, switches)
        if "host" in doc:
            host: str | None = self.string(doc["host"], "host")
            if host not in names:
                raise self.fail("host", f"unknown device {host!r}; devices: {', '.join(sorted(names))}")
        else:
            host = next((d.name for d in devices if d.kind == "cpu"), None)
        model = "device-load"
        if "throughput_model" in doc:
            model = self.string(doc["throughput_model"], "throughput_model")
            if model not in THROUGHPUT_MODELS:
                raise self.fail("throughput_model", f"unknown throughput model {model!r}; choose one of "
                                                    f"{', '.join(THROUGHPUT_MODELS)}")
        micro = 8
        if "micro_batches" in doc:
            micro = doc["micro_batches"]
            if isinstance(micro, bool) or not isinstance(micro, int) or not 1 <= micro <= MAX_MICRO_BATCHES:
                raise self.fail("micro_batches", f"expected an integer from 1 to {MAX_MICRO_BATCHES}, "
                                                 f"got {_describe(micro)}")
        return Platform(
            name=name,
            devices=tuple(devices),
            links=links,
            host=host,
            source=source,
            description=description,
            switches=switches,
            throughput_model=model,
            micro_batches=micro,
        )

    def counted(self, raw: Any, i: int) -> list[Device]:
        """The devices of ``[[device]]`` table ``i``: one, or with ``count = N`` N of them named
        ``NAME0`` .. ``NAME{N-1}`` (a switch's ``ports`` may name the table to mean them all)."""
        if not isinstance(raw, dict) or "count" not in raw:
            return [self.device(raw, i)]
        n = raw["count"]
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_COUNT:
            raise self.fail(f"device[{i}].count", f"expected an integer from 1 to {MAX_COUNT}, got {_describe(n)}")
        stem = self.name(raw.get("name"), f"device[{i}].name")
        one = self.device({**{k: v for k, v in raw.items() if k != "count"}, "name": f"{stem}0"}, i)
        self.groups[stem] = tuple(f"{stem}{j}" for j in range(n))
        return [replace(one, name=name) for name in self.groups[stem]]

    def switch(self, raw: Any, k: int, names: set[str]) -> Switch:
        path = f"switch[{k}]"
        tab = self.table(raw, path)
        self.keys(tab, path, _SWITCH_KEYS, ("name", "ports", "bandwidth_gbs"))
        name = self.name(tab["name"], f"{path}.name")
        ports = tab["ports"]
        if isinstance(ports, list):  # a device table with a count stands for all its devices
            ports = [q for p in ports for q in (self.groups.get(p, (p,)) if isinstance(p, str) else (p,))]
        if not isinstance(ports, list) or len(ports) < 2:
            raise self.fail(f"{path}.ports", f"expected an array of two or more device names, got {_describe(ports)}")
        for j, port in enumerate(ports):
            if self.string(port, f"{path}.ports[{j}]") not in names:
                raise self.fail(f"{path}.ports[{j}]", f"unknown device {port!r}; devices: {', '.join(sorted(names))}")
            if port in ports[:j]:
                raise self.fail(f"{path}.ports[{j}]", f"device {port!r} is on the switch twice")
        bw = self.number(tab["bandwidth_gbs"], f"{path}.bandwidth_gbs", *_LINK_NUMBERS["bandwidth_gbs"])
        lat = self.number(tab.get("latency_us", 0.0), f"{path}.latency_us", *_LINK_NUMBERS["latency_us"])
        eff = self.fraction(tab["collective_efficiency"], f"{path}.collective_efficiency") \
            if "collective_efficiency" in tab else 1.0
        step = self.number(tab["step_latency_us"], f"{path}.step_latency_us", *_LINK_NUMBERS["latency_us"]) \
            if "step_latency_us" in tab else None
        return Switch(name, tuple(ports), bw, lat, eff, step)


def _dtype_list(check: Checker, value: Any, path: str) -> tuple[str, ...]:
    """A non-empty array of DSL dtypes."""
    if not isinstance(value, list) or not value:
        raise check.fail(path, f"expected an array of dtypes, got {_describe(value)}")
    for j, d in enumerate(value):
        if check.string(d, f"{path}[{j}]") not in DTYPE_BYTES:
            raise check.fail(f"{path}[{j}]", f"unknown dtype {d!r}; expected one of {', '.join(DTYPE_BYTES)}")
    return tuple(value)


def model_key_ok(key: str) -> bool:
    """True for a key of the ``efficiency``, ``overhead_us``,
    ``overhead_us_per_mib`` and ``half_length`` tables: an op
    class, an op, or an op variant ``op.choice`` (a value of one of the op's
    string attributes with fixed choices, e.g. ``reduce.max``, or one of its
    :data:`mapper.core.ops.FLAG_VARIANTS`, ``attention.causal``, or ``attention.backward``, the
    gradient kernel of an attention op in a training step), each
    optionally for one dtype, ``key:dtype`` (``elementwise:f64``), or for a GEMM format of
    ``--precision`` with a tensor rate, ``key:fp8``."""
    key, colon, dtype = key.partition(":")
    if colon and dtype not in DTYPE_BYTES and dtype not in TENSOR_DTYPES:
        return False
    if key in OP_CLASSES or key in OPS:
        return True
    op, _, choice = key.partition(".")
    spec = OPS.get(op)
    return spec is not None and (any(choice in values for _, values in spec.choices)
                                 or choice in FLAG_VARIANTS.get(op, ())
                                 or (choice == "backward" and op in ATTENTION_OPS))


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _describe(value: Any) -> str:
    kinds = {bool: "a boolean", int: "an integer", float: "a float", str: "a string", list: "an array", dict: "a table"}
    kind = next((v for t, v in kinds.items() if type(value) is t), type(value).__name__)
    shown = repr(value)
    return f"{kind} ({shown if len(shown) <= 40 else shown[:37] + '...'})"


def _unknown_key(key: str, allowed: tuple[str, ...]) -> str:
    stem = _stem(key)
    for cand in allowed:
        if stem == _stem(cand) and key != cand:
            return f"unknown key {key!r}: units are part of the key name; expected {cand!r}"
    close = difflib.get_close_matches(key, list(allowed), n=1)
    if close:
        return f"unknown key {key!r}; did you mean {close[0]!r}? (expected one of {', '.join(allowed)})"
    return f"unknown key {key!r}; expected one of {', '.join(allowed)}"


def _triple(v: tuple[float, ...] | None) -> tuple[float, float, float] | None:
    """A three-number table (checked to have its three keys) as a typed triple."""
    return None if v is None else (v[0], v[1], v[2])


def _pair(v: tuple[float, ...] | None) -> tuple[float, float] | None:
    """A two-number table (checked to have its two keys) as a typed pair."""
    return None if v is None else (v[0], v[1])


def _short(value: object) -> str:
    """``value`` for a message, long digit strings cut."""
    text = str(value)
    return text if len(text) <= 30 else f"{text[:12]}...({len(text)} characters)"


def switch_links(links: tuple[Link, ...], switches: tuple[Switch, ...]) -> tuple[Link, ...]:
    """``links`` and one link per ordered pair of ports of each switch, in
    switch order; a pair already joined by a declared link or an earlier
    switch keeps that path. Ports are numbered in switch order, two per
    device on a switch (egress, ingress)."""
    out = list(links)
    joined = {(link.src, link.dst) for link in links}
    port = 0
    for sw in switches:
        egress = {d: port + 2 * j for j, d in enumerate(sw.ports)}
        port += 2 * len(sw.ports)
        for a in sw.ports:
            for b in sw.ports:
                if a != b and (a, b) not in joined:
                    joined.add((a, b))
                    out.append(Link(len(out), a, b, sw.bandwidth_gbs, sw.latency_us, sw.name,
                                    (egress[a], egress[b] + 1)))
    return tuple(out)
