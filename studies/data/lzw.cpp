#include "studies/data/lzw.hpp"

#include <cstdint>
#include <stdexcept>
#include <vector>

namespace roundoff::studies::data {

std::string lzw_decode(std::string_view codes, int max_bits) {
  if (max_bits < 9 || max_bits > 16)
    throw std::runtime_error("lzw: max_bits must be 9..16 (got " + std::to_string(max_bits) + ")");
  constexpr int kInitBits = 9;
  constexpr std::uint32_t kClear = 256, kFirst = 257;
  const std::uint32_t max_max_code = 1u << max_bits;
  std::vector<std::uint16_t> prefix(max_max_code, 0);
  std::vector<unsigned char> suffix(max_max_code, 0);
  for (std::uint32_t c = 0; c < 256; ++c) suffix[c] = static_cast<unsigned char>(c);

  const std::uint64_t total_bits = static_cast<std::uint64_t>(codes.size()) * 8;
  std::uint64_t pos = 0, group_start = 0;  // bit positions; groups of 8 codes start at group_start
  int n_bits = kInitBits;
  std::uint32_t max_code = (1u << n_bits) - 1, free_ent = kFirst;
  auto skip_rest_of_group = [&] {
    const std::uint64_t group = static_cast<std::uint64_t>(n_bits) * 8;
    const std::uint64_t used = pos - group_start;
    pos = group_start + (used + group - 1) / group * group;
    group_start = pos;
  };
  auto byte_at = [&](std::uint64_t i) -> std::uint32_t {
    return i < codes.size() ? static_cast<unsigned char>(codes[i]) : 0u;
  };

  std::string out;
  std::string stack;
  std::int64_t old_code = -1;
  unsigned char fin_char = 0;
  while (true) {
    if (free_ent > max_code) {
      skip_rest_of_group();
      ++n_bits;
      max_code = n_bits == max_bits ? max_max_code : (1u << n_bits) - 1;
      continue;
    }
    if (pos + static_cast<std::uint64_t>(n_bits) > total_bits) break;
    const std::uint64_t byte = pos >> 3;
    const std::uint32_t window = byte_at(byte) | (byte_at(byte + 1) << 8) | (byte_at(byte + 2) << 16);
    std::uint32_t code = (window >> (pos & 7)) & ((1u << n_bits) - 1);
    pos += static_cast<std::uint64_t>(n_bits);
    if (old_code == -1) {
      if (code >= 256) throw std::runtime_error("lzw: the first code is " + std::to_string(code) + ", not a byte");
      fin_char = static_cast<unsigned char>(code);
      old_code = code;
      out += static_cast<char>(fin_char);
      continue;
    }
    if (code == kClear) {
      free_ent = kFirst - 1;
      skip_rest_of_group();
      n_bits = kInitBits;
      max_code = (1u << n_bits) - 1;
      continue;
    }
    const std::uint32_t in_code = code;
    stack.clear();
    if (code >= free_ent) {  // the KwKwK case: the code being defined right now
      if (code > free_ent)
        throw std::runtime_error("lzw: code " + std::to_string(code) + " is not defined yet (next free " +
                                 std::to_string(free_ent) + "): corrupt input");
      stack += static_cast<char>(fin_char);
      code = static_cast<std::uint32_t>(old_code);
    }
    while (code >= 256) {
      stack += static_cast<char>(suffix[code]);
      code = prefix[code];
    }
    fin_char = suffix[code];
    stack += static_cast<char>(fin_char);
    out.append(stack.rbegin(), stack.rend());
    if (free_ent < max_max_code) {
      prefix[free_ent] = static_cast<std::uint16_t>(old_code);
      suffix[free_ent] = fin_char;
      ++free_ent;
    }
    old_code = in_code;
  }
  return out;
}

}  // namespace roundoff::studies::data
