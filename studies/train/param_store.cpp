// Typed storage of parameter-sized state.
#include "studies/train/param_store.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include "numerics/binary32_values.hpp"
#include "numerics/round_span.hpp"
#include "ops/backend.hpp"

namespace roundoff::studies::train {

std::string_view name_of(StorageKind k) {
  switch (k) {
    case StorageKind::Binary32: return "binary32";
    case StorageKind::Binary64: return "binary64";
  }
  return "?";
}

StorageKind storage_kind_for(const numerics::Format& f) {
  const numerics::Format& b32 = numerics::formats::fp32;
  const bool fits = f.precision <= b32.precision && f.emax <= b32.emax &&
                    f.emin - (f.precision - 1) >= b32.emin - (b32.precision - 1);
  return fits ? StorageKind::Binary32 : StorageKind::Binary64;
}

StorageKind storage_kind_for(std::span<const numerics::Format> formats) {
  for (const numerics::Format& f : formats)
    if (storage_kind_for(f) == StorageKind::Binary64) return StorageKind::Binary64;
  return StorageKind::Binary32;
}

ParamStore::ParamStore(StorageKind kind, std::size_t n) {
  switch (kind) {
    case StorageKind::Binary32: data_ = std::vector<float>(n, 0.0f); return;
    case StorageKind::Binary64: data_ = std::vector<double>(n, 0.0); return;
  }
}

std::size_t ParamStore::size() const {
  return std::visit([](const auto& d) { return d.size(); }, data_);
}

std::size_t ParamStore::bytes() const {
  return std::visit([](const auto& d) { return d.size() * sizeof(d[0]); }, data_);
}

namespace {
[[noreturn]] void wrong_kind(StorageKind have, StorageKind want) {
  throw std::logic_error("ParamStore: " + std::string(name_of(have)) + " storage read as " +
                         std::string(name_of(want)));
}
}  // namespace

std::span<float> ParamStore::binary32() {
  if (auto* d = std::get_if<std::vector<float>>(&data_)) return *d;
  wrong_kind(kind(), StorageKind::Binary32);
}
std::span<const float> ParamStore::binary32() const {
  if (const auto* d = std::get_if<std::vector<float>>(&data_)) return *d;
  wrong_kind(kind(), StorageKind::Binary32);
}
std::span<double> ParamStore::binary64() {
  if (auto* d = std::get_if<std::vector<double>>(&data_)) return *d;
  wrong_kind(kind(), StorageKind::Binary64);
}
std::span<const double> ParamStore::binary64() const {
  if (const auto* d = std::get_if<std::vector<double>>(&data_)) return *d;
  wrong_kind(kind(), StorageKind::Binary64);
}

double ParamStore::at(std::size_t i) const {
  return std::visit([i](const auto& d) { return static_cast<double>(d.at(i)); }, data_);
}

void ParamStore::read(std::size_t offset, std::span<double> out) const {
  std::visit(
      [&](const auto& d) {
        if (offset > d.size() || out.size() > d.size() - offset) throw std::out_of_range("ParamStore::read");
        using T = std::decay_t<decltype(d[0])>;
        if constexpr (std::is_same_v<T, float>)
          numerics::widen_binary32(std::span<const float>(d.data() + offset, out.size()), out);  // SIMD, exact
        else
          std::copy_n(d.data() + offset, out.size(), out.data());
      },
      data_);
}

void ParamStore::write(std::size_t offset, std::span<const double> values) {
  std::visit(
      [&](auto& d) {
        using T = std::decay_t<decltype(d[0])>;
        if (offset > d.size() || values.size() > d.size() - offset) throw std::out_of_range("ParamStore::write");
        if constexpr (std::is_same_v<T, float>) {
          // Every value a binary32 value (NaN excluded): each conversion is exact, no value to name.
          if (numerics::all_binary32(values)) {
            numerics::narrow_to_binary32(values, std::span<float>(d.data() + offset, values.size()));  // exact
            return;
          }
        }
        for (std::size_t k = 0; k < values.size(); ++k) {
          const double x = values[k];
          const T t = static_cast<T>(x);
          if (static_cast<double>(t) != x && !std::isnan(x)) {
            std::ostringstream msg;
            msg.precision(17);
            msg << "value " << x << " at element " << offset + k << " is not exactly a " << name_of(kind())
                << " value; this state is stored in " << name_of(kind());
            throw std::invalid_argument(msg.str());
          }
          d[offset + k] = t;
        }
      },
      data_);
}

std::vector<double> ParamStore::to_binary64() const {
  std::vector<double> out(size());
  read(0, out);
  return out;
}

namespace {
// Whole-store passes in chunks over the threads (outside a parallel region): a W512 store holds 13 million values,
// and a serial pass over them is most of what keeps two threads from halving a step's time.
constexpr std::size_t kPassChunk = std::size_t{1} << 16;

std::int64_t pass_chunks(std::size_t n) { return static_cast<std::int64_t>((n + kPassChunk - 1) / kPassChunk); }

template <class T>
bool all_finite_all(const std::vector<T>& d) {  // a logical and: no order, the same answer on any thread count
  const std::int64_t chunks = pass_chunks(d.size());
  bool ok = true;
#pragma omp parallel for schedule(static) reduction(&& : ok) if (chunks > 2 && !omp_in_parallel())
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::size_t b = static_cast<std::size_t>(c) * kPassChunk;
    ok = numerics::all_finite(std::span<const T>(d.data() + b, std::min(kPassChunk, d.size() - b))) && ok;
  }
  return ok;
}
}  // namespace

void ParamStore::zero() {
  std::visit(
      [](auto& d) {
        ops::for_ranges(d.size(), [&](std::size_t b, std::size_t e) {
          std::fill(d.begin() + static_cast<std::ptrdiff_t>(b), d.begin() + static_cast<std::ptrdiff_t>(e), 0);
        });
      },
      data_);
}

bool ParamStore::all_finite() const {
  return std::visit([](const auto& d) { return all_finite_all(d); }, data_);
}

std::span<double> ParamStore::view(std::size_t offset, std::size_t n, std::vector<double>& scratch) {
  if (auto* d = std::get_if<std::vector<double>>(&data_)) return std::span<double>(*d).subspan(offset, n);
  if (scratch.size() < n) scratch.resize(n);
  const std::span<double> out(scratch.data(), n);
  read(offset, out);
  return out;
}

std::span<const double> ParamStore::view(std::size_t offset, std::size_t n, std::vector<double>& scratch) const {
  if (const auto* d = std::get_if<std::vector<double>>(&data_)) return std::span<const double>(*d).subspan(offset, n);
  if (scratch.size() < n) scratch.resize(n);
  const std::span<double> out(scratch.data(), n);
  read(offset, out);
  return out;
}

void ParamStore::store_from(std::size_t offset, std::span<const double> written) {
  if (kind() == StorageKind::Binary64) {
    if (written.data() != binary64().data() + offset) throw std::logic_error("ParamStore::store_from: not its view");
    return;
  }
  write(offset, written);
}

}  // namespace roundoff::studies::train
