// Trainer building blocks: configs, schedule, loss scaler, init, AdamW, checkpoints.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <random>

#include "numerics/round.hpp"
#include "studies/data/sha256.hpp"
#include "studies/train/checkpoint.hpp"
#include "studies/train/config.hpp"
#include "studies/train/loss_scaler.hpp"
#include "studies/train/model.hpp"
#include "studies/train/optimizer.hpp"
#include "studies/train/params.hpp"

namespace roundoff::studies::train {
namespace {

TEST(TrainConfig, PresetsMatchTheProtocolTable) {
  const ModelConfig t0 = t0_config(), t1 = t1_config();
  EXPECT_EQ(t0.hidden, 176);
  EXPECT_EQ(t1.hidden, 352);
  EXPECT_EQ(t0.vocab, 256);
  EXPECT_EQ(t1.vocab, 512);
  EXPECT_EQ(swiglu_hidden(256), 704);
  EXPECT_EQ(swiglu_hidden(1024), 2816);
  // Non-embedding parameter count of T0 (STUDY_PROTOCOL §4.2: 100.7 k): 2·(4·64² + 3·64·176 + 2·64).
  const ParamLayout lay = param_layout(t0);
  const std::size_t non_emb = lay.total - lay.size_of(ParamTensor::Embedding) - lay.size_of(ParamTensor::Classifier) -
                              lay.size_of(ParamTensor::FinalNorm);
  EXPECT_EQ(non_emb, 2u * (4 * 64 * 64 + 3 * 64 * 176 + 2 * 64));
  EXPECT_NO_THROW(t0.validate());
  EXPECT_NO_THROW(t1.validate());
  ModelConfig bad = t0;
  bad.heads = 3;
  EXPECT_THROW(bad.validate(), std::invalid_argument);
  bad = t0;
  bad.vocab = 300;
  EXPECT_THROW(bad.validate(), std::invalid_argument);
  EXPECT_THROW(config_by_name("T9"), std::invalid_argument);
}

TEST(TrainConfig, ResidualRules) {
  const ResidualRule a = residual_rule(ResidualScale::InvSqrt2L, 4);
  EXPECT_DOUBLE_EQ(a.branch, 1.0 / std::sqrt(8.0));
  EXPECT_EQ(a.alpha, 1.0);
  EXPECT_FALSE(a.post_norm);
  const ResidualRule d = residual_rule(ResidualScale::DeepNorm, 4);
  EXPECT_NEAR(d.alpha, 1.682, 5e-4);      // (2·4)^¼
  EXPECT_DOUBLE_EQ(d.branch, 1 / d.alpha);
  EXPECT_NEAR(d.init_gain, 0.420, 5e-4);  // (8·4)^-¼
  EXPECT_TRUE(d.post_norm);
  EXPECT_EQ(parse_residual_scale("deepnorm"), ResidualScale::DeepNorm);
  EXPECT_THROW(parse_residual_scale("deep"), std::invalid_argument);
}

TEST(TrainSchedule, WarmupThenCosineToTenPercent) {
  Recipe r;
  r.lr = 1e-3;
  r.warmup = 10;
  EXPECT_DOUBLE_EQ(learning_rate(r, 0, 100), 1e-4);
  EXPECT_DOUBLE_EQ(learning_rate(r, 9, 100), 1e-3);
  EXPECT_DOUBLE_EQ(learning_rate(r, 10, 100), 1e-3);
  EXPECT_NEAR(learning_rate(r, 99, 100), 1e-4, 1e-18);
  // Inside the cosine: lr·(0.1 + 0.9·½(1 + cos(π·(s − warmup)/(total − 1 − warmup)))).
  EXPECT_NEAR(learning_rate(r, 54, 100), 1e-3 * (0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 44 / 89.0))), 1e-15);
  for (std::int64_t s = 11; s < 100; ++s) EXPECT_LE(learning_rate(r, s, 100), learning_rate(r, s - 1, 100));
}

TEST(LossScaler, ParsesAndPrintsCanonically) {
  EXPECT_EQ(LossScaleSpec::parse("none").canonical(), "none");
  EXPECT_EQ(LossScaleSpec::parse("static:256").canonical(), "static:256");
  EXPECT_EQ(LossScaleSpec::parse("dynamic").canonical(), "dynamic:65536,2,0.5,2000");
  EXPECT_EQ(LossScaleSpec::parse("dynamic:1024,2,0.5,100").canonical(), "dynamic:1024,2,0.5,100");
  for (const char* bad : {"", "static", "static:-1", "static:x", "dynamic:1,2", "dynamic:1,0.5,0.5,10",
                          "dynamic:1,2,2,10", "dynamic:1,2,0.5,1.5", "none:3", "gradscaler"})
    EXPECT_THROW(LossScaleSpec::parse(bad), std::invalid_argument) << bad;
  const auto spec = LossScaleSpec::parse("dynamic:1024,2,0.5,100");
  EXPECT_EQ(LossScaleSpec::parse(spec.canonical()).canonical(), spec.canonical());
}

