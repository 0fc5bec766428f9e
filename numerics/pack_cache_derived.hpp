#pragma once
/// \file pack_cache_derived.hpp
/// Derived operands in a GEMM pack cache (numerics::kernels::PackCache, gemm_kernels.hpp). The cache's promise — the
/// doubles of a registered immutable range do not change until the range is registered again (a new version) or
/// unregistered — lets an op keep values it derives from such doubles alone (and from what its `tag` names):
/// ops/matmul_quant.cpp keeps each weight matrix's cast and block-quantized values, so that the micro-steps of an
/// update and the evaluations quantize a weight once per (policy entry, layout) instead of on every GEMM call.
///   find_derived   the values stored for the same (data, n, tag) under the version the range holding
///                  [data, data + n) has now; null otherwise, and always outside a registered range.
///   store_derived  keeps them (nothing outside a registered range) until that range is registered again or
///                  unregistered, which drop them with the range's packs; at most 512 MiB of derived doubles, beyond
///                  that nothing more is kept (no eviction).
/// The tag must name everything besides the values in [data, data + n) that the derived values depend on. Thread-safe
/// (the cache's mutex). Free functions, so that the pack cache's class (included by every op) keeps its layout.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "numerics/gemm_kernels.hpp"

namespace roundoff::numerics::kernels {

std::shared_ptr<const std::vector<double>> find_derived(const PackCache& cache, const double* data, std::size_t n,
                                                        const std::string& tag);
void store_derived(PackCache& cache, const double* data, std::size_t n, std::string tag, std::vector<double> values);
/// True when [data, data + n) lies in a registered immutable range, i.e. when store_derived would keep values made
/// from it (capacity permitting): a caller checks it before copying values it might not keep.
bool holds_immutable(const PackCache& cache, const double* data, std::size_t n);

struct DerivedStats {
  std::size_t entries = 0, bytes = 0;
  std::uint64_t hits = 0;
};
DerivedStats derived_stats(const PackCache& cache);

}  // namespace roundoff::numerics::kernels
