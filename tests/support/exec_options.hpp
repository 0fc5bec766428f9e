#pragma once
/// \file exec_options.hpp
/// The execution options tests construct: kernel options at a given instruction-set limit, the tiers this CPU
/// has, and the ops' fast and oracle arms. Options are values passed to the calls that use them (there is no
/// process-wide switch to flip and restore), so one test cannot leave the next one on another path.
#include <vector>

#include "numerics/kernel_options.hpp"
#include "ops/backend.hpp"

namespace roundoff::test {

using numerics::kernels::Isa;

/// Kernel options with the GEMM kernels on and the ISA capped at `isa`.
inline numerics::KernelOptions kernels_at(Isa isa) { return numerics::KernelOptions{true, isa}; }

/// Kernel options with the GEMM kernels off (numerics::gemm's generic path).
inline numerics::KernelOptions kernels_off() { return numerics::KernelOptions{false, Isa::Avx512Fp16}; }

/// Every ISA level this CPU has that the kernels distinguish (Avx2, Avx512, Avx512Fp16), weakest first; None
/// first as well when with_none.
inline std::vector<Isa> isa_tiers(bool with_none = false) {
  std::vector<Isa> out;
  if (with_none) out.push_back(Isa::None);
  for (Isa isa : {Isa::Avx2, Isa::Avx512, Isa::Avx512Fp16})
    if (numerics::kernels::detected_isa() >= isa) out.push_back(isa);
  return out;
}

/// The ops' execution options of a test arm: the fast paths (true, the defaults) or the per-element oracle
/// (false: ops fast paths off; the GEMM kernels stay as `kernels` says).
inline ops::ExecOptions exec_for(bool fast, numerics::KernelOptions kernels = {}) {
  ops::ExecOptions e;
  e.fast_paths = fast;
  e.kernels = kernels;
  return e;
}

}  // namespace roundoff::test