TEST(LossScaler, GradScalerSemantics) {
  LossScaler s(LossScaleSpec::parse("dynamic:1024,2,0.5,3"));
  EXPECT_EQ(s.scale(), 1024);
  EXPECT_TRUE(s.skips(false));
  EXPECT_FALSE(s.skips(true));
  auto c = s.update(0, false);  // overflow: back off, reset the clean count
  ASSERT_TRUE(c);
  EXPECT_EQ(c->to, 512);
  EXPECT_FALSE(s.update(1, true));
  EXPECT_FALSE(s.update(2, true));
  c = s.update(3, true);  // third clean step in a row: grow
  ASSERT_TRUE(c);
  EXPECT_EQ(c->to, 1024);
  EXPECT_EQ(s.clean_steps(), 0);
  LossScaler st(LossScaleSpec::parse("static:256"));
  EXPECT_TRUE(st.skips(false));
  EXPECT_FALSE(st.update(0, false));
  EXPECT_EQ(st.scale(), 256);
  LossScaler none(LossScaleSpec::parse("none"));
  EXPECT_EQ(none.scale(), 1);
  EXPECT_FALSE(none.skips(false));
}

TEST(TrainInit, SeededAndScaled) {
  const ModelConfig c = t0_config();
  Recipe r;
  const auto rule = residual_rule(ResidualScale::None, c.layers);
  const auto a = init_params(c, r, rule, 7), b = init_params(c, r, rule, 7), other = init_params(c, r, rule, 8);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, other);
  const ParamLayout lay = param_layout(c);
  auto rms = [&](const std::vector<double>& w, ParamTensor t) {
    double s = 0;
    for (std::size_t i = 0; i < lay.size_of(t); ++i) s += w[lay.offset_of(t) + i] * w[lay.offset_of(t) + i];
    return std::sqrt(s / static_cast<double>(lay.size_of(t)));
  };
  // 8192 draws of N(0, 0.02²): the sample rms is within 5 % with overwhelming probability (sd ≈ 0.8 %).
  EXPECT_NEAR(rms(a, ParamTensor::Wq), 0.02, 0.001);
  EXPECT_EQ(a[lay.offset_of(ParamTensor::AttnNorm)], 1.0);
  for (const double w : a) EXPECT_EQ(w, static_cast<double>(static_cast<float>(w)));
  r.init = InitRule::Gpt2Scaled;
  const auto g = init_params(c, r, rule, 7);
  // Same draws, scaled by 1/√(2L) on Wo and W2 only.
  const std::size_t wo = lay.offset_of(ParamTensor::Wo);
  EXPECT_EQ(g[wo], static_cast<double>(static_cast<float>(0.02 / 2.0 * (a[wo] / 0.02))));
  EXPECT_EQ(g[lay.offset_of(ParamTensor::Wq)], a[lay.offset_of(ParamTensor::Wq)]);
}

TEST(TrainOptimizer, Fp32AdamWEqualsPlainFloatCode) {
  const ModelConfig c = t0_config();
  const ParamLayout lay = param_layout(c);
  Recipe r;
  std::mt19937_64 rng(3);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> wf(lay.total), mf(lay.total, 0.f), vf(lay.total, 0.f), gf(lay.total);
  for (auto& x : wf) x = 0.02f * nd(rng);
  std::vector<double> w(wf.begin(), wf.end()), m(lay.total, 0.0), v(lay.total, 0.0), g(lay.total);
  for (int t = 1; t <= 3; ++t) {
    for (std::size_t i = 0; i < lay.total; ++i) {
      gf[i] = 1e-3f * nd(rng);
      g[i] = gf[i];
    }
    const double lr = 1e-3, coef = 0.75;
    adamw_update(w, m, v, g, lay, r, lr, t, coef, AdamFormats{});
    const float b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, lrf = static_cast<float>(lr), cf = static_cast<float>(coef);
    const float bc1 = static_cast<float>(1.0 - std::pow(0.9, t)), bc2 = static_cast<float>(1.0 - std::pow(0.95, t));
    for (const ParamTensor tensor : kAllParamTensors)
      for (std::size_t k = lay.offset_of(tensor); k < lay.offset_of(tensor) + lay.size_of(tensor); ++k) {
        const float gg = gf[k] * cf;
        const float wd = is_decayed(tensor) ? 0.1f : 0.0f;
        mf[k] = b1 * mf[k] + static_cast<float>(1.0 - 0.9) * gg;
        vf[k] = b2 * vf[k] + static_cast<float>(1.0 - 0.95) * (gg * gg);
        const float mh = mf[k] / bc1, vh = vf[k] / bc2;
        wf[k] = wf[k] - lrf * (mh / (std::sqrt(vh) + eps) + wd * wf[k]);
      }
    for (std::size_t i = 0; i < lay.total; ++i) {
      ASSERT_EQ(w[i], static_cast<double>(wf[i])) << "step " << t << " element " << i;
      ASSERT_EQ(m[i], static_cast<double>(mf[i]));
      ASSERT_EQ(v[i], static_cast<double>(vf[i]));
    }
  }
}

