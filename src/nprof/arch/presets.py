"""Device presets of the virtual NeuronCore: every hardware figure the simulator uses.

Contract: `PRESETS` maps "trn1" (NeuronCore-v2, Trn1/Inf2), "trn2"
(NeuronCore-v3, Trn2) and "trn3" (NeuronCore-v4, Trn3; several figures
unpublished and stated in its `assumptions`) to a frozen `Preset`; `get_preset(name)` returns one or
raises `NprofError` listing the valid names. Every figure is a named field whose
comment cites the public source (AWS Neuron / NKI documentation, as summarised in
docs/hardware.md). Where sources disagree the comment names the choice. Figures that
are *derived* (not printed in a document) say how they were derived.

Tests and studies may build variants with `dataclasses.replace(get_preset("trn1"), ...)`;
`nprof.device.simulate` accepts a `Preset` as well as a name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from nprof.errors import NprofError

_GB = 1e9
FITTED_FIELDS = ("dma_issue_gap_ns", "launch_ns")  # Preset fields fitted on a calibration set (bench/fidelity.py)
ASSUMED_FIELDS = ("sched_window",)  # Preset fields neither published nor fitted (no case to fit them)
_KIB = 1024


@dataclass(frozen=True)
class Preset:
    """One NeuronCore generation. Clocks in Hz, sizes in bytes, bandwidths in bytes/s, latencies in ns."""

    name: str  # preset name: "trn1" or "trn2"
    core: str  # NeuronCore generation
    # --- engine clocks (Hz) ---
    tensor_clock_hz: float  # TensorE *effective* clock: one moving column per cycle on the 128x128 array
    vector_clock_hz: float  # VectorE clock
    scalar_clock_hz: float  # ScalarE (activation engine) clock
    gpsimd_clock_hz: float  # GpSimdE clock
    sync_clock_hz: float  # Sync engine clock (semaphores/events)
    profiler_clock_hz: float  # base clock of the on-chip profiler's timestamps
    # --- on-chip memory geometry ---
    partitions: int  # SBUF/PSUM partitions (= TensorE rows)
    sbuf_partition_bytes: int  # SBUF bytes per partition
    psum_partition_bytes: int  # PSUM bytes per partition
    psum_banks: int  # PSUM accumulation banks per partition
    psum_bank_bytes: int  # bytes per PSUM bank per partition (512 fp32)
    # --- tile limits (NKI nl.tile_size) ---
    pmax: int  # max partitions of any tile
    gemm_stationary_fmax: int  # max free size of the matmul stationary operand
    gemm_moving_fmax: int  # max free size of the matmul moving operand
    psum_fmax: int  # max fp32 free size of one PSUM bank
    # --- DMA and HBM ---
    dma_queues: int  # DMA engines (queues) per NeuronCore; one transfer spreads over up to all of them
    dma_queue_bandwidth: float  # bytes/s one DMA queue moves at full efficiency
    hbm_bandwidth: float  # bytes/s of HBM available to one NeuronCore (chip bandwidth / cores)
    dma_latency_ns: float  # semaphore-to-transfer-start latency of a DMA descriptor
    dma_chunk_overhead_bytes: int  # fixed cost of one contiguous chunk, as bytes of transfer time (derived)
    dma_efficient_chunk_bytes: int  # chunk size from which a transfer counts as efficient
    # --- instruction costs (cycles) ---
    min_ii: int  # minimum initiation interval of any compute instruction
    static_access_cycles: int  # fixed latency to start an SBUF/PSUM access (exposed on dependencies)
    ldweights_rows_per_cycle: int  # fast weight load: rows loaded per cycle (128/4 = 32 cycles)
    fp8_matmul_speedup: int  # FP8 matmul throughput relative to BF16
    fp32_matmul_slowdown: int  # FP32 matmul passes relative to BF16 (4 = quarter rate)
    # --- peaks and collectives ---
    peak_flops: Mapping[str, float] = field(default_factory=dict)  # FLOP/s by matmul input class (bfloat16,
    # float8, float32; "mx" for packed MX data where the core has an MX rate)
    peaks_source: str = ""  # one line naming where the peaks come from
    cc_cores: int = 6  # collective-communication cores per device
    cores_per_chip: int = 2  # NeuronCores sharing the chip's HBM
    # --- interconnect for collectives (multi-worker; used by nprof.device.collectives) ---
    link_bandwidth: float = 384 * _GB  # bytes/s one direction of the intra-node NeuronLink hop of a ring
    link_latency_ns: float = 2000.0  # fixed cost of one intra-node ring step (CC-core handshake + hop)
    efa_bandwidth: float = 100 * _GB  # bytes/s of the node's EFA network, for ring hops between nodes
    efa_latency_ns: float = 15000.0  # fixed cost of one ring step that crosses nodes over EFA
    # --- FITTED: constants the public record does not give, fitted on bench/fidelity.py's fit set ---
    # Fixed per-launch cost before the first instruction. FITTED, bounded below by 0, on bench/fidelity.py's
    # "small kernel" case (the nrtpy tutorial's [4,3] fp16 add, measured 3.2 us device-side): without any
    # launch cost the model already gives 3.6 us, so the best non-negative fixed cost is 0 (docs/hardware.md).
    launch_ns: float = 0.0  # FITTED fixed per-launch cost (see the comment above)
    dma_issue_gap_ns: float = 781.0  # least time between two consecutive DMA triggers (any queue): see FITTED_FIELDS
    # ASSUMED (not fitted): how far the compiler's scheduler may move an independent instruction ahead in its
    # engine's queue (nprof.device.order; NKI nl.no_reorder: "the compiler scheduler is free to reorder
    # independent operations"). 1 = program order: no case of bench/fidelity.py matches better with a wider
    # window (--window 8: fully blocked matmul 1.042 vs 1.020 at 1; --window 32: 1.018; others unchanged;
    # docs/hardware.md), and ordering by the model's own estimates slows the exp kernel by 25%, a
    # list-scheduling anomaly we cannot check against hardware.
    sched_window: int = 1  # ASSUMED: the compiler's reordering window per engine queue (see the comment above)
    # Figures of this preset that no public document gives and that were not fitted (copied from an older
    # generation or derived by a stated rule): recorded in every profile simulated on it (arch.cost.model_meta).
    assumptions: str = ""  # one line listing the ASSUMED / DERIVED figures ("" = all published or fitted)

    def fitted(self) -> dict[str, float]:
        """The FITTED constants of this preset by name (recorded in every simulated profile's manifest)."""
        return {name: float(getattr(self, name)) for name in FITTED_FIELDS}

    def assumed(self) -> dict[str, float]:
        """The ASSUMED constants of this preset by name (recorded in every simulated profile's manifest)."""
        return {name: float(getattr(self, name)) for name in ASSUMED_FIELDS}

    @property
    def sbuf_bytes(self) -> int:
        return self.partitions * self.sbuf_partition_bytes

    @property
    def psum_bytes(self) -> int:
        return self.partitions * self.psum_partition_bytes

    def clock_hz(self, engine: str) -> float:
        """Clock of an engine by Profile engine name (tensor, vector, scalar, gpsimd, sync, dma, cc)."""
        if engine == "vector":  # (a chain, not a dict built per call: the lowering asks ~10^5 times a graph)
            return self.vector_clock_hz
        if engine == "scalar":
            return self.scalar_clock_hz
        if engine == "gpsimd":
            return self.gpsimd_clock_hz
        if engine == "tensor":
            return self.tensor_clock_hz
        return self.sync_clock_hz if engine == "sync" else self.profiler_clock_hz

    def peak(self, dtype: str) -> float:
        """Peak matmul FLOP/s for a matmul input dtype name (float32, bfloat16, float8_e4m3, ...)."""
        if dtype == "float32":
            return self.peak_flops["float32"]
        if dtype.startswith("mxfp") or dtype == "mx":  # packed MX types: the MX peak where the core has one
            return self.peak_flops.get("mx", self.peak_flops["float8"])
        if dtype.startswith("float8"):
            return self.peak_flops["float8"]
        return self.peak_flops["bfloat16"]


def _array_flops(clock_hz: float, partitions: int = 128, columns: int = 128) -> float:
    """FLOP/s of a systolic array doing one multiply-add per cell per cycle."""
    return 2.0 * partitions * columns * clock_hz


# NeuronCore-v2 (Trn1 / Inf2). Sources: AWS Neuron docs "NeuronCore-v2 Architecture", "Trainium
# Architecture", NKI "Trainium/Inferentia2 architecture guide" and "NKI performance guide".
TRN1 = Preset(
    name="trn1",
    core="NeuronCore-v2",
    # The docs quote ~92 TFLOPS BF16 per core for the 128x128 array; 92e12 / (2*128*128) = 2.8 GHz effective.
    # (The array runs at 1.4 GHz processing two moving columns per cycle; we model one column per 2.8 GHz cycle.)
    tensor_clock_hz=2.8e9,
    vector_clock_hz=1.12e9,  # NKI architecture guide: VectorE 1.12 GHz
    scalar_clock_hz=1.4e9,  # NKI architecture guide: ScalarE 1.4 GHz
    gpsimd_clock_hz=1.4e9,  # NKI architecture guide: GpSimdE 1.4 GHz
    sync_clock_hz=1.4e9,  # not published; the profiler base clock
    profiler_clock_hz=1.4e9,  # neuron-profile: base clock 1.4 GHz on NeuronCore-v2
    partitions=128,  # SBUF/PSUM: 128 partitions
    sbuf_partition_bytes=192 * _KIB,  # SBUF 24 MiB = 128 x 192 KiB
    psum_partition_bytes=16 * _KIB,  # PSUM 2 MiB = 128 x 16 KiB
    psum_banks=8,  # 8 banks of 2 KiB per partition
    psum_bank_bytes=2 * _KIB,
    pmax=128,  # nl.tile_size.pmax
    gemm_stationary_fmax=128,  # nl.tile_size.gemm_stationary_fmax
    gemm_moving_fmax=512,  # nl.tile_size.gemm_moving_fmax
    psum_fmax=512,  # nl.tile_size.psum_fmax (one 2 KiB bank of fp32)
    dma_queues=16,  # 32 DMA engines per chip, 16 per core
    # Sources disagree: the NKI DMA overview gives 27.2 GB/s theoretical per DMA engine, the DMA bandwidth
    # guide 17 B/ns (272 GB/s for the core's 16 engines). We choose the guide's 17 B/ns: it is the sustained
    # figure kernels see, and it keeps the 16-engine pool (272 GB/s) below the core's HBM share (410 GB/s).
    dma_queue_bandwidth=17 * _GB,
    hbm_bandwidth=820 * _GB / 2,  # 32 GiB HBM at 820 GB/s per chip, shared by 2 cores -> 410 GB/s per core
    dma_latency_ns=1300.0,  # NKI perf guide: ~1.3 us from semaphore to transfer start (fixed DMA cost)
    # Derived: transfers < 256 B per partition are overhead-bound, so one chunk costs as much as 256 B of
    # transfer (50% efficiency at 256 B, 89% at the recommended 2 KiB).
    dma_chunk_overhead_bytes=256,
    dma_efficient_chunk_bytes=2 * _KIB,  # NKI perf guide: >= 2 KiB per partition recommended
    min_ii=64,  # NKI perf guide: MIN_II ~64 cycles
    static_access_cycles=60,  # NKI perf guide: ~60 cycles static overhead to start an SBUF/PSUM access
    ldweights_rows_per_cycle=4,  # fast weight load: 128 rows / 4 = ~32 cycles
    fp8_matmul_speedup=1,  # v2: cFP8 runs at the BF16 rate (~92 TFLOPS)
    fp32_matmul_slowdown=4,  # FP32 ~23 TFLOPS = BF16 / 4
    peak_flops=MappingProxyType(
        {"bfloat16": _array_flops(2.8e9), "float8": _array_flops(2.8e9), "float32": _array_flops(2.8e9) / 4}
    ),
    peaks_source="trn1 preset: NeuronCore-v2 TensorE 128x128 at 2.8 GHz effective (AWS docs: ~92 TFLOPS BF16/FP8, "
    "~23 TFLOPS FP32 per core); HBM 820 GB/s per chip / 2 cores",
    cc_cores=6,  # Trn1: 6 CC-cores per device
    cores_per_chip=2,
    # Interconnect (multi-worker collectives). The Neuron docs call NeuronLink-v2 "high-bandwidth, low-latency"
    # without a per-chip figure; AWS's Trn1 launch material quotes 768 GB/s of NeuronLink per chip (both
    # directions): we use one direction, 384 GB/s, per ring hop.
    link_bandwidth=384 * _GB,
    link_latency_ns=2000.0,  # not published: assumed 2 us per ring step (semaphore handshake + DMA start)
    efa_bandwidth=800e9 / 8,  # Neuron docs, Trn1 architecture table: trn1.32xlarge EFA 800 Gbps = 100 GB/s
    efa_latency_ns=15000.0,  # not published ("low latency transport"): assumed 15 us per inter-node ring step
)

# NeuronCore-v3 (Trn2). Sources: AWS Neuron docs "Trainium2 Architecture", "NeuronCore-v3 Architecture".
TRN2 = Preset(
    name="trn2",
    core="NeuronCore-v3",
    tensor_clock_hz=2.4e9,  # docs: TensorE 2.4 GHz effective -> 2*128*128*2.4e9 = 78.6 TFLOPS (~79 quoted)
    vector_clock_hz=0.96e9,  # docs: VectorE 0.96 GHz
    scalar_clock_hz=1.2e9,  # docs: ScalarE 1.2 GHz
    gpsimd_clock_hz=1.2e9,  # docs: GpSimdE 1.2 GHz
    sync_clock_hz=1.2e9,  # not published; the profiler base clock
    profiler_clock_hz=1.2e9,  # profiler base clock 1.2 GHz on NeuronCore-v3
    partitions=128,
    # Sources disagree: 24 MiB SBUF per core (docs/hardware.md's first figure) vs 28 MiB = 128 x 224 KiB (the
    # NeuronCore-v3 page's 28 MB on-chip SRAM; the NKI Trainium3 guide: v4 SBUF is "32 MiB, up from 28 MiB in
    # NeuronCore-v3"). We choose 28 MiB: two AWS pages agree on it, and kernels sized for v3 then fit.
    sbuf_partition_bytes=224 * _KIB,
    psum_partition_bytes=16 * _KIB,  # PSUM 2 MiB
    psum_banks=8,
    psum_bank_bytes=2 * _KIB,
    pmax=128,
    gemm_stationary_fmax=128,
    gemm_moving_fmax=512,
    psum_fmax=512,
    dma_queues=16,  # 16 DMA engines per core
    dma_queue_bandwidth=23 * _GB,  # docs: 23 B/ns per DMA engine
    hbm_bandwidth=2.9e12 / 8,  # 96 GiB HBM at 2.9 TB/s per chip, shared by 8 cores -> 362.5 GB/s per core
    dma_latency_ns=1300.0,  # as NeuronCore-v2 (no separate v3 figure published)
    dma_chunk_overhead_bytes=256,
    dma_efficient_chunk_bytes=2 * _KIB,
    min_ii=64,
    static_access_cycles=60,
    ldweights_rows_per_cycle=4,
    fp8_matmul_speedup=2,  # docs: 158 TFLOPS FP8 = 2 x 79 BF16
    fp32_matmul_slowdown=4,  # docs: 20 TFLOPS FP32 ~ 79 / 4
    peak_flops=MappingProxyType(
        {"bfloat16": _array_flops(2.4e9), "float8": 2 * _array_flops(2.4e9), "float32": _array_flops(2.4e9) / 4}
    ),
    peaks_source="trn2 preset: NeuronCore-v3 TensorE 128x128 at 2.4 GHz effective (AWS docs: 79 TFLOPS BF16, "
    "158 FP8, 20 FP32 per core); HBM 2.9 TB/s per chip / 8 cores",
    cc_cores=20,  # NKI Trainium2 architecture guide: 20 CC-Cores per Trainium2 device
    cores_per_chip=8,
    # NeuronLink-v3: AWS's Trn2 material quotes 1.28 TB/s per chip (both directions) -> 640 GB/s one direction.
    link_bandwidth=640 * _GB,
    link_latency_ns=2000.0,  # not published: assumed as trn1
    efa_bandwidth=3.2e12 / 8,  # AWS EC2: trn2.48xlarge EFAv3 3.2 Tbps = 400 GB/s per instance
    efa_latency_ns=15000.0,  # not published: assumed as trn1
    dma_issue_gap_ns=781.0,  # FITTED on trn1's calibration set; no trn2 case to fit: assumed equal
)

# NeuronCore-v4 (Trn3). Sources: NKI "Trainium3 Architecture Guide for NKI"
# (awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/guides/architecture/trainium3_arch.html), Neuron docs
# "NeuronCore-v4 Architecture" and "Trainium3 Architecture" (about-neuron/arch/neuron-hardware/), the NKI API
# reference of nisa.nc_matmul_mx. Unpublished figures are listed in `assumptions` (and docs/hardware.md).
_TRN3_ASSUMED = (
    "ASSUMED for trn3 (not published for NeuronCore-v4; as trn2): DMA fixed latency 1.3 us and chunk costs, "
    "MIN_II 64, SBUF access 60 cycles, weight-load rate, sync/profiler clocks 1.2 GHz, link/EFA latencies, "
    "EFA 400 GB/s, the fitted DMA issue gap; VectorE/ScalarE modelled with trn2's per-element rules at the v4 "
    "clocks (the guide's wider v4 data paths, 512/256 elements per cycle, are not modelled); DERIVED: 16 DMA "
    "engines per core (128 per device / 8 cores), 38.3 GB/s per engine (4.9 TB/s / 128), plain FP8 nc_matmul at "
    "the BF16 rate (guide: non-MX dense input 2x128 elements/cycle, as BF16)"
)
TRN3 = Preset(
    name="trn3",
    core="NeuronCore-v4",
    tensor_clock_hz=2.4e9,  # NKI Trainium3 guide: TensorE 2.4 GHz; 2*128*128*2.4e9 = 78.6 TFLOPS (79 BF16 quoted)
    vector_clock_hz=1.2e9,  # NKI Trainium3 guide: VectorE 1.2 GHz
    scalar_clock_hz=1.2e9,  # NKI Trainium3 guide: ScalarE 1.2 GHz
    gpsimd_clock_hz=1.2e9,  # NKI Trainium3 guide: GpSimdE 1.2 GHz
    sync_clock_hz=1.2e9,  # ASSUMED: as trn2
    profiler_clock_hz=1.2e9,  # ASSUMED: as trn2
    partitions=128,
    sbuf_partition_bytes=256 * _KIB,  # NKI Trainium3 guide: SBUF 32 MiB (up from 28 MiB) = 128 x 256 KiB
    psum_partition_bytes=16 * _KIB,  # NKI Trainium3 guide: PSUM "remains the same at 2 MiB"
    psum_banks=8,  # nc_matmul_mx API: moving up to 4096 fp32 = "8x PSUM banks (the entire PSUM)"
    psum_bank_bytes=2 * _KIB,
    pmax=128,  # nl.tile_size (the MX tutorial: pmax 128, gemm_stationary_fmax 128, gemm_moving_fmax 512)
    gemm_stationary_fmax=128,
    gemm_moving_fmax=512,
    psum_fmax=512,
    dma_queues=16,  # DERIVED: the guide's 128 DMA engines per device / 8 NeuronCores
    dma_queue_bandwidth=4.9e12 / 128,  # DERIVED: "Trainium3 Architecture": 4.9 TB/s DMA bandwidth / 128 engines
    # Sources disagree: 4.9 TB/s ("Trainium3 Architecture", 12/2025) vs 4.7 TB/s (NKI Trainium3 guide, 03/2026):
    # we take the newer NKI guide's 4.7 TB/s, shared by 8 cores -> 587.5 GB/s per core.
    hbm_bandwidth=4.7e12 / 8,
    dma_latency_ns=1300.0,  # ASSUMED: as trn2 / trn1 (no v4 figure published)
    dma_chunk_overhead_bytes=256,  # ASSUMED: as trn2
    dma_efficient_chunk_bytes=2 * _KIB,  # ASSUMED: as trn2
    min_ii=64,  # ASSUMED: as trn2
    static_access_cycles=60,  # ASSUMED: as trn2
    ldweights_rows_per_cycle=4,  # ASSUMED: as trn2
    # DERIVED: the guide gives TensorE 2x128 input elements/cycle for non-MX dense input (as BF16) and 8x128 for
    # MXFP8: a plain FP8 nc_matmul runs at the BF16 rate; MX matmuls (4 values per PE) reach 315 TFLOPS.
    fp8_matmul_speedup=1,
    fp32_matmul_slowdown=4,  # NeuronCore-v4 page: 20 FP32 TFLOPS ~ 79 / 4
    peak_flops=MappingProxyType(  # "mx": 315 MXFP8/MXFP4 TFLOPS per core (NeuronCore-v4 page); plain FP8 at the
        {  # BF16 rate (DERIVED above, fp8_matmul_speedup=1)
            "bfloat16": _array_flops(2.4e9),
            "float8": _array_flops(2.4e9),
            "mx": 4 * _array_flops(2.4e9),
            "float32": _array_flops(2.4e9) / 4,
        }
    ),
    peaks_source="trn3 preset: NeuronCore-v4 TensorE 128x128 at 2.4 GHz effective (AWS docs: 79 TFLOPS BF16, "
    "315 MXFP8/MXFP4, 20 FP32 per core); HBM 4.7 TB/s per chip / 8 cores; some figures ASSUMED (see assumptions)",
    # Sources disagree: 16 CC-Cores ("Trainium3 Architecture") vs 20 (NKI Trainium3 guide): the newer guide's 20.
    cc_cores=20,
    cores_per_chip=8,  # "Trainium3 Architecture": eight NeuronCore-v4 per chip
    link_bandwidth=1280 * _GB,  # "Trainium3 Architecture": NeuronLink-v4 2.56 TB/s per device -> one direction
    link_latency_ns=2000.0,  # ASSUMED: as trn1
    efa_bandwidth=3.2e12 / 8,  # ASSUMED: as trn2 (no trn3 instance EFA figure in the Neuron docs)
    efa_latency_ns=15000.0,  # ASSUMED: as trn1
    dma_issue_gap_ns=781.0,  # FITTED on trn1's calibration set; ASSUMED equal
    assumptions=_TRN3_ASSUMED,
)

PRESETS: dict[str, Preset] = {"trn1": TRN1, "trn2": TRN2, "trn3": TRN3}


def get_preset(name: str | Preset) -> Preset:
    """The preset called `name` (a `Preset` passes through); NprofError listing valid names otherwise."""
    if isinstance(name, Preset):
        return name
    try:
        return PRESETS[name]
    except (KeyError, TypeError):
        raise NprofError(f"unknown device preset {name!r}; valid presets: {', '.join(PRESETS)}") from None
