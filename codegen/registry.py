"""The one registry of ISAs and kernels.

Everything that varies per ISA lives here and nowhere else: compiler flags, the CPU features a
variant needs, the vector vocabulary the templates render with, the register tiles, and the list
of kernels.  From it the generator renders the C++ sources, the CMake source lists, the Python
dispatch table (``qsdpa/_variants.py``) and, through that table, the test parametrisation.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Tuple

# Canonical CPU feature names (lower case, py-cpuinfo / Linux spelling with VNNI as avx512_vnni).
X86_FEATURES = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_vnni")
ARM_FEATURES = ("asimd", "asimddp")


@dataclass(frozen=True)
class Isa:
    name: str                 # variant name: module suffix, symbol suffix, QSDPA_ISA value
    arch: str                 # "x86_64", "aarch64" or "any" (scalar is built on every arch)
    rank: int                 # higher is preferred by dispatch
    cflags: Tuple[str, ...]   # explicit ISA flags; never -march=native
    features: Tuple[str, ...] # canonical features the CPU and OS must enable
    macros: Tuple[str, ...]   # predefined macros the build must show (checked by tests via whoami())
    family: str               # "scalar" | "x86" | "neon": selects the prelude section
    vocab: Dict[str, object]  # vector vocabulary rendered into the per-ISA prelude
    # Per-kernel template parameters: register tiles (dequant_gemm: MR rows x NR f32 vectors; the
    # qk kernels: MR x NR dot accumulators), the attention blocking (KV_BLOCK keys per step,
    # MAX_ROWS query rows per work item) and quantize's CHAINS (independent min/max accumulators
    # of a row's first pass).
    tiles: Dict[str, Dict[str, int]] = field(default_factory=dict)
    description: str = ""

    @property
    def module(self) -> str:
        return f"_kernels_{self.name}"

    def supports_arch(self, arch: str) -> bool:
        return self.arch in ("any", arch)


# Vector vocabulary.  x86 AVX2 and AVX-512 share one prelude section, so they name their
# intrinsics here; NEON and scalar have one width each and their idioms live in the prelude.
# dot: how an exact int8 dot-product step is done; dot_kb: int8 elements of k per step;
# dot_a_bias: the A operand is fed as (a + bias), the kernel subtracts bias * sum(B).
# qparam_transpose8: flash_attention gathers a block's qparams of 8 adjacent KV heads with 8 x 8
# AVX2 transposes (x86 only; the scalar gather was 5% of a llama3-8b decode call on Zen 3).
# gemm_qk: prefill's int8 Q.K^T in GEMM form on K packed once a block into 4-byte key panels
# (AttentionPlan::pack_keys; needs the "vnni_u8s8" dot: one vpdpbusd a query group against 16 keys).
# Where it is off, prefill keeps the register tiles with their per-key reductions.
_X86_AVX2_VOCAB = dict(
    vf="__m256", vi="__m256i", vd="__m256i", nf=8, bits=256, p="_mm256", si="si256",
    # int8 -> f32 lanes: 8 bytes widened with vpmovsxbd
    cvt_s8_lanes="_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)({p})))",
    # exact int8 dot: widen 16 bytes to int16 and vpmaddwd (vpmaddubsw saturates on the full s8 range)
    dot="madd_s16", dot_kb=16, dot_a_bias=0,
    dot_load="_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)({p})))",
    qparam_transpose8=True, gemm_qk=False,
)

_X86_AVX512_VOCAB = dict(
    vf="__m512", vi="__m512i", vd="__m512i", nf=16, bits=512, p="_mm512", si="si512",
    cvt_s8_lanes="_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)({p})))",
    dot="madd_s16", dot_kb=32, dot_a_bias=0,
    dot_load="_mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)({p})))",
    qparam_transpose8=True, gemm_qk=False,
)

_NEON_VOCAB = dict(vf="float32x4_t", vi="int32x4_t", vd="int8x16_t", nf=4, dot="smull_s16", dot_kb=16,
                   dot_a_bias=0, qparam_transpose8=False, gemm_qk=False)

# Attention blocking: 256 keys keep a 64-row score block (64 KiB) and its accumulator in L2;
# decode on a [B, S, H, D] cache (all KV heads per item) steps 64 keys, so a block of all heads'
# K and V (2 x 64 x H x D bytes) and the next one, prefetched meanwhile, fit in L2 together.
# Register tiles: QK_ROWS x QK_KEYS int32 dot accumulators (rows share each widened key vector),
# PV_ROWS rows x PV_VECS f32 vectors (rows share each widened value vector). AVX2's 4 x 3 uses all
# 16 registers (12 accumulators, 3 widened V vectors, the broadcast weight): against 4 x 2, 6.27M ->
# 6.01M instructions per llama3-8b decode call (2048 keys) and 306M -> 297M per 512-token prefill.
# K_QK_EIGHTHS: on CPUs other than AMD's (prefetch_tuning in the template), how much of the next
# block's K a grouped decode block fetches during its Q.K^T, in eighths (the rest goes with V).
# Measured per variant on an Intel Xeon (2 MiB L2): avx512_vnni's shorter Q.K^T and P.V did best
# with a quarter (cold 3-5% faster than half at 1 thread), avx2's with half (a quarter 1-2% slower
# cold, 3-5% hot), avx512's level.
def _attention(qk_rows: int, qk_keys: int, pv_rows: int, pv_vecs: int, k_qk_eighths: int = 4) -> Dict[str, int]:
    return dict(KV_BLOCK=256, KV_BLOCK_GROUPED=64, MAX_ROWS=64, QK_ROWS=qk_rows, QK_KEYS=qk_keys, PV_ROWS=pv_rows,
                PV_VECS=pv_vecs, K_QK_EIGHTHS=k_qk_eighths)

ISAS: Tuple[Isa, ...] = (
    Isa(
        name="scalar", arch="any", rank=0, cflags=(), features=(), macros=(), family="scalar",
        vocab=dict(vf="float", vi="int32_t", vd="int32_t", nf=1, dot="scalar", dot_kb=1, dot_a_bias=0,
                   qparam_transpose8=False, gemm_qk=False),
        tiles=dict(dequant_gemm=dict(MR=4, NR=8), qk_gemm=dict(MR=2, NR=4),
                   qk_gemm_f32a=dict(MR=2, NR=4), flash_attention=_attention(4, 2, 4, 4),
                   quantize=dict(CHAINS=4)),
        description="portable C++, no ISA flags; also hosts the native CPU/OS feature check",
    ),
    Isa(
        name="avx2", arch="x86_64", rank=10, cflags=("-mavx2", "-mfma", "-mf16c", "-mno-avx512f"),
        features=("avx2", "fma", "f16c"), macros=("__AVX2__", "__FMA__", "__F16C__"), family="x86",
        vocab=_X86_AVX2_VOCAB,
        tiles=dict(dequant_gemm=dict(MR=4, NR=2), qk_gemm=dict(MR=2, NR=4),
                   qk_gemm_f32a=dict(MR=2, NR=4), flash_attention=_attention(4, 2, 4, 3),
                   quantize=dict(CHAINS=2)),
        description="AVX2 + FMA + F16C (Haswell, Zen 1+)",
    ),
    Isa(
        name="avx512", arch="x86_64", rank=20,
        cflags=("-mavx2", "-mfma", "-mf16c", "-mavx512f", "-mavx512bw", "-mavx512dq", "-mavx512vl"),
        features=("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512dq", "avx512vl"),
        macros=("__AVX512F__", "__AVX512BW__", "__AVX512DQ__", "__AVX512VL__"), family="x86",
        vocab=_X86_AVX512_VOCAB,
        tiles=dict(dequant_gemm=dict(MR=4, NR=4), qk_gemm=dict(MR=4, NR=4),
                   qk_gemm_f32a=dict(MR=4, NR=4), flash_attention=_attention(4, 4, 4, 4),
                   quantize=dict(CHAINS=2)),
        description="AVX-512 F/BW/DQ/VL (Skylake-SP, Zen 4)",
    ),
    Isa(
        name="avx512_vnni", arch="x86_64", rank=30,
        cflags=("-mavx2", "-mfma", "-mf16c", "-mavx512f", "-mavx512bw", "-mavx512dq", "-mavx512vl",
                "-mavx512vnni"),
        features=("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_vnni"),
        macros=("__AVX512F__", "__AVX512BW__", "__AVX512DQ__", "__AVX512VL__", "__AVX512VNNI__"),
        family="x86",
        # vpdpbusd multiplies u8 by s8: A is biased by +128 (xor 0x80) and 128*sum(B) is subtracted.
        vocab=dict(_X86_AVX512_VOCAB, dot="vnni_u8s8", dot_kb=64, dot_a_bias=128, dot_load=None, gemm_qk=True),
        tiles=dict(dequant_gemm=dict(MR=4, NR=4), qk_gemm=dict(MR=4, NR=4),
                   qk_gemm_f32a=dict(MR=4, NR=4), flash_attention=_attention(4, 4, 4, 4, k_qk_eighths=2),
                   quantize=dict(CHAINS=2)),
        description="AVX-512 + VNNI (Cascade Lake, Ice Lake, Zen 4)",
    ),
    Isa(
        name="neon", arch="aarch64", rank=10, cflags=("-march=armv8-a",), features=("asimd",),
        macros=("__ARM_NEON",), family="neon", vocab=_NEON_VOCAB,
        tiles=dict(dequant_gemm=dict(MR=4, NR=4), qk_gemm=dict(MR=4, NR=4),
                   qk_gemm_f32a=dict(MR=4, NR=4), flash_attention=_attention(4, 4, 4, 4),
                   quantize=dict(CHAINS=2)),
        description="ARMv8-A Advanced SIMD",
    ),
    Isa(
        name="neon_dotprod", arch="aarch64", rank=20, cflags=("-march=armv8.2-a+dotprod",),
        features=("asimd", "asimddp"), macros=("__ARM_NEON", "__ARM_FEATURE_DOTPROD"), family="neon",
        vocab=dict(_NEON_VOCAB, dot="sdot", dot_kb=16),
        tiles=dict(dequant_gemm=dict(MR=4, NR=4), qk_gemm=dict(MR=4, NR=4),
                   qk_gemm_f32a=dict(MR=4, NR=4), flash_attention=_attention(4, 4, 4, 4),
                   quantize=dict(CHAINS=2)),
        description="ARMv8.2-A + dot product (Neoverse N1, Cortex-A76, Apple M1)",
    ),
)


@dataclass(frozen=True)
class Kernel:
    name: str          # Python-visible name in each variant module
    template: str      # templates/<template>
    symbol: str        # C symbol stem; the ISA follows a double underscore, XNNPACK-style
    file_stem: str     # generated/<isa>/<file_stem>-<isa>.cpp
    doc: str


KERNELS: Tuple[Kernel, ...] = (
    Kernel("dequant_gemm", "dequant_gemm.cpp.j2", "qsdpa_dequant_gemm_f32s8", "dequant-gemm-f32s8",
           "C[m,n] = beta*C + A[m,k] @ dequant(B[k,n]); fp32 A, per-row (per-token) int8 B"),
    Kernel("qk_gemm", "qk_gemm.cpp.j2", "qsdpa_qk_gemm_s8s8", "qk-gemm-s8s8",
           "C[m,n] = alpha * dequant(A[m,k]) @ dequant(B[n,k]).T; exact int32 dot products"),
    Kernel("qk_gemm_f32a", "qk_gemm_f32a.cpp.j2", "qsdpa_qk_gemm_f32s8", "qk-gemm-f32s8",
           "C[m,n] = alpha * A[m,k] @ dequant(B[n,k]).T; fp32 A"),
    Kernel("flash_attention", "flash_attention.cpp.j2", "qsdpa_flash_attention_s8", "flash-attention-s8",
           "softmax(scale * Q.K^T + mask) . V over an int8 K/V cache, int8 or fp32 Q"),
    Kernel("quantize", "quantize.cpp.j2", "qsdpa_quantize_f32s8", "quantize-f32s8",
           "per-token asymmetric int8 quantization of fp32 rows, bit-identical to PyTorch's "
           "choose_qparams_per_token_asymmetric + quantize_per_token"),
)

# Files rendered once per ISA besides the kernels.
PRELUDE_TEMPLATE = "simd_prelude.h.j2"
MODULE_TEMPLATE = "module.cpp.j2"
# Hand-written C++ compiled into the scalar module only (no ISA flags): the native feature check and
# the process-wide scratch arena.
SCALAR_EXTRA_SOURCES = ("csrc/cpu_features.cpp", "csrc/scratch_arena.cpp")

ARCHES = ("x86_64", "aarch64")

# Flags every variant gets, before its ISA flags. No fp contraction: the kernels place their FMAs
# explicitly, so results do not depend on which variant the compiler was allowed to contract.
COMMON_CFLAGS = ("-O3", "-ffp-contract=off", "-fno-math-errno")


def isa_by_name(name: str) -> Isa:
    for isa in ISAS:
        if isa.name == name:
            return isa
    raise KeyError(name)


def isas_for_arch(arch: str) -> List[Isa]:
    return [isa for isa in ISAS if isa.supports_arch(arch)]


def kernel_file(isa: Isa, kernel: Kernel) -> str:
    return f"{isa.name}/{kernel.file_stem}-{isa.name.replace('_', '-')}.cpp"


def prelude_file(isa: Isa) -> str:
    return f"{isa.name}/simd-{isa.name.replace('_', '-')}.h"


def module_file(isa: Isa) -> str:
    return f"{isa.name}/module-{isa.name.replace('_', '-')}.cpp"


def sources_for(isa: Isa) -> List[str]:
    """Sources of one variant module, relative to generated/ (kernels, then the binding)."""
    return [kernel_file(isa, k) for k in KERNELS] + [module_file(isa)]


def extra_sources_for(isa: Isa) -> List[str]:
    """Hand-written sources, relative to the repository root."""
    return list(SCALAR_EXTRA_SOURCES) if isa.name == "scalar" else []


def validate() -> None:
    names = [i.name for i in ISAS]
    assert len(set(names)) == len(names), "duplicate ISA names"
    for isa in ISAS:
        assert isa.arch in ARCHES + ("any",), isa
        assert "-march=native" not in isa.cflags and "-mtune=native" not in isa.cflags, isa.name
        known = X86_FEATURES if isa.arch == "x86_64" else ARM_FEATURES
        assert set(isa.features) <= set(known), (isa.name, isa.features)
        for k in KERNELS:
            assert k.name in isa.tiles, (isa.name, k.name)
        assert not isa.vocab["gemm_qk"] or isa.vocab["dot"] == "vnni_u8s8", (isa.name, "gemm_qk needs vnni_u8s8")
    for arch in ARCHES:
        ranks = [i.rank for i in isas_for_arch(arch)]
        assert len(set(ranks)) == len(ranks), f"ambiguous ranks on {arch}"


validate()