/// The fp32 roundings of the update (accumulate_gradients, unscale_gradients in fp32) go through the IEEE
/// conversion to binary32; they must equal numerics::round_to(fp32, nearest-even) bit for bit: random
/// binary64 values over the whole exponent range, the overflow threshold (max + half an ulp, and one binary64
/// ulp either side), the subnormal and underflow boundaries, ±0, ±inf and NaN.
TEST(TrainOptimizer, Fp32RoundingsEqualRoundTo) {
  const numerics::RoundingPlan fp32(numerics::formats::fp32);
  std::vector<double> x;
  const double max = 0x1.fffffep127, half_ulp = 0x1p103;
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  for (const double v : {max + half_ulp, max, 0x1p-149, 0x1p-150, 0x1.8p-150, 0x1p-126, 0x1.fffffcp-127, 0.0, 1.0,
                         0x1.000001p0, 0x1.0000018p0, inf, nan}) {
    for (const double w : {v, std::nextafter(v, 0.0), std::nextafter(v, inf)}) {
      x.push_back(w);
      x.push_back(-w);
    }
  }
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int> e(-170, 140);
  std::uniform_real_distribution<double> m(1.0, 2.0);
  for (int i = 0; i < 200000; ++i) x.push_back((i % 2 ? -1 : 1) * std::ldexp(m(rng), e(rng)));
  auto same = [](double a, double b) {
    return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b) || (std::isnan(a) && std::isnan(b));
  };
  std::vector<double> total(x.size());
  accumulate_gradients(total, x, true);
  std::vector<double> g = x;
  unscale_gradients(g, 1.0, 1, numerics::formats::fp32);
  std::vector<double> zero(x.size(), 0.0), sum = total;
  accumulate_gradients(sum, zero, false);  // fl32(fl32(x) + 0)
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double want = numerics::round_to(fp32, numerics::Rounding::NearestEven, x[i]);
    ASSERT_TRUE(same(total[i], want)) << std::hexfloat << x[i] << " -> " << total[i] << ", round_to " << want;
    ASSERT_TRUE(same(g[i], want)) << std::hexfloat << x[i] << " -> " << g[i] << ", round_to " << want;
    ASSERT_TRUE(same(sum[i], numerics::round_to(fp32, numerics::Rounding::NearestEven, want + 0.0)))
        << std::hexfloat << x[i];
  }
}

TEST(TrainOptimizer, UnscaleClipAndNorm) {
  std::vector<double> g{3.0 * 1024, 4.0 * 1024};
  EXPECT_TRUE(unscale_gradients(g, 1024));
  EXPECT_EQ(g[0], 3.0);
  EXPECT_EQ(global_norm(g), 5.0);
  EXPECT_EQ(clip_coefficient(5.0, 1.0), static_cast<double>(1.0f / static_cast<float>(5.0 + 1e-6)));
  EXPECT_EQ(clip_coefficient(0.5, 1.0), 1.0);
  EXPECT_EQ(clip_coefficient(50.0, 0.0), 1.0);
  std::vector<double> bad{1.0, INFINITY};
  EXPECT_FALSE(unscale_gradients(bad, 2.0));
  std::vector<double> over{1e39};  // finite in binary64, overflows fp32 after unscaling by 1
  EXPECT_FALSE(unscale_gradients(over, 1.0));
}

/// unscale_gradients on binary32 stored gradients at scale 1 and one micro-step (the fp32 presets without a loss
/// scale) returns early when every gradient is finite (fl_f(w) = w for a binary32 w, f holding binary32); the
/// results must be those of the binary64 version on the widened values in every case: finite values over the whole
/// binary32 range (subnormals, ±0, the largest), then the same with +inf, −inf, a NaN with a payload, for fp32 and
/// for a wider update format (fp64), and a scale of 1 with two micro-steps (no early return: 1/2 is applied).
TEST(TrainOptimizer, UnscaleAtScaleOneOfBinary32GradientsEqualsTheBinary64Version) {
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<int> e(-149, 127);
  std::uniform_real_distribution<double> m(1.0, 2.0);
  std::vector<double> base;
  for (int i = 0; i < 5000; ++i) base.push_back(static_cast<double>(static_cast<float>((i % 2 ? -1 : 1) * std::ldexp(m(rng), e(rng)))));
  for (const double v : {0.0, -0.0, 0x1p-149, -0x1p-149, 0x1.fffffcp-127, 0x1.fffffep127, -0x1.fffffep127}) base.push_back(v);
  const double inf = std::numeric_limits<double>::infinity();
  const double payload_nan = std::bit_cast<double>(std::uint64_t{0x7ff8000000012345});
  auto same = [](double a, double b) {
    return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b) || (std::isnan(a) && std::isnan(b));
  };
  for (const numerics::Format& f : {numerics::formats::fp32, numerics::formats::fp64})
    for (const int accum : {1, 2})
      for (int special = 0; special < 4; ++special) {
        std::vector<double> x = base;
        if (special == 1) x[1234] = inf;
        if (special == 2) x[4321] = -inf;
        if (special == 3) x[2500] = payload_nan;
        ParamStore store(StorageKind::Binary32, x.size());
        store.write(0, x);
        std::vector<double> want = x;
        const bool want_finite = unscale_gradients(std::span<double>(want), 1.0, accum, f);
        const bool finite = unscale_gradients(store, 1.0, accum, f);
        const std::string what = std::string(f == numerics::formats::fp32 ? "fp32" : "fp64") + " accum " +
                                 std::to_string(accum) + " special " + std::to_string(special);
        EXPECT_EQ(finite, want_finite) << what;
        EXPECT_EQ(finite, special == 0) << what;
        const std::vector<double> got = store.to_binary64();
        for (std::size_t i = 0; i < x.size(); ++i)
          ASSERT_TRUE(same(got[i], static_cast<double>(static_cast<float>(want[i]))))
              << what << " element " << i << std::hexfloat << ": " << got[i] << " against " << want[i];
        if (accum == 1 && special == 0) {
          for (std::size_t i = 0; i < x.size(); ++i) ASSERT_TRUE(same(got[i], x[i])) << what << " element " << i;
        }
      }
}

