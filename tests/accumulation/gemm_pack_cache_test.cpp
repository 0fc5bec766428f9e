// The GEMM kernels' B-operand pack cache (numerics::kernels::PackCache): a product whose B lies in a
// registered range gives the same bits on its first call (packed into the cache), on later calls (packed panels
// reused) and with nothing registered; a pack is reused only under the same address, shape, transposition, entry
// cast, kernel plan and version; registering a new version or unregistering drops the packs of the range, so new
// values are seen; memory that is not registered is never cached.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "numerics/accumulate.hpp"
#include "numerics/gemm_kernels.hpp"
#include "numerics/round.hpp"
#include "tests/accumulation/gemm_test_values.hpp"

namespace roundoff::numerics {
namespace {

namespace k = kernels;
using test::random_values;
using test::same;
using test::Regime;


struct Product {
  std::size_t M, N, K;
  bool bt;           ///< B stored transposed (as matmul's forward reads W)
  std::size_t off;   ///< B starts this many doubles into the registered buffer
  std::size_t ldb;
};

/// C = A·B by gemm_fast under opts with cast_b (may be null) on the buffer's B and the pack cache `cache` (may be
/// null); the kernels must take it.
std::vector<double> product(k::PackCache* cache, const KernelOptions& opts, const Accumulation& a,
                            const std::vector<double>& A, const std::vector<double>& buf, const Product& p,
                            const k::OperandCast* cast_b) {
  std::vector<double> C(p.M * p.N, 7.0);
  EXPECT_TRUE(k::gemm_fast(a, p.M, p.N, p.K, ConstMatrix{A.data(), p.K}, ConstMatrix{buf.data() + p.off, p.ldb, p.bt},
                           C.data(), p.N, false, nullptr, 2, nullptr, cast_b, opts, cache));
  return C;
}

void expect_same(const std::vector<double>& got, const std::vector<double>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(same(got[i], want[i])) << what << " at " << i;
}

TEST(GemmPackCache, ReusedPacksGiveTheBitsOfFreshOnes) {
  if (k::detected_isa() == k::Isa::None) GTEST_SKIP() << "no AVX2 or AVX-512";
  std::mt19937_64 rng(5);
  const Accumulation accs[] = {parse_accumulation("fp16-seq"), parse_accumulation("fp32-seq"), parse_accumulation("ane-tile4"),
                               parse_accumulation("fp16-splitk32-fp32")};
  const Product shapes[] = {{19, 70, 45, true, 0, 45}, {19, 70, 45, false, 3, 73}, {8, 131, 9, true, 100, 11}};
  const RoundingPlan half(formats::fp16);
  const k::OperandCast to_half{&half, Rounding::NearestEven, false};
  // fp32 values (a cast to fp16 applies) in a buffer large enough for every shape's B at its offset
  std::vector<double> buf = random_values(rng, formats::fp32, 8000, Regime::Normal);
  const std::vector<double> A = random_values(rng, formats::fp16, 19 * 45, Regime::Specials);
  const std::vector<double> A9 = random_values(rng, formats::fp16, 8 * 9, Regime::Normal);
  const k::Isa detected = k::detected_isa();
  k::PackCache cache;
  for (const k::Isa isa : {k::Isa::Avx512, k::Isa::Avx2}) {
    if (detected < isa) continue;
    const KernelOptions opts{true, isa};
    for (const Accumulation& a : accs)
      for (const Product& p : shapes) {
        const std::vector<double>& Ap = p.K == 9 ? A9 : A;
        // The uncached products (nothing registered), with and without the entry cast (the fp32 accumulator
        // takes binary32 B; the others only with the cast, which makes B fp16).
        const bool fp32_acc = a.format == formats::fp32 && a.tile.size == 0;
        const std::vector<double> want_cast = product(&cache, opts, a, Ap, buf, p, &to_half);
        const std::vector<double> want_raw = fp32_acc ? product(&cache, opts, a, Ap, buf, p, nullptr) : std::vector<double>{};
        const k::PackCacheStats s0 = cache.stats();
        cache.register_immutable(buf.data(), buf.size(), 41);
        for (int call = 0; call < 3; ++call) {
          expect_same(product(&cache, opts, a, Ap, buf, p, &to_half), want_cast, "cast");
          if (fp32_acc) expect_same(product(&cache, opts, a, Ap, buf, p, nullptr), want_raw, "raw");
        }
        const k::PackCacheStats s1 = cache.stats();
        const int keys = fp32_acc ? 2 : 1;  // the cast and the raw B are different packs
        EXPECT_EQ(s1.misses - s0.misses, static_cast<std::uint64_t>(keys));
        EXPECT_EQ(s1.hits - s0.hits, static_cast<std::uint64_t>(2 * keys));
        EXPECT_EQ(s1.entries, static_cast<std::size_t>(keys));
        // New values under a new version: seen, and packed afresh.
        std::vector<double> changed = buf;
        for (double& x : changed) x = -x;
        buf.swap(changed);
        const std::vector<double> want_new = [&] {
          cache.unregister_immutable(changed.data());
          return product(&cache, opts, a, Ap, buf, p, &to_half);
        }();
        cache.register_immutable(buf.data(), buf.size(), 42);
        expect_same(product(&cache, opts, a, Ap, buf, p, &to_half), want_new, "new version");
        expect_same(product(&cache, opts, a, Ap, buf, p, &to_half), want_new, "new version, reused");
        cache.unregister_immutable(buf.data());
        EXPECT_EQ(cache.stats().entries, 0u);
        EXPECT_EQ(cache.stats().bytes, 0u);
      }
  }
  EXPECT_EQ(cache.stats().ranges, 0u);
}

/// A binary32 B (a model's binary32 working weights) registered as a float range is cached like a binary64 one: every
/// call gives the bits of the product of the widened B without a cache (with and without an entry cast, on every
/// tier), the first call packs and later ones reuse the pack, and a new version of the values is seen.
TEST(GemmPackCache, BinaryThirtyTwoOperandsAreCachedAsTheirWidenedValues) {
  if (k::detected_isa() == k::Isa::None) GTEST_SKIP() << "no AVX2 or AVX-512";
  std::mt19937_64 rng(21);
  const Product p{19, 70, 45, true, 5, 45};
  const RoundingPlan half(formats::fp16);
  const k::OperandCast to_half{&half, Rounding::NearestEven, false};
  const std::vector<double> wide = random_values(rng, formats::fp32, 70 * 45 + 5, Regime::Normal);
  std::vector<float> buf(wide.begin(), wide.end());
  const std::vector<double> A64 = random_values(rng, formats::fp32, 19 * 45, Regime::Normal);
  const std::vector<float> A(A64.begin(), A64.end());
  const Accumulation a = parse_accumulation("fp32-seq");
  const k::Isa detected = k::detected_isa();
  for (const k::Isa isa : {k::Isa::Avx512, k::Isa::Avx2}) {
    if (detected < isa) continue;
    const KernelOptions opts{true, isa};
    auto run32 = [&](k::PackCache* cache, const k::OperandCast* cast) {
      std::vector<double> C(p.M * p.N, 7.0);
      EXPECT_TRUE(k::gemm_fast(a, p.M, p.N, p.K, ConstMatrix32{A.data(), p.K},
                               ConstMatrix32{buf.data() + p.off, p.ldb, p.bt}, C.data(), p.N, false, nullptr, 2,
                               nullptr, cast, opts, cache));
      return C;
    };
    for (const k::OperandCast* cast : {static_cast<const k::OperandCast*>(nullptr), &to_half}) {
      const std::vector<double> widened(buf.begin(), buf.end());
      const std::vector<double> want = product(nullptr, opts, a, A64, widened, p, cast);
      k::PackCache cache;
      cache.register_immutable(buf.data(), buf.size(), 1);
      for (int call = 0; call < 3; ++call) expect_same(run32(&cache, cast), want, "binary32 B, cached");
      EXPECT_EQ(cache.stats().misses, 1u);
      EXPECT_EQ(cache.stats().hits, 2u);
      EXPECT_EQ(cache.stats().entries, 1u);
      // New values under a new version are seen.
      for (float& x : buf) x = -x;
      cache.register_immutable(buf.data(), buf.size(), 2);
      const std::vector<double> negated(buf.begin(), buf.end());
      expect_same(run32(&cache, cast), product(nullptr, opts, a, A64, negated, p, cast), "new version");
      cache.unregister_immutable(buf.data());
      EXPECT_EQ(cache.stats().entries, 0u);
      EXPECT_EQ(cache.stats().ranges, 0u);
    }
  }
}

/// A cache's capacity bounds what it holds: a pack larger than what is left is not cached (its product is packed
/// afresh every call, the same bits), capacity 0 caches nothing, and set_capacity applies to later insertions.
TEST(GemmPackCache, CapacityBoundsTheEntriesAndChangesNoBit) {
  if (k::detected_isa() == k::Isa::None) GTEST_SKIP() << "no AVX2 or AVX-512";
  std::mt19937_64 rng(8);
  const Accumulation a = parse_accumulation("fp32-seq");
  const Product small{19, 16, 45, true, 0, 45}, large{19, 131, 45, true, 0, 45};
  const std::vector<double> buf = random_values(rng, formats::fp32, 131 * 45, Regime::Normal);
  const std::vector<double> A = random_values(rng, formats::fp32, 19 * 45, Regime::Normal);
  const KernelOptions opts{true, k::detected_isa()};
  k::PackCache reference;
  const std::vector<double> want_small = product(&reference, opts, a, A, buf, small, nullptr);
  const std::vector<double> want_large = product(&reference, opts, a, A, buf, large, nullptr);
  // The small pack's bytes: what a default cache holds after caching it alone.
  k::PackCache probe;
  probe.register_immutable(buf.data(), buf.size(), 1);
  (void)product(&probe, opts, a, A, buf, small, nullptr);
  const std::size_t small_bytes = probe.stats().bytes;
  ASSERT_GT(small_bytes, 0u);
  EXPECT_EQ(probe.capacity(), k::PackCache::kDefaultCapacity);
  for (const std::size_t capacity : {std::size_t{0}, small_bytes}) {
    k::PackCache cache(capacity);
    EXPECT_EQ(cache.capacity(), capacity);
    cache.register_immutable(buf.data(), buf.size(), 1);
    for (int call = 0; call < 2; ++call) {
      expect_same(product(&cache, opts, a, A, buf, small, nullptr), want_small, "small");
      expect_same(product(&cache, opts, a, A, buf, large, nullptr), want_large, "large");  // never fits
    }
    const k::PackCacheStats s = cache.stats();
    EXPECT_EQ(s.entries, capacity == 0 ? 0u : 1u) << capacity;
    EXPECT_LE(s.bytes, capacity);
    EXPECT_EQ(s.hits, capacity == 0 ? 0u : 1u) << capacity;
    cache.set_capacity(k::PackCache::kDefaultCapacity);  // later insertions: the large pack now fits
    expect_same(product(&cache, opts, a, A, buf, large, nullptr), want_large, "large, capacity raised");
    EXPECT_EQ(cache.stats().entries, capacity == 0 ? 1u : 2u) << capacity;
  }
}

TEST(GemmPackCache, AFlushingCastZeroesSubnormalsAndIsItsOwnPack) {
  // OperandCast::flush (daz in the cast format): every operand value that rounds to a subnormal of the cast format
  // is read as the zero of its sign, on A and B, on every kernel tier; the product equals the unflushed cast's
  // product of operands flushed beforehand. A cached B packed with one flush setting never serves the other.
  if (k::detected_isa() == k::Isa::None) GTEST_SKIP() << "no AVX2 or AVX-512";
  std::mt19937_64 rng(13);
  const Product p{12, 40, 33, true, 0, 33};
  const RoundingPlan half(formats::fp16);
  const k::OperandCast plain{&half, Rounding::NearestEven, false};
  const k::OperandCast flushing{&half, Rounding::NearestEven, false, true};
  // fp32 values around fp16's subnormal range (2^-24 .. 2^-14) and normal ones, both signs
  std::uniform_real_distribution<double> e(-27.0, -10.0);
  auto tiny_mixed = [&](std::size_t n) {
    std::vector<double> v(n);
    for (std::size_t i = 0; i < n; ++i)
      v[i] = static_cast<double>(static_cast<float>((i % 2 ? -1.0 : 1.0) * std::exp2(e(rng))));
    return v;
  };
  std::vector<double> buf = tiny_mixed(p.N * p.K);
  const std::vector<double> A = tiny_mixed(p.M * p.K);
  auto flushed = [&](std::vector<double> v) {  // the definition: cast to fp16, then subnormals to signed zeros
    for (double& x : v) {
      x = round_to(half, Rounding::NearestEven, x);
      if (std::fabs(x) < std::exp2(-14)) x = std::copysign(0.0, x);
    }
    return v;
  };
  const std::vector<double> bufF = flushed(buf), AF = flushed(A);
  std::size_t zeroed = 0;
  for (std::size_t i = 0; i < buf.size(); ++i) zeroed += bufF[i] == 0 && round_to(half, Rounding::NearestEven, buf[i]) != 0;
  ASSERT_GT(zeroed, buf.size() / 4);  // the flush has something to do
  const Accumulation a = parse_accumulation("fp32-seq");
  const k::Isa detected = k::detected_isa();
  for (const k::Isa isa : {k::Isa::Avx512, k::Isa::Avx2}) {
    if (detected < isa) continue;
    const KernelOptions opts{true, isa};
    auto run = [&](k::PackCache* cache, const std::vector<double>& Av, const std::vector<double>& Bv,
                   const k::OperandCast* cast) {
      std::vector<double> C(p.M * p.N, 7.0);
      EXPECT_TRUE(k::gemm_fast(a, p.M, p.N, p.K, ConstMatrix{Av.data(), p.K}, ConstMatrix{Bv.data(), p.ldb, p.bt},
                               C.data(), p.N, false, nullptr, 2, cast, cast, opts, cache));
      return C;
    };
    const std::vector<double> want_flush = run(nullptr, AF, bufF, &plain);
    const std::vector<double> want_plain = run(nullptr, A, buf, &plain);
    ASSERT_NE(want_flush, want_plain);
    expect_same(run(nullptr, A, buf, &flushing), want_flush, "flushing cast, no cache");
    k::PackCache cache;
    cache.register_immutable(buf.data(), buf.size(), 1);
    for (int call = 0; call < 2; ++call) {
      expect_same(run(&cache, A, buf, &flushing), want_flush, "flushing cast, cached");
      expect_same(run(&cache, A, buf, &plain), want_plain, "plain cast, cached");
    }
    EXPECT_EQ(cache.stats().entries, 2u);
    cache.unregister_immutable(buf.data());
  }
}

TEST(GemmPackCache, ReregisteringDropsTheOldVersionsPacks) {
  if (k::detected_isa() == k::Isa::None) GTEST_SKIP() << "no AVX2 or AVX-512";
  std::mt19937_64 rng(9);
  const Accumulation a = parse_accumulation("fp32-seq");
  const Product p{16, 64, 32, true, 0, 32};
  std::vector<double> buf = random_values(rng, formats::fp16, 64 * 32, Regime::Normal);
  const std::vector<double> A = random_values(rng, formats::fp16, 16 * 32, Regime::Normal);
  k::PackCache cache;
  const KernelOptions opts;
  cache.register_immutable(buf.data(), buf.size(), 1);
  const std::vector<double> first = product(&cache, opts, a, A, buf, p, nullptr);
  EXPECT_EQ(cache.stats().entries, 1u);
  // The caller changes the values and says so with a new version: the old pack must not be used.
  for (double& x : buf) x *= 2;
  cache.register_immutable(buf.data(), buf.size(), 2);
  EXPECT_EQ(cache.stats().entries, 0u);
  const std::vector<double> second = product(&cache, opts, a, A, buf, p, nullptr);
  for (std::size_t i = 0; i < first.size(); ++i) {
    if (std::isfinite(first[i])) {
      ASSERT_TRUE(same(second[i], 2 * first[i])) << i;  // exact: a power-of-two scale
    }
  }
  cache.unregister_immutable(buf.data());
  // Memory that is not registered is never cached.
  const k::PackCacheStats s0 = cache.stats();
  (void)product(&cache, opts, a, A, buf, p, nullptr);
  EXPECT_EQ(cache.stats().entries, 0u);
  EXPECT_EQ(cache.stats().misses, s0.misses);
}

TEST(GemmPackCache, EachCacheServesOnlyItsOwner) {
  // A range registered with one cache is cached there and nowhere else: a product without a cache, or with
  // another one, packs afresh (no process-wide cache to share entries through).
  if (k::detected_isa() == k::Isa::None) GTEST_SKIP() << "no AVX2 or AVX-512";
  std::mt19937_64 rng(11);
  const Accumulation a = parse_accumulation("fp32-seq");
  const Product p{16, 64, 32, true, 0, 32};
  std::vector<double> buf = random_values(rng, formats::fp16, 64 * 32, Regime::Normal);
  const std::vector<double> A = random_values(rng, formats::fp16, 16 * 32, Regime::Normal);
  const KernelOptions opts;
  k::PackCache owner, other;
  owner.register_immutable(buf.data(), buf.size(), 1);
  const std::vector<double> want = product(&owner, opts, a, A, buf, p, nullptr);
  expect_same(product(&owner, opts, a, A, buf, p, nullptr), want, "owner");
  expect_same(product(&other, opts, a, A, buf, p, nullptr), want, "other cache");
  expect_same(product(nullptr, opts, a, A, buf, p, nullptr), want, "no cache");
  EXPECT_EQ(owner.stats().entries, 1u);
  EXPECT_EQ(owner.stats().hits, 1u);
  EXPECT_EQ(other.stats().entries, 0u);
  EXPECT_EQ(other.stats().misses, 0u);
  // With the kernels off (the generic path) nothing is packed, so nothing is looked up.
  std::vector<double> C(p.M * p.N, 7.0);
  EXPECT_FALSE(k::gemm_fast(a, p.M, p.N, p.K, ConstMatrix{A.data(), p.K}, ConstMatrix{buf.data(), p.ldb, p.bt},
                            C.data(), p.N, false, nullptr, 2, nullptr, nullptr, KernelOptions{false}, &owner));
  EXPECT_EQ(owner.stats().hits, 1u);
}

TEST(GemmPackCache, APlainBinary32CastIsTheConversionInThePack) {
  // A cast to binary32 (nearest even, no flush, no NaN rule) is done by the pack's own conversion (pack_to,
  // plain_binary32_cast), without a cast copy: the product equals the product of operands rounded beforehand by
  // round_to, on A and B, A and B transposed or not, on every kernel tier, for the fused fp32 accumulator (any
  // binary32 inputs) and the fp16 accumulator (inputs checked on the rounded values); operands off the binary32
  // grid, binary32 ties, values that overflow to ±inf or round to ±max, binary32 subnormals, NaNs with payloads.
  if (k::detected_isa() == k::Isa::None) GTEST_SKIP() << "no AVX2 or AVX-512";
  const RoundingPlan single(formats::fp32);
  const k::OperandCast cast{&single, Rounding::NearestEven, false};
  std::mt19937_64 rng(29);
  std::normal_distribution<double> g;
  const double fmax = static_cast<double>(std::numeric_limits<float>::max());
  const double specials[] = {0x1p-140 * 3.3, -0x1p-149 * 0.75, 0x1p-126 * (1 - 0x1p-30),  // subnormal range
                             1.0 + 0x1p-24, 1.0 + 3 * 0x1p-24, -(1.0 + 0x1p-24),           // ties to even
                             fmax + 0x1p103, fmax + 0x1p104, -fmax * (1 + 0x1p-26),       // below / at / over
                             1e39, std::bit_cast<double>(0x7FF0000000012345ULL),          // the halfway point
                             std::bit_cast<double>(0xFFF8000000000ABCULL), -0.0, 0.0,
                             std::numeric_limits<double>::infinity()};
  // wide: doubles with 53-bit significands (a few specials); narrow: fp16 values nudged off the binary32 grid by
  // less than half its quantum (the cast gives the fp16 value back, so the fp16 kernel accepts them)
  auto wide = [&](std::size_t n, bool with_specials) {
    std::vector<double> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = g(rng);
    if (with_specials)
      for (std::size_t i = 0; i < std::size(specials); ++i) v[(7 * i + 3) % n] = specials[i];
    return v;
  };
  auto narrow = [&](std::size_t n) {
    std::vector<double> v(n);
    for (std::size_t i = 0; i < n; ++i) {
      const double h = round_to(RoundingPlan(formats::fp16), Rounding::NearestEven, g(rng));
      v[i] = h + std::ldexp(h, -30);
    }
    return v;
  };
  auto rounded = [&](std::vector<double> v) {
    for (double& x : v) x = round_to(single, Rounding::NearestEven, x);
    return v;
  };
  const std::size_t M = 13, N = 37, K = 41;
  const k::Isa detected = k::detected_isa();
  for (const char* acc : {"fp32-seq", "fp16-seq"}) {
    const Accumulation a = parse_accumulation(acc);
    const bool fp16 = std::string(acc) == "fp16-seq";
    for (const bool specials_on : {false, true}) {
      if (fp16 && specials_on) continue;  // > 12 significant bits: the fp16 kernel declines them
      const std::vector<double> A = fp16 ? narrow(M * K) : wide(M * K, specials_on);
      const std::vector<double> B = fp16 ? narrow(K * N) : wide(K * N, specials_on);
      const std::vector<double> Ar = rounded(A), Br = rounded(B);
      for (const k::Isa isa : {k::Isa::Avx512, k::Isa::Avx2}) {
        if (detected < isa) continue;
        const KernelOptions opts{true, isa};
        for (const bool at : {false, true})
          for (const bool bt : {false, true}) {
            // the same values read as stored: A (M×K) or its transpose, B (K×N) or its transpose
            auto stored = [](const std::vector<double>& v, std::size_t rows, std::size_t cols, bool t) {
              if (!t) return v;
              std::vector<double> s(v.size());
              for (std::size_t r = 0; r < rows; ++r)
                for (std::size_t c = 0; c < cols; ++c) s[c * rows + r] = v[r * cols + c];
              return s;
            };
            const auto As = stored(A, M, K, at), Bs = stored(B, K, N, bt);
            const auto Ars = stored(Ar, M, K, at), Brs = stored(Br, K, N, bt);
            auto run = [&](const std::vector<double>& Av, const std::vector<double>& Bv, const k::OperandCast* c) {
              std::vector<double> C(M * N, 7.0);
              EXPECT_TRUE(k::gemm_fast(a, M, N, K, ConstMatrix{Av.data(), at ? M : K, at},
                                       ConstMatrix{Bv.data(), bt ? K : N, bt}, C.data(), N, false, nullptr, 2, c, c,
                                       opts));
              return C;
            };
            const std::string what = std::string(acc) + (specials_on ? " specials" : "") + " isa " +
                                     k::name_of(isa) + (at ? " At" : "") + (bt ? " Bt" : "");
            expect_same(run(As, Bs, &cast), run(Ars, Brs, nullptr), what.c_str());
          }
      }
    }
  }
}

}  // namespace
}  // namespace roundoff::numerics
