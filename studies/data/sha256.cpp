#include "studies/data/sha256.hpp"

#include <algorithm>
#include <array>
#include <cstdio>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace roundoff::studies::data {

namespace {

constexpr std::array<std::uint32_t, 64> kRound{
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

constexpr std::uint32_t rotr(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

void compress_portable(std::array<std::uint32_t, 8>& h, const unsigned char* block) {
  std::array<std::uint32_t, 64> w{};
  for (int t = 0; t < 16; ++t)
    w[t] = (std::uint32_t{block[4 * t]} << 24) | (std::uint32_t{block[4 * t + 1]} << 16) |
           (std::uint32_t{block[4 * t + 2]} << 8) | std::uint32_t{block[4 * t + 3]};
  for (int t = 16; t < 64; ++t) {
    const std::uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    const std::uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  std::uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
  for (int t = 0; t < 64; ++t) {
    const std::uint32_t t1 = k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kRound[t] + w[t];
    const std::uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    k = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

#if defined(__x86_64__)
/// `blocks` consecutive 64-byte blocks through the x86 SHA extensions (SHA-NI): the same function as
/// compress_portable, FIPS 180-4's rounds done by sha256rnds2 two at a time and the message schedule by
/// sha256msg1/msg2. The state is kept in the instructions' ABEF/CDGH lane order and converted at entry and exit.
__attribute__((target("sha,sse4.1,ssse3"))) void compress_sha_ni(std::array<std::uint32_t, 8>& h,
                                                                const unsigned char* data, std::size_t blocks) {
  const __m128i byte_swap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
  __m128i tmp = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(&h[0])), 0xB1);  // CDAB
  __m128i state1 = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(&h[4])), 0x1B);  // EFGH
  __m128i state0 = _mm_alignr_epi8(tmp, state1, 8);     // ABEF
  state1 = _mm_blend_epi16(state1, tmp, 0xF0);          // CDGH
  for (; blocks > 0; --blocks, data += 64) {
    const __m128i abef = state0, cdgh = state1;
    __m128i w[16];  // the message schedule, four words per entry
    for (int i = 0; i < 16; ++i) {
      if (i < 4) {
        w[i] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(data + 16 * i)), byte_swap);
      } else {
        // w[t] = σ1(w[t−2]) + w[t−7] + σ0(w[t−15]) + w[t−16] for the four t of entry i.
        const __m128i s0 = _mm_sha256msg1_epu32(w[i - 4], w[i - 3]);
        w[i] = _mm_sha256msg2_epu32(_mm_add_epi32(s0, _mm_alignr_epi8(w[i - 1], w[i - 2], 4)), w[i - 1]);
      }
      __m128i msg = _mm_add_epi32(w[i], _mm_loadu_si128(reinterpret_cast<const __m128i*>(&kRound[4 * i])));
      state1 = _mm_sha256rnds2_epu32(state1, state0, msg);
      msg = _mm_shuffle_epi32(msg, 0x0E);
      state0 = _mm_sha256rnds2_epu32(state0, state1, msg);
    }
    state0 = _mm_add_epi32(state0, abef);
    state1 = _mm_add_epi32(state1, cdgh);
  }
  tmp = _mm_shuffle_epi32(state0, 0x1B);            // FEBA
  state1 = _mm_shuffle_epi32(state1, 0xB1);         // DCHG
  state0 = _mm_blend_epi16(tmp, state1, 0xF0);      // DCBA
  state1 = _mm_alignr_epi8(state1, tmp, 8);         // HGFE
  _mm_storeu_si128(reinterpret_cast<__m128i*>(&h[0]), state0);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(&h[4]), state1);
}

bool cpu_has_sha_ni() {
  static const bool has = __builtin_cpu_supports("sha") && __builtin_cpu_supports("sse4.1");
  return has;
}
#endif

bool g_hardware = true;  ///< set_sha256_hardware

/// `blocks` consecutive 64-byte blocks into h: the SHA extensions when the CPU has them, else portable.
void compress(std::array<std::uint32_t, 8>& h, const unsigned char* data, std::size_t blocks) {
#if defined(__x86_64__)
  if (g_hardware && cpu_has_sha_ni()) {
    compress_sha_ni(h, data, blocks);
    return;
  }
#endif
  for (; blocks > 0; --blocks, data += 64) compress_portable(h, data);
}

}  // namespace

void set_sha256_hardware(bool on) { g_hardware = on; }

void Sha256::update(std::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  std::size_t n = bytes.size();
  total_ += n;
  if (buffered_ > 0) {
    const std::size_t take = std::min(n, block_.size() - buffered_);
    std::copy_n(p, take, block_.data() + buffered_);
    buffered_ += take, p += take, n -= take;
    if (buffered_ < block_.size()) return;
    compress(h_, block_.data(), 1);
    buffered_ = 0;
  }
  compress(h_, p, n / 64);
  p += n / 64 * 64;
  n %= 64;
  std::copy_n(p, n, block_.data());
  buffered_ = n;
}

std::string Sha256::hex() {
  // Padding: 0x80, zeros, then the bit length as a 64-bit big-endian integer; one or two final blocks.
  std::array<unsigned char, 128> tail{};
  std::copy_n(block_.data(), buffered_, tail.data());
  tail[buffered_] = 0x80;
  const std::size_t tail_len = buffered_ + 9 <= 64 ? 64 : 128;
  const std::uint64_t bits = total_ * 8;
  for (int i = 0; i < 8; ++i) tail[tail_len - 1 - i] = static_cast<unsigned char>(bits >> (8 * i));
  compress(h_, tail.data(), tail_len / 64);
  std::string out(64, '0');
  for (int i = 0; i < 8; ++i) std::snprintf(out.data() + 8 * i, 9, "%08x", static_cast<unsigned>(h_[i]));
  out.resize(64);
  return out;
}

std::string sha256_hex(std::string_view bytes) {
  Sha256 h;
  h.update(bytes);
  return h.hex();
}

}  // namespace roundoff::studies::data