/// n binary32 values of alternating sign over the whole binary32 range (exponents −149 … 127, subnormals included),
/// widened: gradients for the unscaling and norm tests.
std::vector<double> random_binary32_gradients(std::mt19937_64& rng, int n) {
  std::uniform_int_distribution<int> e(-149, 127);
  std::uniform_real_distribution<double> m(1.0, 2.0);
  std::vector<double> v;
  for (int i = 0; i < n; ++i)
    v.push_back(static_cast<double>(static_cast<float>((i % 2 ? -1 : 1) * std::ldexp(m(rng), e(rng)))));
  return v;
}

/// Unscaling binary32 gradients by a loss scale (one micro-step) gives the binary64 version's values, narrowed: at
/// powers of two whose inverse is a binary32 value (the hardware binary32 product path, subnormal results and
/// overflow included), at one whose inverse is not (2^160), and at a scale that is not a power of two; with ±inf
/// or a NaN in one chunk of 2^15 among several.
TEST(TrainOptimizer, UnscaleByALossScaleOfBinary32GradientsEqualsTheBinary64Version) {
  std::mt19937_64 rng(15);
  std::vector<double> base = random_binary32_gradients(rng, 70000);
  for (const double v : {0.0, -0.0, 0x1p-149, -0x1p-149, 0x1.fffffcp-127, 0x1.fffffep127, -0x1.fffffep127})
    base.push_back(v);
  const double inf = std::numeric_limits<double>::infinity();
  // NaNs with a payload binary32 keeps, quiet and signalling
  const auto quiet = static_cast<double>(std::bit_cast<float>(std::uint32_t{0x7fc12345}));
  const auto signalling = static_cast<double>(std::bit_cast<float>(std::uint32_t{0xff812345}));
  for (const double scale : {0x1p-3, 0x1p10, 0x1p24, 0x1p100, 0x1p140, 0x1p160, 3.0})
    for (int special = 0; special < 5; ++special) {
      std::vector<double> x = base;
      if (special == 1) x[40000] = inf;
      if (special == 2) x[1234] = -inf;
      if (special == 3) x[66000] = quiet;
      if (special == 4) x[7] = signalling;
      ParamStore store(StorageKind::Binary32, x.size());
      store.write(0, x);
      std::vector<double> want = x;
      const bool want_finite = unscale_gradients(std::span<double>(want), scale, 1, numerics::formats::fp32);
      const bool finite = unscale_gradients(store, scale, 1, numerics::formats::fp32);
      const std::string what = "scale " + std::to_string(std::log2(scale)) + " special " + std::to_string(special);
      EXPECT_EQ(finite, want_finite) << what;
      if (special != 0) {
        EXPECT_FALSE(finite) << what;
      }
      const std::vector<double> got = store.to_binary64();
      for (std::size_t i = 0; i < x.size(); ++i) {
        const double w = static_cast<double>(static_cast<float>(want[i]));
        ASSERT_EQ(std::bit_cast<std::uint64_t>(got[i]), std::bit_cast<std::uint64_t>(w))  // a NaN's bits too
            << what << " element " << i << std::hexfloat << ": " << got[i] << " against " << w;
      }
    }
}

