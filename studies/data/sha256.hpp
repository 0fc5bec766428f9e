#pragma once
/// \file sha256.hpp
/// SHA-256 (FIPS 180-4), used to pin the prepared corpus splits and tokeniser files, and to check checkpoints
/// and identify weights (weights_sha256).
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace roundoff::studies::data {

/// Lower-case hex SHA-256 digest (64 characters) of `bytes`.
std::string sha256_hex(std::string_view bytes);

/// Test hook: false makes every digest use the portable compression function; true (the default) uses the
/// CPU's SHA extensions where it has them (same digests, about 5–10× faster).
void set_sha256_hardware(bool on);

/// SHA-256 of a byte stream given in consecutive pieces: update() each piece in order, then hex() once.
/// hex() of the concatenation equals sha256_hex of it (so a large file can be hashed as it is written or
/// read, without holding it in memory).
class Sha256 {
 public:
  void update(std::string_view bytes);
  /// The digest of everything updated so far (lower-case hex); ends the stream.
  std::string hex();

 private:
  std::array<std::uint32_t, 8> h_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                  0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::array<unsigned char, 64> block_{};  ///< a partial block not yet compressed
  std::size_t buffered_ = 0;               ///< bytes in block_
  std::uint64_t total_ = 0;                ///< bytes updated
};

}  // namespace roundoff::studies::data
