#pragma once
/// \file param_store.hpp
/// Typed storage of a parameter-sized state vector (the master weights, the gradients, the AdamW moments): binary32
/// when every value the policy can write into it is a binary32 value, binary64 otherwise. The kind is chosen once, from the formats of the roles
/// that write the vector (storage_kind_for), when the vector is made; code that runs on the elements takes the
/// span of its kind (binary32() or binary64()), so no inner loop checks it. A value read from binary32 storage is
/// widened to binary64 exactly, and one written to it is exact by the choice, so the storage changes no bit of
/// training; it halves the bytes (E11: 248 MB instead of 496 MB per vector).
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <variant>
#include <vector>

#include "numerics/format.hpp"

namespace roundoff::studies::train {

enum class StorageKind : std::uint8_t {
  Binary32,  ///< float
  Binary64,  ///< double
};
std::string_view name_of(StorageKind k);

/// Binary32 when every value of `f` (finite, ±0, ±inf, NaN) is a binary32 value: p ≤ 24, emax ≤ 127 and the least
/// positive value (2^(emin−p+1), with or without subnormals: the least normal's ulp) at least 2^−149. So fp32,
/// tf32, bf16, fp16 and the fp8/fp6/fp4 formats; fp64 and any custom format wider than binary32 are Binary64.
StorageKind storage_kind_for(const numerics::Format& f);
/// Binary32 when storage_kind_for is Binary32 for every one of `formats` (a vector written under several roles).
StorageKind storage_kind_for(std::span<const numerics::Format> formats);

/// A vector of `size()` values stored as its kind says.
class ParamStore {
 public:
  ParamStore() = default;
  /// n zeros (+0) of kind `kind`.
  ParamStore(StorageKind kind, std::size_t n);
  /// Binary64 storage holding `values`.
  explicit ParamStore(std::vector<double> values) : data_(std::move(values)) {}

  StorageKind kind() const { return data_.index() == 0 ? StorageKind::Binary32 : StorageKind::Binary64; }
  std::size_t size() const;
  std::size_t bytes() const;

  /// The elements of a Binary32 (binary64()) store; std::logic_error for the other kind.
  std::span<float> binary32();
  std::span<const float> binary32() const;
  std::span<double> binary64();
  std::span<const double> binary64() const;

  /// Element i widened to binary64 (exact).
  double at(std::size_t i) const;
  /// out[k] = at(offset + k): elements [offset, offset + out.size()) widened to binary64.
  void read(std::size_t offset, std::span<double> out) const;
  /// Element offset + k = values[k]. Throws std::invalid_argument naming the first value this store cannot hold
  /// exactly (a value that is not binary32 in Binary32 storage; NaN is held as NaN, its payload narrowed); the
  /// elements before it are written.
  void write(std::size_t offset, std::span<const double> values);
  /// All elements widened to binary64 (a copy: tests and small tools, not the training loop).
  std::vector<double> to_binary64() const;
  /// Every element +0.
  void zero();
  /// True when every element is finite.
  bool all_finite() const;
  /// Elements [offset, offset + n) as a binary64 span: the store's own elements when it is Binary64, else the
  /// first n elements of `scratch` holding them widened (`scratch` grown to n when smaller, never shrunk, so a
  /// buffer kept across calls is neither reallocated nor zero-filled again). Pair with store_from when the span
  /// was written.
  std::span<double> view(std::size_t offset, std::size_t n, std::vector<double>& scratch);
  std::span<const double> view(std::size_t offset, std::size_t n, std::vector<double>& scratch) const;
  /// After writing a span from view(offset, n, ...): a Binary32 store takes its values back (write(), so a value
  /// that is not binary32 throws std::invalid_argument); nothing to do for Binary64, whose view is the store.
  void store_from(std::size_t offset, std::span<const double> written);

 private:
  std::variant<std::vector<float>, std::vector<double>> data_{std::vector<double>{}};
};

}  // namespace roundoff::studies::train
