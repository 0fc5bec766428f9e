#pragma once
/// \file rounding.hpp
/// Rounding modes and the counter-based random stream used by stochastic rounding.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace roundoff::numerics {

/// How an exact value is mapped to a format value.
enum class Rounding : std::uint8_t {
  NearestEven,  ///< nearest, ties to even significand (IEEE default)
  NearestAway,  ///< nearest, ties away from zero
  TowardZero,   ///< truncation
  Up,           ///< toward +inf
  Down,         ///< toward -inf
  Odd,          ///< exact values stay; otherwise the neighbour with an odd last significand bit
  Stochastic,   ///< up with probability (x - down(x)) / (up(x) - down(x)), from a counter-based stream
};
inline constexpr std::array kAllRoundings{Rounding::NearestEven, Rounding::NearestAway, Rounding::TowardZero,
                                          Rounding::Up,          Rounding::Down,        Rounding::Odd,
                                          Rounding::Stochastic};
inline constexpr std::array kDeterministicRoundings{Rounding::NearestEven, Rounding::NearestAway,
                                                    Rounding::TowardZero,  Rounding::Up,
                                                    Rounding::Down,        Rounding::Odd};

/// CLI name: nearest-even nearest-away toward-zero up down odd stochastic.
std::string_view name_of(Rounding r);
/// Parses a CLI name; throws std::invalid_argument listing the valid names.
Rounding parse_rounding(std::string_view text);

/// SplitMix64 finaliser (Steele, Lea & Flood 2014): a bijective 64-bit mixer.
constexpr std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// A counter-based random stream: the draw for element `index` of stream `stream` under `seed` is a pure
/// function of the three, so results do not depend on thread count or call order.
///   key = mix64(seed ^ mix64(stream + φ)),   draw(i) = mix64(key + (i + 1)·φ),   φ = 0x9E3779B97F4A7C15.
/// (This is SplitMix64 run from a per-(seed, stream) key; it passes BigCrush as a sequence.)
struct StochasticBits {
  std::uint64_t seed = 0;
  std::uint64_t stream = 0;
  constexpr std::uint64_t key() const { return mix64(seed ^ mix64(stream + 0x9E3779B97F4A7C15ull)); }
  constexpr std::uint64_t draw(std::uint64_t index) const {
    return mix64(key() + (index + 1) * 0x9E3779B97F4A7C15ull);
  }
};

}  // namespace roundoff::numerics