/// The fused finiteness check of the trainer (unscale_with_norm): where it applies (one micro-step, scale 1, an
/// update format holding binary32, binary32 gradients) its finiteness is unscale_gradients' answer and its norm has
/// the bits of global_norm on the widened values (the sequential binary64 sum), over binary32 gradients up to the
/// largest (whose squares are far beyond binary32) and with +inf, −inf or a NaN among them, in stores longer than
/// one chunk of the parallel sum; elsewhere it declines.
TEST(TrainOptimizer, FusedFinitenessCheckEqualsUnscaleAndNorm) {
  std::mt19937_64 rng(9);
  std::vector<double> base = random_binary32_gradients(rng, 70000);
  for (int i = 0; i < 64; ++i) base.push_back(i % 2 ? 0x1.fffffep127 : -0x1.fffffep127);
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  for (const numerics::Format& f : {numerics::formats::fp32, numerics::formats::fp64})
    for (int special = 0; special < 4; ++special) {
      std::vector<double> x = base;
      if (special == 1) x[17] = inf;
      if (special == 2) x[30001] = -inf;
      if (special == 3) x[62022] = nan;
      ParamStore store(StorageKind::Binary32, x.size());
      store.write(0, x);
      const std::optional<GradientNorm> fused = unscale_with_norm(store, 1.0, 1, f);
      ASSERT_TRUE(fused.has_value());
      ParamStore copy(StorageKind::Binary32, x.size());
      copy.write(0, x);
      EXPECT_EQ(fused->finite, unscale_gradients(copy, 1.0, 1, f)) << special;
      EXPECT_EQ(fused->finite, special == 0) << special;
      const double want = global_norm(std::span<const double>(x), f);
      for (const double got : {fused->norm, global_norm(store, f)})
        EXPECT_TRUE(std::bit_cast<std::uint64_t>(got) == std::bit_cast<std::uint64_t>(want) ||
                    (std::isnan(got) && std::isnan(want)))
            << special << std::hexfloat << " " << got << " against " << want;
    }
  ParamStore store(StorageKind::Binary32, 4), wide(StorageKind::Binary64, 4);
  EXPECT_FALSE(unscale_with_norm(store, 3.0, 1, numerics::formats::fp32).has_value());
  EXPECT_FALSE(unscale_with_norm(store, 2.0, 1, numerics::formats::fp64).has_value());
  EXPECT_FALSE(unscale_with_norm(store, 1.0, 2, numerics::formats::fp32).has_value());
  EXPECT_FALSE(unscale_with_norm(store, 1.0, 1, numerics::formats::bf16).has_value());
  EXPECT_FALSE(unscale_with_norm(wide, 1.0, 1, numerics::formats::fp32).has_value());
}

/// The fused unscaling of the trainer under a power-of-two loss scale (unscale_with_norm: the binary32 product by
/// S⁻¹ with the parallel sum's squares taken chunk by chunk): the gradients it leaves have the bits unscale_gradients
/// leaves (a NaN's too), its finiteness is unscale_gradients' answer and its norm has the bits of global_norm of the
/// unscaled gradients, over binary32 gradients up to the largest, with +inf, −inf or a NaN among them, for scales
/// that shrink them (256, 2^20: some underflow into subnormals or to zero) and one that grows them (2^−3: the largest
/// overflow), in stores longer than one chunk.
TEST(TrainOptimizer, FusedUnscalingUnderAPowerOfTwoScaleEqualsUnscaleAndNorm) {
  std::mt19937_64 rng(17);
  std::vector<double> base = random_binary32_gradients(rng, 70000);
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const numerics::Format& fp32 = numerics::formats::fp32;
  for (const double scale : {256.0, 0x1p20, 0x1p-3})
    for (int special = 0; special < 5; ++special) {
      std::vector<double> x = base;
      if (special == 1) x[17] = inf;
      if (special == 2) x[30001] = -inf;
      if (special == 3) x[62022] = nan;
      if (special == 4) x.resize(40000);  // one whole chunk and a part
      ParamStore store(StorageKind::Binary32, x.size()), copy(StorageKind::Binary32, x.size());
      store.write(0, x);
      copy.write(0, x);
      const std::optional<GradientNorm> fused = unscale_with_norm(store, scale, 1, fp32);
      ASSERT_TRUE(fused.has_value()) << scale;
      const bool want_finite = unscale_gradients(copy, scale, 1, fp32);
      const std::string what = std::to_string(scale) + " case " + std::to_string(special);
      EXPECT_EQ(fused->finite, want_finite) << what;
      if (scale > 1) {
        EXPECT_EQ(fused->finite, special == 0 || special == 4) << what;
      }
      const std::span<const float> got = std::as_const(store).binary32(), want = std::as_const(copy).binary32();
      for (std::size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(want[i])) << what << " at " << i;
      const double norm = global_norm(copy, fp32);
      EXPECT_TRUE(std::bit_cast<std::uint64_t>(fused->norm) == std::bit_cast<std::uint64_t>(norm) ||
                  (std::isnan(fused->norm) && std::isnan(norm)))
          << what << std::hexfloat << " " << fused->norm << " against " << norm;
    }
}

