#pragma once
/// \file weight_cast.hpp
/// A weight's entry cast kept across GEMM calls. entry_cast(ctx, x, t, slot) (ops/backend.hpp), with the cast of a
/// weight (t == Tensor::W) kept in the pack cache's derived operands (numerics/pack_cache_derived.hpp) while the
/// model's promise that W does not change holds (a registered immutable range under one version): the GEMMs that
/// take no cast in their packing (the multi-term adder kernels of the tc-* accumulations, Ctx::gemm_in) and the
/// scaled fp8 operands (ops/matmul_quant.cpp) then cast each weight once per update instead of in every micro-step's
/// forward and backward-data call. The kept values are those entry_cast computed from the same doubles, and the tag
/// names everything else the cast reads (storage format, mode, daz, NaN rule; not the layout, which the cast does
/// not read), so the bits are the same. Anything else — another tensor, an accumulation without the multi-term
/// adder (its GEMMs cast in their packing, or run a path this does not speed up: keeping would only cost memory),
/// stochastic casts (their draws are keyed by the call), the fast paths off (the oracle runs everything afresh), no
/// pack cache, an unregistered range — is entry_cast itself. `kept` holds the kept values for the caller while it reads the returned span.
#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "ops/backend.hpp"

namespace roundoff::ops {

std::span<const double> weight_entry_cast(const Ctx<Emulated>& ctx, std::span<const double> x, Tensor t,
                                          std::size_t slot, std::shared_ptr<const std::vector<double>>& kept);

}  // namespace roundoff::ops
