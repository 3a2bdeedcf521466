"""The platform model: devices, links and the platform that holds them,
with its routes (docs/architecture.md: a direct link when declared, else
store-and-forward through the host's memory). :mod:`mapper.platform.loader` reads
them from files."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from mapper.platform.support import OpSupport

DEVICE_KINDS = ("cpu", "gpu", "fpga", "npu", "dla")
#: Kinds that run delegated subgraphs (an NPU, NVIDIA's DLA): a runtime hands them whole partitions
ACCELERATOR_KINDS = ("npu", "dla")


@dataclass(frozen=True, slots=True)
class Device:
    """One compute device. Rates may be absent on minimal platforms."""

    index: int
    name: str
    kind: str  # cpu | gpu | fpga | npu | dla
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
    efficiency: tuple[tuple[str, float], ...] = ()  # op class or op -> fraction of peak (overrides the model's)
    memory_efficiency: float | None = None  # fraction of mem_bandwidth_gbs reached (overrides the model's)
    memory_efficiency_ops: tuple[tuple[str, float], ...] = ()  # op class, op or variant -> the same, per op
    cache_mib: float | None = None  # working sets up to this size run at cache_bandwidth_gbs
    cache_bandwidth_gbs: float | None = None  # bandwidth of data in that cache
    overhead_us: tuple[tuple[str, float], ...] = ()  # op class, op or op variant -> fixed time per call (Hockney t0)
    overhead_us_per_mib: tuple[tuple[str, float], ...] = ()  # the same keys -> fixed time per MiB of working set
    half_length: tuple[tuple[str, float], ...] = ()  # the same keys -> Hockney's n_1/2 in the op's vector length
    gemm_half_lengths: tuple[float, float, float] | None = None  # Hockney's n_1/2 of a GEMM's M, N, K
    gemm_pack_ns: tuple[float, float, float] | None = None  # ns per element of a GEMM's A, B, C
    gemm_pack_cold_ns: tuple[float, float] | None = None  # the same for an A or B read from memory (a weight)
    im2col_gbs: float | None = None  # rate at which conv2d's im2col moves bytes (mapper.costing.work.im2col_bytes)
    fuses: bool = False  # runs a fused task as one kernel (mapper.costing.fusion); default: GPUs do
    tensor_gflops: tuple[tuple[str, float], ...] = ()  # matrix-unit (tensor core) peak per dtype, "tf32" included
    f32_matmul: str = "f32"  # the unit f32 GEMMs, convs and attention run on: "f32" or "tf32" (tensor cores)
    compute_units: int | None = None  # SMs (GPU): the units a GEMM's output tiles are spread over
    gemm_tile: tuple[int, int, int] | None = None  # rows, columns, depth of the block a unit computes per step
    gemm_split_k: int = 1  # at most this many K slices when a GEMM's blocks cannot fill the units
    gemm_stages: int = 0  # K blocks a unit loads before its first multiply (the software pipeline); 0: not modelled
    overlap_exponent: float | None = None  # p of (Tc^p + Tm^p)^(1/p); None: max(Tc, Tm), the roofline
    price_per_hour: float | None = None  # dollars per device hour (optional; mapper serve's cost per token)
    supports: OpSupport | None = None  # the ops it runs (mapper.platform.support); None: every op
    dtypes: tuple[str, ...] = ()  # the dtypes it runs; (): every dtype it has a rate for
    convert: tuple[tuple[str, str], ...] = ()  # dtype -> the dtype it runs it in (an NPU runs f32 in f16)
    invoke_us: float = 0.0  # fixed cost of each delegated subgraph's invocation (docs/platforms.md)
    max_tasks: int | None = None  # tasks it may hold at most (a neuromorphic core's neurons); None: no limit
    max_inbound: int | None = None  # distinct nets produced elsewhere it may receive (input axons, ports)
    mig: str = ""  # the MIG profile it is a GPU instance of (mapper.platform.slices); "": a whole device
    mps_percent: float | None = None  # the SM share it has as a CUDA MPS client; None: not an MPS client
    kernel: str = ""  # the attention kernel its own attention entries price (mapper.platform.kernels); "": unnamed
    kernels: tuple[tuple[str, tuple[tuple[str, float], ...], tuple[tuple[str, float], ...]], ...] = ()  # others

    def tensor_peak(self, dtype: str) -> float | None:
        """The matrix-unit peak a GEMM-like kernel of ``dtype`` runs at, if the device has one."""
        unit = "tf32" if dtype == "f32" and self.f32_matmul == "tf32" else dtype
        for k, v in self.tensor_gflops:
            if k == unit:
                return v
        return None

    def peak(self, dtype: str) -> float | None:
        for k, v in self.peak_gflops:
            if k == dtype:
                return v
        return None

    @property
    def has_rates(self) -> bool:
        """True when the device has any compute rate or a memory bandwidth."""
        return bool(self.peak_gflops) or self.mem_bandwidth_gbs is not None


@dataclass(frozen=True, slots=True)
class Link:
    """A directed link from device ``src`` to device ``dst`` (names).

    A link through a switch (``switch`` names it) is the path between two of
    its ports: it holds the sender's egress port and the receiver's ingress
    port (``ports``, numbered per platform), which every other path through
    those ports shares; under contention a transfer waits for both."""

    index: int
    src: str
    dst: str
    bandwidth_gbs: float
    latency_us: float = 0.0
    switch: str = ""
    ports: tuple[int, ...] = ()
    shared_memory: bool = False  # both ends share DRAM: a transfer costs sync_us, not bytes / bandwidth
    sync_us: float = 0.0  # the synchronisation (cache maintenance, fence, signal) a shared-memory hand-over costs


@dataclass(frozen=True, slots=True)
class Switch:
    """A switch (NVSwitch, a PCIe switch): every device on it has one port of
    ``bandwidth_gbs`` per direction, shared by all its transfers through the switch."""

    name: str
    ports: tuple[str, ...]
    bandwidth_gbs: float
    latency_us: float = 0.0
    #: fraction of ``bandwidth_gbs`` a collective library's ring reaches through the switch
    collective_efficiency: float = 1.0
    #: microseconds per step of the collective library's low-latency protocol through the switch
    #: (NCCL's LL); None: only the bandwidth protocol is modelled (:mod:`mapper.parallel.collectives`)
    step_latency_us: float | None = None


#: Inter-node topologies a cluster platform may name (docs/platforms.md, Clusters).
TOPOLOGIES = ("fat-tree",)


@dataclass(frozen=True, slots=True)
class Cluster:
    """``nodes`` copies of the platform's devices (one node), joined by a fabric: each node has
    ``nics`` network adapters of ``nic_bandwidth_gbs`` per direction; a fat tree gives every
    node ``bisection`` of that bandwidth to any other (1.0: full bisection)."""

    nodes: int
    nics: int
    nic_bandwidth_gbs: float
    latency_us: float = 0.0
    topology: str = "fat-tree"
    bisection: float = 1.0
    collective_efficiency: float = 1.0  # fraction of the NICs' bandwidth a collective reaches
    #: nodes one scale-up switch joins beyond a node (GB200 NVL72: 18 trays on one NVLink domain); 1: none
    domain_nodes: int = 1

    @property
    def node_bandwidth_gbs(self) -> float:
        """What one node sends to the others per direction in a collective, all NICs together."""
        return self.nics * self.nic_bandwidth_gbs * self.bisection * self.collective_efficiency


@dataclass(frozen=True, slots=True)
class FleetKind:
    """One kind of node of a fleet: its name (``--nodes KIND=N``) and its cluster platform."""

    kind: str
    platform: Platform


@dataclass(frozen=True, slots=True)
class Fleet:
    """Clusters of different node kinds; a node reaches a node of another kind at
    ``bandwidth_gbs`` per direction (all its NICs together) after ``latency_us``."""

    kinds: tuple[FleetKind, ...]
    bandwidth_gbs: float
    latency_us: float = 0.0

    def kind(self, name: str) -> FleetKind:
        for k in self.kinds:
            if k.kind == name:
                return k
        raise KeyError(name)


@dataclass(frozen=True, slots=True)
class Platform:
    """Devices and directed links. ``host`` names the device whose memory relays
    transfers between devices that have no direct link."""

    name: str
    devices: tuple[Device, ...]
    links: tuple[Link, ...] = ()
    host: str | None = None
    source: str = "<memory>"
    description: str = ""
    switches: tuple[Switch, ...] = ()
    #: how ``--objective throughput`` prices a period here (mapper.mapping.objectives)
    throughput_model: str = "device-load"
    #: micro-batches per training iteration under the ``1f1b`` throughput model
    micro_batches: int = 8
    #: a cluster platform: ``devices`` are one node's, repeated ``cluster.nodes`` times
    #: (:mod:`mapper.platform.cluster`)
    cluster: Cluster | None = None
    #: a fleet of several node kinds: ``devices`` and ``cluster`` are its first kind's
    #: (:mod:`mapper.platform.cluster`)
    fleet: Fleet | None = None
    #: (source, destination) -> the first link between them (what :meth:`link_between` answers)
    _pairs: dict[tuple[str, str], int] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        pairs: dict[tuple[str, str], int] = {}
        for link in self.links:
            pairs.setdefault((link.src, link.dst), link.index)
        object.__setattr__(self, "_pairs", pairs)

    def resources(self, link: int) -> tuple[int, ...]:
        """What a transfer on ``link`` holds under contention: the link itself
        (its index), or for a path through a switch its two ports (numbered
        after the links)."""
        ports = self.links[link].ports
        return tuple(len(self.links) + p for p in ports) if ports else (link,)

    def device_index(self, name: str) -> int:
        for d in self.devices:
            if d.name == name:
                return d.index
        raise KeyError(name)

    def link_between(self, a: int, b: int) -> int | None:
        """Index of the direct link from device ``a`` to device ``b``, if declared."""
        return self._pairs.get((self.devices[a].name, self.devices[b].name))

    def route(self, a: int, b: int) -> tuple[int, ...] | None:
        """Link indices from device ``a`` to device ``b``; ``()`` when ``a == b``.

        A direct link wins; otherwise the route is ``a -> host -> b``
        (store-and-forward through host memory); otherwise ``()`` for two
        CPUs that share memory (:meth:`shares_memory`). ``None`` when none holds.
        """
        if a == b:
            return ()
        direct = self.link_between(a, b)
        if direct is not None:
            return (direct,)
        if self.host is not None:
            h = self.device_index(self.host)
            up, down = self.link_between(a, h), self.link_between(h, b)
            if h not in (a, b) and up is not None and down is not None:
                return (up, down)
        return () if self.shares_memory(a, b) else None

    def shares_memory(self, a: int, b: int) -> bool:
        """True for two CPUs alike but for their names on a platform with no links and no switches:
        identical processors that move data at no cost (docs/platforms.md, Routes)."""
        if self.links or self.switches:
            return False
        da, db = self.devices[a], self.devices[b]
        return da.kind == db.kind == "cpu" and replace(da, index=0, name="") == replace(db, index=0, name="")

    def summary(self) -> str:
        """Device counts by kind, e.g. ``1 cpu, 8 gpu`` (``16 nodes x (1 cpu, 8 gpu)`` for a cluster)."""
        counts = [(k, sum(1 for d in self.devices if d.kind == k)) for k in DEVICE_KINDS]
        text = ", ".join(f"{n} {k}" for k, n in counts if n)
        if self.fleet is not None:
            return " + ".join(f"{k.kind} {k.platform.summary()}" for k in self.fleet.kinds)
        return f"{self.cluster.nodes} nodes x ({text})" if self.cluster is not None else text