/// global_norm of binary32 gradients reads them in parallel, in another order than its sequential binary64 sum, and
/// keeps that sum's bits: here the order decides the binary32 norm. The gradients are 1, a g1 whose square puts the
/// sequential sum just below the square of the midpoint 1 + 2^−24 between 1 and 1 + 2^−23, and 2^14 values 2^−27
/// whose squares (2^−54, under half an ulp of 1) the sequential sum drops one by one while any sum of them first
/// keeps (2^−40 in all): the sequential norm is 1, the exact one 1 + 2^−23. Random gradients over the whole binary32
/// range, in stores of many chunks, give the sequential sum's bits too, for fp32 and binary64 f.
TEST(TrainOptimizer, GlobalNormOfBinary32GradientsHasTheSequentialSumsBits) {
  const double m = 1 + 0x1p-24, tiny = 0x1p-27;
  const auto to_fp32 = [](double v) { return static_cast<double>(static_cast<float>(v)); };
  float g1 = 0;
  for (float c = std::nextafter(static_cast<float>(std::sqrt(0x1p-23)), 0.0f) - 64 * 0x1p-35f; g1 == 0;
       c = std::nextafter(c, 1.0f)) {
    ASSERT_LT(c, 0x1p-11f) << "no g1 found";
    const double d = 1.0 + static_cast<double>(c) * static_cast<double>(c);  // the sequential sum after two terms
    if (d < m * m && to_fp32(std::sqrt(d)) == 1.0 && to_fp32(std::sqrt(d + 0x1p-44)) == 1 + 0x1p-23) g1 = c;
  }
  std::vector<double> x{1.0, static_cast<double>(g1)};
  x.resize(2 + (std::size_t{1} << 14), tiny);
  const double sequential = global_norm(std::span<const double>(x), numerics::formats::fp32);
  ASSERT_EQ(sequential, 1.0);  // the tiny squares dropped
  double exact = 1.0 + static_cast<double>(g1) * static_cast<double>(g1);
  exact += 0x1p-40;  // their sum, exact here (ulp 2^−52)
  ASSERT_EQ(to_fp32(std::sqrt(exact)), 1 + 0x1p-23);  // a sum that keeps them rounds the other way
  ParamStore store(StorageKind::Binary32, x.size());
  store.write(0, x);
  EXPECT_EQ(global_norm(store, numerics::formats::fp32), sequential);
  const std::optional<GradientNorm> fused = unscale_with_norm(store, 1.0, 1, numerics::formats::fp32);
  ASSERT_TRUE(fused.has_value());
  EXPECT_EQ(fused->norm, sequential);

  std::mt19937_64 rng(31);
  std::uniform_real_distribution<double> mant(1.0, 2.0);
  for (int trial = 0; trial < 6; ++trial) {
    std::uniform_int_distribution<int> e(trial < 3 ? -149 : -30, trial < 3 ? 127 : 30);
    std::vector<double> v(200000 + static_cast<std::size_t>(trial) * 7919);
    for (double& y : v) y = static_cast<double>(static_cast<float>(std::ldexp(mant(rng), e(rng))));
    ParamStore s(StorageKind::Binary32, v.size());
    s.write(0, v);
    for (const numerics::Format& f : {numerics::formats::fp32, numerics::formats::fp64}) {
      const double want = global_norm(std::span<const double>(v), f), got = global_norm(s, f);
      EXPECT_EQ(std::bit_cast<std::uint64_t>(got), std::bit_cast<std::uint64_t>(want))
          << trial << std::hexfloat << " " << got << " against " << want;
    }
  }
}

TEST(TrainCheckpoint, RoundTripsAndRefusesCorruption) {
  const auto dir = std::filesystem::temp_directory_path() / "roundoff_ckpt_test";
  std::filesystem::remove_all(dir);
  Checkpoint ck;
  ck.meta = {{"step", 12}, {"x", 0.1}};
  ck.master = {1.0, -2.5, 0x1p-30};
  ck.m = ParamStore(std::vector<double>{0.0, 1e-8, 3.0});
  ck.v = ParamStore(std::vector<double>{5.0, 6.0, 7.0});
  const auto path = dir / "checkpoint.bin";
  save_checkpoint(path, ck);
  const Checkpoint back = load_checkpoint(path);
  EXPECT_EQ(back.meta, ck.meta);
  EXPECT_EQ(back.master, ck.master);
  EXPECT_EQ(back.m.to_binary64(), ck.m.to_binary64());
  EXPECT_EQ(back.v.to_binary64(), ck.v.to_binary64());
  // 1e-8 is no binary32 value: a run whose moments are binary32 refuses this file, naming the value.
  try {
    load_checkpoint(path, StorageKind::Binary32);
    FAIL() << "a binary64 moment was narrowed into binary32 storage";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("AdamW m"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("element 1"), std::string::npos) << e.what();
  }
  // Flip one payload byte: refused, with a message naming the file and the checksum.
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  bytes[bytes.size() - 3] = static_cast<char>(bytes[bytes.size() - 3] ^ 0x10);
  {
    std::ofstream out(path, std::ios::binary);
    out << bytes;
  }
  try {
    load_checkpoint(path);
    FAIL() << "a corrupt checkpoint was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("corrupt"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("sha256"), std::string::npos) << e.what();
  }
  // Truncated file.
  {
    std::ofstream out(path, std::ios::binary);
    out << bytes.substr(0, 40);
  }
  EXPECT_THROW(load_checkpoint(path), std::runtime_error);
  std::filesystem::remove_all(dir);
}

