#pragma once
/// \file shape.hpp
/// Shapes of op arguments. All tensors are dense row-major; the comments on each op name their layout.
#include <cstdint>

namespace roundoff::ops {

/// rows × cols matrix (tokens × channels for row-wise ops).
struct RowShape {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t size() const { return rows * cols; }
};

/// y (n, out) = x (n, in) · W (out, in)^T.
struct MatmulShape {
  std::int64_t n = 0;    ///< rows of x and y (tokens)
  std::int64_t in = 0;   ///< reduction length
  std::int64_t out = 0;  ///< rows of W, columns of y
};

/// Attention: q, k, v, out are (B, T, NH·hs) (heads side by side in each token row, as projections produce
/// them); scores and weights are (B, NH, T, T).
struct AttnShape {
  std::int64_t B = 0;
  std::int64_t NH = 0;
  std::int64_t T = 0;
  std::int64_t hs = 0;
  std::int64_t C() const { return NH * hs; }
  std::int64_t heads() const { return B * NH; }
  std::int64_t qkv_size() const { return B * T * NH * hs; }
  std::int64_t att_size() const { return B * NH * T * T; }
};

}  // namespace roundoff::ops
