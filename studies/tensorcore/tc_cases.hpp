#pragma once
/// Test cases for probing a GPU's matrix-multiply-accumulate (tensor-core) arithmetic, shared by the CUDA probe
/// (studies/tensorcore/mma_probe.cu, built with nvcc on a GPU machine) and the CPU-side model fit
/// (studies/tensorcore/tc_fit.cpp). Header-only, integer arithmetic only (plus exact double decoding), so both
/// compilers generate the same operand bits from the same (seed, shape, tile).
///
/// One tile is one mma.sync instruction D(16×8) = A(16×K)·B(K×8) + C(16×8), A and B in the shape's input
/// format, C and D in its accumulator format. Elements are raw encodings held in uint32 (tf32 as its binary32
/// encoding with the low 13 bits zero). Each tile belongs to a case class (tile mod 8), see make_tile.
#include <cmath>
#include <cstdint>
#include <vector>

namespace roundoff::tensorcore {

enum class Shape : std::uint32_t { F16F32 = 0, F16F16 = 1, BF16F32 = 2, TF32F32 = 3, E4M3F32 = 4, E5M2F32 = 5 };
inline constexpr int kShapeCount = 6;

/// A binary interchange-style encoding: sign, `ebits` exponent bits, `mbits` stored fraction bits of which the
/// top `used` may be nonzero (tf32 in binary32 storage), IEEE inf/NaN unless `nan_only` (OCP e4m3: no inf,
/// S.1111.111 is NaN).
struct Field {
  int ebits;
  int mbits;
  int used;
  bool nan_only;
  int bias() const { return (1 << (ebits - 1)) - 1; }
  int emin() const { return 1 - bias(); }
  /// Largest unbiased exponent of a finite value.
  int emax() const { return nan_only ? (1 << ebits) - 1 - bias() : (1 << ebits) - 2 - bias(); }
};
inline constexpr Field kFp32{8, 23, 23, false};
inline constexpr Field kFp16{5, 10, 10, false};
inline constexpr Field kBf16{8, 7, 7, false};
inline constexpr Field kTf32{8, 23, 10, false};
inline constexpr Field kE4m3{4, 3, 3, true};
inline constexpr Field kE5m2{5, 2, 2, false};

struct Geometry {
  int m, n, k;
  Field in;
  Field acc;
  const char* name;  ///< file-name stem and CSV key
};

inline Geometry geometry(Shape s) {
  switch (s) {
    case Shape::F16F32: return {16, 8, 16, kFp16, kFp32, "f16-f32"};
    case Shape::F16F16: return {16, 8, 16, kFp16, kFp16, "f16-f16"};
    case Shape::BF16F32: return {16, 8, 16, kBf16, kFp32, "bf16-f32"};
    case Shape::TF32F32: return {16, 8, 8, kTf32, kFp32, "tf32-f32"};
    case Shape::E4M3F32: return {16, 8, 32, kE4m3, kFp32, "e4m3-f32"};
    case Shape::E5M2F32: return {16, 8, 32, kE5m2, kFp32, "e5m2-f32"};
  }
  return {0, 0, 0, kFp32, kFp32, "?"};
}

/// The case classes, tile mod 8.
inline const char* class_name(int c) {
  static const char* const names[8] = {"exact-int", "wide", "narrow", "align", "cancel", "tiny", "specials", "zeros"};
  return names[c & 7];
}

struct Rng {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  /// Uniform in [lo, hi] (hi - lo < 2^32).
  int uniform(int lo, int hi) { return lo + static_cast<int>(next() % static_cast<std::uint64_t>(hi - lo + 1)); }
  bool chance(int num, int den) { return next() % static_cast<std::uint64_t>(den) < static_cast<std::uint64_t>(num); }
};

inline std::uint32_t encode(const Field& f, bool neg, int biased, std::uint32_t frac) {
  return (static_cast<std::uint32_t>(neg) << (f.ebits + f.mbits)) | (static_cast<std::uint32_t>(biased) << f.mbits) |
         frac;
}
inline std::uint32_t random_frac(const Field& f, Rng& r) {
  const std::uint32_t mask = (1u << f.used) - 1u;
  return (static_cast<std::uint32_t>(r.next()) & mask) << (f.mbits - f.used);
}
/// A normal value with unbiased exponent uniform in [lo, hi] clipped to the format's normal range.
inline std::uint32_t random_normal(const Field& f, Rng& r, int lo, int hi) {
  lo = lo < f.emin() ? f.emin() : lo;
  hi = hi > f.emax() ? f.emax() : hi;
  if (lo > hi) lo = hi;
  std::uint32_t frac = random_frac(f, r);
  const int e = r.uniform(lo, hi);
  if (f.nan_only && e == f.emax() && frac == ((1u << f.mbits) - 1u)) frac -= 1u << (f.mbits - f.used);
  return encode(f, r.chance(1, 2), e + f.bias(), frac);
}
inline std::uint32_t random_subnormal(const Field& f, Rng& r) {
  std::uint32_t frac = random_frac(f, r);
  if (frac == 0) frac = 1u << (f.mbits - f.used);
  return encode(f, r.chance(1, 2), 0, frac);
}
inline std::uint32_t max_finite(const Field& f, bool neg) {
  const std::uint32_t full = ((1u << f.used) - 1u) << (f.mbits - f.used);
  if (f.nan_only) return encode(f, neg, (1 << f.ebits) - 1, full - (1u << (f.mbits - f.used)));
  return encode(f, neg, (1 << f.ebits) - 2, full);
}
inline std::uint32_t infinity(const Field& f, bool neg) {
  return f.nan_only ? encode(f, neg, (1 << f.ebits) - 1, (1u << f.mbits) - 1u) : encode(f, neg, (1 << f.ebits) - 1, 0);
}
inline std::uint32_t quiet_nan(const Field& f) {
  return f.nan_only ? encode(f, false, (1 << f.ebits) - 1, (1u << f.mbits) - 1u)
                    : encode(f, false, (1 << f.ebits) - 1, 1u << (f.mbits - 1));
}
inline std::uint32_t zero(const Field& f, bool neg) { return encode(f, neg, 0, 0); }

/// The exact value of an encoding (inf and NaN as IEEE doubles).
inline double decode(const Field& f, std::uint32_t bits) {
  const bool neg = (bits >> (f.ebits + f.mbits)) & 1u;
  const int biased = static_cast<int>((bits >> f.mbits) & ((1u << f.ebits) - 1u));
  const std::uint32_t frac = bits & ((1u << f.mbits) - 1u);
  double v;
  if (biased == (1 << f.ebits) - 1 && (!f.nan_only || frac == (1u << f.mbits) - 1u)) {
    v = (frac == 0 && !f.nan_only) ? INFINITY : NAN;
  } else if (biased == 0) {
    v = std::ldexp(static_cast<double>(frac), f.emin() - f.mbits);
  } else {
    v = std::ldexp(static_cast<double>(frac + (1u << f.mbits)), biased - f.bias() - f.mbits);
  }
  return neg ? -v : v;
}

/// x rounded to nearest (ties to even) in f, saturating at ±max_finite; x finite.
inline std::uint32_t encode_nearest(const Field& f, double x) {
  const bool neg = std::signbit(x);
  const double a = std::fabs(x);
  if (a == 0) return zero(f, neg);
  int e = std::ilogb(a);
  if (e < f.emin()) e = f.emin();
  double q = std::nearbyint(std::ldexp(a, f.used - e));  // ulp 1; the default mode rounds ties to even
  if (q >= std::ldexp(1.0, f.used + 1)) {
    q /= 2;
    ++e;
  }
  if (e > f.emax()) return max_finite(f, neg);
  const auto iq = static_cast<std::uint32_t>(q);
  const int shift = f.mbits - f.used;
  if (iq < (1u << f.used)) return encode(f, neg, 0, iq << shift);
  const std::uint32_t enc = encode(f, neg, e + f.bias(), (iq - (1u << f.used)) << shift);
  return (f.nan_only && (enc & 0x7fu) == 0x7fu) ? max_finite(f, neg) : enc;
}
/// A small integer |v| ≤ 15, exact in every input and accumulator format here.
inline std::uint32_t encode_int(const Field& f, int v) { return encode_nearest(f, static_cast<double>(v)); }

struct Tile {
  std::vector<std::uint32_t> a;  ///< m×k, row-major
  std::vector<std::uint32_t> b;  ///< k×n, row-major
  std::vector<std::uint32_t> c;  ///< m×n, row-major
};

/// The operands of tile `t` of shape `s` under `seed`. Classes (t mod 8):
///   0 exact-int  A, B in {-3..3}, C in {-8..8}: every result exact (checks the fragment layout).
///   1 wide       A, B over the whole normal range, C over the products' range: alignment shifts of any size.
///   2 narrow     exponents of A, B in [-3, 3], C in [-6, 6].
///   3 align      one product of each row near 1 (its column random), the others 2^0..2^-30 smaller, C in
///                [2^-40, 2^2]: the bits shifted out during alignment decide the result.
///   4 cancel     A, B narrow, C = -(Σ A·B rounded to nearest in the accumulator format) moved by 0..3 ulps:
///                massive cancellation between C and the products; some results exactly zero.
///   5 tiny       subnormal and smallest-normal inputs, C subnormal, tiny or zero: underflow and flushing.
///   6 specials   narrow values mixed with ±inf, NaN, ±max_finite, ±0 and values near overflow.
///   7 zeros      three quarters of A, B and half of C are ±0: signs of zero results.
inline Tile make_tile(Shape s, std::uint64_t seed, std::uint64_t t) {
  const Geometry g = geometry(s);
  Rng r{seed ^ (static_cast<std::uint64_t>(s) << 56) ^ (t * 0x2545f4914f6cdd1dull)};
  r.next();
  Tile tile;
  tile.a.resize(static_cast<std::size_t>(g.m * g.k));
  tile.b.resize(static_cast<std::size_t>(g.k * g.n));
  tile.c.resize(static_cast<std::size_t>(g.m * g.n));
  const Field& in = g.in;
  const Field& acc = g.acc;
  const int cls = static_cast<int>(t & 7u);
  auto special = [&](const Field& f) -> std::uint32_t {
    switch (r.uniform(0, 7)) {
      case 0: return infinity(f, false);
      case 1: return infinity(f, true);
      case 2: return quiet_nan(f);
      case 3: return max_finite(f, false);
      case 4: return max_finite(f, true);
      case 5: return zero(f, true);
      case 6: return zero(f, false);
      default: return random_normal(f, r, f.emax() - 2, f.emax());
    }
  };
  auto tiny = [&](const Field& f) -> std::uint32_t {
    switch (r.uniform(0, 2)) {
      case 0: return random_subnormal(f, r);
      case 1: return random_normal(f, r, f.emin(), f.emin() + 4);
      default: return random_normal(f, r, -4, 4);
    }
  };
  switch (cls) {
    case 0:
      for (auto& x : tile.a) x = encode_int(in, r.uniform(-3, 3));
      for (auto& x : tile.b) x = encode_int(in, r.uniform(-3, 3));
      for (auto& x : tile.c) x = encode_int(acc, r.uniform(-8, 8));
      break;
    case 1:
      for (auto& x : tile.a) x = random_normal(in, r, in.emin(), in.emax());
      for (auto& x : tile.b) x = random_normal(in, r, in.emin(), in.emax());
      for (auto& x : tile.c) x = random_normal(acc, r, 2 * in.emin(), 2 * in.emax());
      break;
    case 2:
    case 4:
      for (auto& x : tile.a) x = random_normal(in, r, -3, 3);
      for (auto& x : tile.b) x = random_normal(in, r, -3, 3);
      for (auto& x : tile.c) x = random_normal(acc, r, -6, 6);
      break;
    case 3: {
      const int depth = 30 < -in.emin() ? 30 : -in.emin();
      for (int i = 0; i < g.m; ++i) {
        const int big = r.uniform(0, g.k - 1);
        for (int k = 0; k < g.k; ++k) {
          const int e = k == big ? 0 : -r.uniform(0, depth);
          tile.a[static_cast<std::size_t>(i * g.k + k)] = random_normal(in, r, e, e);
        }
      }
      for (auto& x : tile.b) x = random_normal(in, r, -2, 0);
      for (auto& x : tile.c) x = r.chance(1, 8) ? zero(acc, r.chance(1, 2)) : random_normal(acc, r, -40, 2);
      break;
    }
    case 5:
      for (auto& x : tile.a) x = tiny(in);
      for (auto& x : tile.b) x = tiny(in);
      for (auto& x : tile.c) {
        const int w = r.uniform(0, 2);
        x = w == 0   ? random_subnormal(acc, r)
            : w == 1 ? random_normal(acc, r, acc.emin(), acc.emin() + 4)
                     : zero(acc, r.chance(1, 2));
      }
      break;
    case 6:
      for (auto& x : tile.a) x = r.chance(1, 12) ? special(in) : random_normal(in, r, -3, 3);
      for (auto& x : tile.b) x = r.chance(1, 12) ? special(in) : random_normal(in, r, -3, 3);
      for (auto& x : tile.c) x = r.chance(1, 6) ? special(acc) : random_normal(acc, r, -6, 6);
      break;
    default:
      for (auto& x : tile.a) x = r.chance(3, 4) ? zero(in, r.chance(1, 2)) : random_normal(in, r, -3, 3);
      for (auto& x : tile.b) x = r.chance(3, 4) ? zero(in, r.chance(1, 2)) : random_normal(in, r, -3, 3);
      for (auto& x : tile.c) x = r.chance(1, 2) ? zero(acc, r.chance(1, 2)) : random_normal(acc, r, -6, 6);
      break;
  }
  if (cls == 4) {
    for (int i = 0; i < g.m; ++i) {
      for (int j = 0; j < g.n; ++j) {
        double sum = 0;  // exact: ≤ 32 products of narrow values span far fewer than 53 bits
        for (int k = 0; k < g.k; ++k)
          sum += decode(in, tile.a[static_cast<std::size_t>(i * g.k + k)]) *
                 decode(in, tile.b[static_cast<std::size_t>(k * g.n + j)]);
        std::uint32_t c = encode_nearest(acc, -sum);
        const int move = r.uniform(-3, 3);
        const std::uint32_t mag_mask = (1u << (acc.ebits + acc.mbits)) - 1u;
        if ((c & mag_mask) > 3u) c = static_cast<std::uint32_t>(static_cast<std::int64_t>(c) + move);
        tile.c[static_cast<std::size_t>(i * g.n + j)] = c;
      }
    }
  }
  return tile;
}

/// FNV-1a over the operand bits of tiles [0, tiles), in tile order (a, b, c): the probe stores it so the fit
/// can check that it regenerated the same operands.
inline std::uint64_t operand_hash(Shape s, std::uint64_t seed, std::uint64_t tiles) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  auto eat = [&h](const std::vector<std::uint32_t>& v) {
    for (std::uint32_t x : v) {
      for (int byte = 0; byte < 4; ++byte) {
        h ^= (x >> (8 * byte)) & 0xffu;
        h *= 0x100000001b3ull;
      }
    }
  };
  for (std::uint64_t t = 0; t < tiles; ++t) {
    const Tile tile = make_tile(s, seed, t);
    eat(tile.a);
    eat(tile.b);
    eat(tile.c);
  }
  return h;
}

}  // namespace roundoff::tensorcore