/// The streamed writer produces exactly the documented layout (checkpoint.hpp), byte for byte, with arrays
/// longer than the writer's and reader's 8 MiB pieces and of odd lengths: the layout of the whole-buffer writer
/// it replaced, so checkpoints written before it still load, and it reads its own files back exactly.
TEST(TrainCheckpoint, StreamedFileIsTheDocumentedLayout) {
  const auto dir = std::filesystem::temp_directory_path() / "roundoff_ckpt_layout_test";
  std::filesystem::remove_all(dir);
  Checkpoint ck;
  ck.meta = {{"step", 3}, {"name", "layout"}};
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> m, v;
  for (auto* a : {&ck.master, &m, &v}) {
    a->resize((std::size_t{1} << 20) + 3);  // 8 MiB + 24 bytes
    for (double& x : *a) x = u(rng);
  }
  ck.m = ParamStore(m);
  ck.v = ParamStore(v);
  const auto path = dir / "checkpoint.bin";
  save_checkpoint(path, ck);
  std::string payload;
  auto put_u64 = [&](std::uint64_t x) { payload.append(reinterpret_cast<const char*>(&x), sizeof x); };
  const std::string meta = ck.meta.dump();
  put_u64(meta.size());
  payload += meta;
  for (const auto* a : {&ck.master, &m, &v}) {
    put_u64(a->size());
    payload.append(reinterpret_cast<const char*>(a->data()), a->size() * sizeof(double));
  }
  const std::string expected = "roundoff-checkpoint 1\nsha256 " + data::sha256_hex(payload) + "\n" + payload;
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  EXPECT_TRUE(bytes == expected) << "file of " << bytes.size() << " bytes differs from the layout (" << expected.size()
                                 << " bytes)";
  const Checkpoint back = load_checkpoint(path);
  EXPECT_EQ(back.meta, ck.meta);
  EXPECT_TRUE(back.master == ck.master && back.m.to_binary64() == m && back.v.to_binary64() == v);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1) << "the temporary file is left behind";
  std::filesystem::remove_all(dir);
}

