#pragma once
/// \file eigen_support.hpp
/// Eigen::NumTraits for Float<F, R>, so that Eigen matrices of emulated scalars work (tests, small experiments).
///
/// Eigen chooses the order of its reductions (sum(), products): a fixed-size product's coefficient is an
/// unrolled tree reduction, a large GEMM splits k into cache blocks (NUMERICS.md trap 6). Every operation
/// Eigen performs on Float is still one correctly rounded operation in F, but the sequence of roundings is
/// Eigen's; emulated ops must use the library's own Accumulation, not Eigen reductions.
#include <Eigen/Core>

#include "numerics/float.hpp"

namespace Eigen {

template <roundoff::numerics::Format F, roundoff::numerics::Rounding R>
struct NumTraits<roundoff::numerics::Float<F, R>> : GenericNumTraits<roundoff::numerics::Float<F, R>> {
  using Self = roundoff::numerics::Float<F, R>;
  using Real = Self;
  using NonInteger = Self;
  using Literal = Self;
  using Nested = Self;
  enum {
    IsComplex = 0,
    IsInteger = 0,
    IsSigned = 1,
    RequireInitialization = 0,
    ReadCost = 1,
    AddCost = 10,  // an emulated operation costs far more than a hardware one
    MulCost = 10,
  };
  /// Eigen's default tolerance for isApprox: a few units of epsilon = 2^(1-p).
  static inline Real dummy_precision() { return Self::exact(4 * std::numeric_limits<Self>::epsilon().value()); }
};

}  // namespace Eigen
