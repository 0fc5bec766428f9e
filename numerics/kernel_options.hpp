#pragma once
/// \file kernel_options.hpp
/// How the numerics kernels may compute (never what they compute): whether the SIMD GEMM kernels run and which
/// instruction sets any SIMD dispatch may use. An explicit value passed to every call that dispatches on it
/// (numerics::gemm, gemm_ranged, reduce_rows, elementary_span, all_finite, op_round_avx512/avx2, the kernels
/// themselves); the default is the fastest path the CPU has. Every choice gives the same bits (each fast path is
/// tested bit for bit against its definition), so the options change speed only; tests set them to reach every
/// tier and the generic definitions. There is no process-wide switch (docs/design.md, "No hidden global state").
#include <algorithm>
#include <cstdint>

namespace roundoff::numerics {

namespace kernels {

/// Instruction sets the kernels can use, weakest first. Avx2 (AVX2 + FMA + F16C, for CPUs without AVX-512) has
/// every GEMM kernel but the native fp16 one, in 8 lanes (numerics/gemm_kernel_tiers.hpp).
enum class Isa : std::uint8_t { None, Avx2, Avx512, Avx512Fp16 };
const char* name_of(Isa isa);
/// What this CPU supports: Avx512 needs AVX-512 F/BW/DQ/VL + FMA + F16C, Avx2 needs AVX2 + FMA + F16C. A
/// property of the machine (computed once), not a setting.
Isa detected_isa();

class PackCache;

}  // namespace kernels

struct KernelOptions {
  /// The SIMD GEMM kernels (kernels::gemm_fast, gemm_ranged_fast); off: numerics::gemm's generic path.
  bool fast_paths = true;
  /// The best instruction set any SIMD dispatch may use; lowered by tests to exercise every tier and the
  /// scalar fallbacks.
  kernels::Isa isa_limit = kernels::Isa::Avx512Fp16;

  /// The instruction set the kernels use: min(detected_isa(), isa_limit).
  kernels::Isa isa() const { return std::min(kernels::detected_isa(), isa_limit); }
  friend bool operator==(const KernelOptions&, const KernelOptions&) = default;
};

}  // namespace roundoff::numerics
