#pragma once
/// \file sha256.hpp
/// SHA-256 (FIPS 180-4), used to pin the prepared corpus splits and tokeniser files.
#include <cstdint>
#include <string>
#include <string_view>

namespace roundoff::studies::data {

/// Lower-case hex SHA-256 digest (64 characters) of `bytes`.
std::string sha256_hex(std::string_view bytes);

}  // namespace roundoff::studies::data
