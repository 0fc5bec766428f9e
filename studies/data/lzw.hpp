#pragma once
/// \file lzw.hpp
/// Decoder for the LZW code streams of Unix `compress` (.Z, block mode), the compression inside Debian's
/// `bible-kjv-text` data file (kjv.hpp). Written to the behaviour of gzip's unlzw.c, which is the oracle the
/// tests and the KJV preparation were checked against.
#include <string>
#include <string_view>

namespace roundoff::studies::data {

/// Decodes a raw `compress` code stream (the bytes after the 3-byte .Z header 1f 9d <flags>), block mode
/// (code 256 clears the table; new entries start at 257), codes of 9 up to `max_bits` bits (9..16), packed
/// least significant bit first. `compress` writes codes in groups of 8 (one group is n_bits bytes): when the
/// code width grows and after a clear code, the rest of the current group is padding and skipped. Throws
/// std::runtime_error("lzw: ...") on a code that is not yet defined, a first code above 255 or a bad
/// `max_bits`.
std::string lzw_decode(std::string_view codes, int max_bits);

}  // namespace roundoff::studies::data