/// Binary32 moments are written as the binary64 values they are, so the file is byte for byte the one a binary64
/// store of the same values writes (checkpoints of either storage load in either), and they read back exactly,
/// over arrays longer than the 8 MiB pieces.
TEST(TrainCheckpoint, Binary32MomentsWriteTheBinary64File) {
  const auto dir = std::filesystem::temp_directory_path() / "roundoff_ckpt_b32_test";
  std::filesystem::remove_all(dir);
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  const std::size_t n = (std::size_t{1} << 20) + 5;
  std::vector<double> master(n), m(n), v(n);
  for (auto* a : {&m, &v})
    for (double& x : *a) x = static_cast<double>(static_cast<float>(u(rng)));  // binary32 values
  for (double& x : master) x = u(rng);
  m[3] = -0.0;
  m[4] = 0x1p-149;  // the least binary32 subnormal
  v[5] = std::numeric_limits<double>::infinity();
  Checkpoint wide, narrow;
  wide.meta = narrow.meta = {{"step", 1}};
  wide.master = narrow.master = master;
  wide.m = ParamStore(m);
  wide.v = ParamStore(v);
  narrow.m = ParamStore(StorageKind::Binary32, n);
  narrow.v = ParamStore(StorageKind::Binary32, n);
  narrow.m.write(0, m);
  narrow.v.write(0, v);
  ASSERT_EQ(narrow.m.bytes(), n * sizeof(float));
  const auto a = dir / "a" / "checkpoint.bin", b = dir / "b" / "checkpoint.bin";
  save_checkpoint(a, wide);
  save_checkpoint(b, narrow);
  const auto bytes = [](const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_TRUE(bytes(a) == bytes(b)) << "binary32 moments wrote another file than binary64 ones";
  for (const auto& path : {a, b}) {
    const Checkpoint back = load_checkpoint(path, StorageKind::Binary32);
    EXPECT_EQ(back.m.kind(), StorageKind::Binary32);
    const std::vector<double> bm = back.m.to_binary64(), bv = back.v.to_binary64();
    EXPECT_EQ(std::memcmp(bm.data(), m.data(), n * sizeof(double)), 0);
    EXPECT_EQ(std::memcmp(bv.data(), v.data(), n * sizeof(double)), 0);
    EXPECT_EQ(back.master, master);
  }
  std::filesystem::remove_all(dir);
}

/// The storage choice: binary32 for every format whose values are all binary32 values, binary64 for any wider one.
TEST(ParamStorage, KindFollowsTheFormat) {
  namespace f = numerics::formats;
  for (const numerics::Format& fmt : {f::fp32, f::tf32, f::bf16, f::fp16, f::e4m3, f::e5m2, f::e3m2, f::e2m3, f::e2m1})
    EXPECT_EQ(storage_kind_for(fmt), StorageKind::Binary32) << fmt.precision << " " << fmt.emin << " " << fmt.emax;
  EXPECT_EQ(storage_kind_for(f::fp64), StorageKind::Binary64);
  EXPECT_EQ(storage_kind_for(numerics::Format{25, -126, 127}), StorageKind::Binary64);  // one more bit
  EXPECT_EQ(storage_kind_for(numerics::Format{24, -126, 128}), StorageKind::Binary64);  // one more binade up
  EXPECT_EQ(storage_kind_for(numerics::Format{24, -127, 127}), StorageKind::Binary64);  // subnormal 2^-150
  EXPECT_EQ(storage_kind_for(numerics::Format{24, -127, 127, false}), StorageKind::Binary64);  // ulp 2^-150
  EXPECT_EQ(storage_kind_for(numerics::Format{8, -141, 127}), StorageKind::Binary32);   // least value 2^-148
  EXPECT_EQ(storage_kind_for(numerics::Format{8, -142, 127}), StorageKind::Binary32);   // 2^-149
  EXPECT_EQ(storage_kind_for(numerics::Format{8, -143, 127}), StorageKind::Binary64);   // 2^-150
  const std::array mixed{f::fp16, f::fp64};
  EXPECT_EQ(storage_kind_for(mixed), StorageKind::Binary64);
  // A value written and read back is the same binary64 value; one binary32 cannot hold is refused.
  ParamStore s(StorageKind::Binary32, 4);
  const std::array<double, 4> vals{0x1.fffffep127, -0x1p-149, -0.0, 0.1f};
  s.write(0, vals);
  for (std::size_t i = 0; i < vals.size(); ++i)
    EXPECT_EQ(std::bit_cast<std::uint64_t>(s.at(i)), std::bit_cast<std::uint64_t>(vals[i])) << i;
  EXPECT_THROW(s.write(0, std::array{0.1}), std::invalid_argument);
  EXPECT_THROW(s.write(0, std::array{0x1p-150}), std::invalid_argument);
  EXPECT_THROW(s.write(0, std::array{0x1p128}), std::invalid_argument);
  EXPECT_THROW((void)s.binary64(), std::logic_error);
}

/// The presets choose the moments' storage from their AdamM / AdamV roles: binary32 for every preset but fp64
/// (whose moments are binary64 values), and binary64 for a policy whose moments are set wider than binary32.
TEST(ParamStorage, PresetsChooseTheMomentsStorage) {
  const ModelConfig c = config_by_name("T0");
  for (const std::string& name : ops::Policy::preset_names()) {
    const Transformer model(c, ResidualScale::None, ops::Policy::preset(name), 1);
    const auto& p = model.policy();
    const bool wide = storage_kind_for(p.storage_for(ops::TensorRole::AdamM)) == StorageKind::Binary64 ||
                      storage_kind_for(p.storage_for(ops::TensorRole::AdamV)) == StorageKind::Binary64;
    EXPECT_EQ(model.moments_storage(), wide ? StorageKind::Binary64 : StorageKind::Binary32) << name;
    if (name == "fp64") {
      EXPECT_EQ(model.moments_storage(), StorageKind::Binary64);
    }
    if (name == "fp32" || name == "ane-fp16" || name == "ane-guide" || name == "pure-bf16") {
      EXPECT_EQ(model.moments_storage(), StorageKind::Binary32) << name;
    }
  }
  // One moment wider than binary32 makes both binary64; narrower formats keep binary32.
  for (const char* spec : {"fp32,adam-v=fp64", "ane-fp16,adam-m=fp64", "fp32,adam-m=p25:emin-126:emax127", "fp32,adam-m=p24:emin-126:emax128"}) {
    const Transformer model(c, ResidualScale::None, ops::Policy::parse(spec), 1);
    EXPECT_EQ(model.moments_storage(), StorageKind::Binary64) << spec;
  }
  for (const char* spec : {"fp32,adam-m=bf16,adam-v=fp16", "fp64,adam-m=fp32,adam-v=tf32"}) {
    const Transformer model(c, ResidualScale::None, ops::Policy::parse(spec), 1);
    EXPECT_EQ(model.moments_storage(), StorageKind::Binary32) << spec;
  }
}

/// A checkpoint of another format version is refused with a message naming its version and the one read.
TEST(TrainCheckpoint, OtherFormatVersionIsRefusedByName) {
  const auto dir = std::filesystem::temp_directory_path() / "roundoff_ckpt_version_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto path = dir / "checkpoint.bin";
  {
    std::ofstream out(path, std::ios::binary);
    out << "roundoff-checkpoint 2\nsha256 " << std::string(64, '0') << "\n" << std::string(40, '\0');
  }
  try {
    load_checkpoint(path);
    FAIL() << "a version-2 checkpoint was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("format version 2; this build reads version 1"), std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace roundoff::studies::train
