# Generated from codegen/registry.py by `python -m codegen` — do not edit.
"""The dispatch table: every variant qsdpa knows, with what it needs from the CPU."""
from typing import NamedTuple, Tuple


class Variant(NamedTuple):
    name: str
    arch: str
    rank: int
    module: str
    features: Tuple[str, ...]
    cflags: Tuple[str, ...]
    macros: Tuple[str, ...]
    description: str


VARIANTS: Tuple[Variant, ...] = (
    Variant(name='scalar', arch='any', rank=0, module='_kernels_scalar', features=(), cflags=(), macros=(),
            description='portable C++, no ISA flags; also hosts the native CPU/OS feature check'),
    Variant(name='avx2', arch='x86_64', rank=10, module='_kernels_avx2', features=('avx2', 'fma', 'f16c'), cflags=('-mavx2', '-mfma', '-mf16c', '-mno-avx512f'), macros=('__AVX2__', '__FMA__', '__F16C__'),
            description='AVX2 + FMA + F16C (Haswell, Zen 1+)'),
    Variant(name='avx512', arch='x86_64', rank=20, module='_kernels_avx512', features=('avx2', 'fma', 'f16c', 'avx512f', 'avx512bw', 'avx512dq', 'avx512vl'), cflags=('-mavx2', '-mfma', '-mf16c', '-mavx512f', '-mavx512bw', '-mavx512dq', '-mavx512vl'), macros=('__AVX512F__', '__AVX512BW__', '__AVX512DQ__', '__AVX512VL__'),
            description='AVX-512 F/BW/DQ/VL (Skylake-SP, Zen 4)'),
    Variant(name='avx512_vnni', arch='x86_64', rank=30, module='_kernels_avx512_vnni', features=('avx2', 'fma', 'f16c', 'avx512f', 'avx512bw', 'avx512dq', 'avx512vl', 'avx512_vnni'), cflags=('-mavx2', '-mfma', '-mf16c', '-mavx512f', '-mavx512bw', '-mavx512dq', '-mavx512vl', '-mavx512vnni'), macros=('__AVX512F__', '__AVX512BW__', '__AVX512DQ__', '__AVX512VL__', '__AVX512VNNI__'),
            description='AVX-512 + VNNI (Cascade Lake, Ice Lake, Zen 4)'),
    Variant(name='neon', arch='aarch64', rank=10, module='_kernels_neon', features=('asimd',), cflags=('-march=armv8-a',), macros=('__ARM_NEON',),
            description='ARMv8-A Advanced SIMD'),
    Variant(name='neon_dotprod', arch='aarch64', rank=20, module='_kernels_neon_dotprod', features=('asimd', 'asimddp'), cflags=('-march=armv8.2-a+dotprod',), macros=('__ARM_NEON', '__ARM_FEATURE_DOTPROD'),
            description='ARMv8.2-A + dot product (Neoverse N1, Cortex-A76, Apple M1)'),
)

KERNELS: Tuple[str, ...] = ('dequant_gemm', 'qk_gemm', 'qk_gemm_f32a', 'flash_attention', 'quantize',)
