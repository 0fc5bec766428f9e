// Policy: preset layouts, canonical text round trip (every preset, ~1000 random specs), one-line errors.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <string>

#include "ops/policy.hpp"

namespace roundoff::ops {
namespace {

using numerics::Rounding;
namespace fmts = numerics::formats;

TEST(OpKind, NamesAreUniqueAndRoundTrip) {
  for (OpKind k : kAllOps) {
    ASSERT_TRUE(find_op(name_of(k)).has_value());
    EXPECT_EQ(*find_op(name_of(k)), k);
  }
  for (Pass p : kAllPasses) EXPECT_EQ(*find_pass(name_of(p)), p);
  for (TensorRole r : kAllRoles) EXPECT_EQ(*find_role(name_of(r)), r);
  EXPECT_FALSE(find_op("softmx").has_value());
}

// The presets place groups, never single ops (ops/policy.cpp): two ops of one OpGroup have the same entries,
// pass by pass, in every preset. An op added to ROUNDOFF_FOR_EACH_OP in an existing group (GELU in
// FfnActivation) thereby gets its group's placement with no edit in policy.cpp; a preset that special-cased one
// op of a group would fail here.
TEST(PolicyGroups, OpsOfOneGroupHaveTheSameEntriesInEveryPreset) {
  for (const std::string& name : Policy::preset_names()) {
    const Policy p = Policy::preset(name);
    for (OpKind a : kAllOps)
      for (OpKind b : kAllOps) {
        if (index_of(b) <= index_of(a) || group_of(a) != group_of(b)) continue;
        for (Pass pass : kAllPasses)
          EXPECT_EQ(p.at(a, pass), p.at(b, pass))
              << name << ": " << name_of(a) << " and " << name_of(b) << " share a group but differ in " << name_of(pass);
      }
  }
}

// The FFN activation group is placed where SiLU is in the layouts that tell it apart from fp32: on the ANE
// (fwd, bwd-data) in ane-fp16 and stored in the half format under amp. Every op of the group, GELU included.
TEST(PolicyGroups, FfnActivationsRunWhereSiluRuns) {
  const Policy ane = Policy::preset("ane-fp16"), amp = Policy::preset("amp-bf16");
  for (OpKind k : kAllOps) {
    if (group_of(k) != OpGroup::FfnActivation) continue;
    EXPECT_EQ(ane.at(k, Pass::Forward).storage, fmts::fp16) << name_of(k);
    EXPECT_EQ(ane.at(k, Pass::BackwardData).storage, fmts::fp16) << name_of(k);
    EXPECT_EQ(ane.at(k, Pass::BackwardWeight).storage, fmts::fp32) << name_of(k);
    EXPECT_EQ(amp.at(k, Pass::Forward).storage, fmts::bf16) << name_of(k);
    EXPECT_EQ(amp.at(k, Pass::Forward).compute, fmts::fp32) << name_of(k);
  }
  EXPECT_EQ(group_of(OpKind::Gelu), OpGroup::FfnActivation);
}

TEST(Policy, PresetsRoundTripToTheirName) {
  for (const std::string& name : Policy::preset_names()) {
    const Policy p = Policy::preset(name);
    EXPECT_EQ(p.canonical(), name);
    EXPECT_EQ(Policy::parse(p.canonical()), p) << name;
  }
}

TEST(Policy, AneFp16Layout) {
  const Policy p = Policy::preset("ane-fp16");
  const OpPrecision f16 = uniform(fmts::fp16);
  const OpPrecision f32 = uniform(fmts::fp32);
  EXPECT_EQ(p.at(OpKind::Matmul, Pass::Forward), f16);
  EXPECT_EQ(p.at(OpKind::Matmul, Pass::BackwardData), f16);
  EXPECT_EQ(p.at(OpKind::Matmul, Pass::BackwardWeight), f32);
  EXPECT_EQ(p.at(OpKind::Softmax, Pass::Forward), f16);
  EXPECT_EQ(p.at(OpKind::Softmax, Pass::BackwardData), f16);
  EXPECT_EQ(p.at(OpKind::ResidualFfn, Pass::Forward), f16);
  EXPECT_EQ(p.at(OpKind::ResidualAttn, Pass::Forward), f32);
  EXPECT_EQ(p.at(OpKind::RmsNorm, Pass::Forward), f32);
  EXPECT_EQ(p.at(OpKind::Classifier, Pass::Forward), f32);
  EXPECT_EQ(p.at(OpKind::CrossEntropy, Pass::Forward), f32);
  EXPECT_EQ(p.at(OpKind::AdamW, Pass::Forward), f32);
  EXPECT_EQ(p.at(OpKind::RopeAngles, Pass::Forward).storage, fmts::fp16);
  EXPECT_EQ(p.at(OpKind::RopeAngles, Pass::Forward).compute, fmts::fp32);
  EXPECT_EQ(p.at(OpKind::Matmul, Pass::Forward).accumulate.format, fmts::fp16);
  const Policy a = Policy::preset("ane-fp16-acc32");
  EXPECT_EQ(a.at(OpKind::Matmul, Pass::Forward).storage, fmts::fp16);
  EXPECT_EQ(a.at(OpKind::Matmul, Pass::Forward).accumulate, sequential_in(fmts::fp32));
  for (TensorRole r : kAllRoles) EXPECT_EQ(p.storage_for(r), fmts::fp32);
}

TEST(Policy, AneGuideIsTheAneFullLayoutWithTheTiledAccumulator) {
  // Same placement as ane-fp16 (which ops are fp16 on the ANE, which fp32 on the CPU); every fp16 op accumulates
  // in exact tiles of 4 rounded to fp16 feeding an fp32 accumulator, its result rounded to fp16.
  // The ANE's matrix products saturate at 32768 and every ANE op turns NaN into +inf; no lookup tables.
  const Policy g = Policy::preset("ane-guide"), f = Policy::preset("ane-fp16");
  OpPrecision ane{fmts::fp16, fmts::fp16, Rounding::NearestEven, numerics::parse_accumulation("ane-tile4")};
  ane.nan = NanRule::AneInf;
  for (OpKind k : kAllOps)
    for (Pass p : kAllPasses) {
      const OpPrecision& fp = f.at(k, p);
      OpPrecision want = fp == uniform(fmts::fp16) ? ane : fp;
      const bool mac = k == OpKind::Matmul || k == OpKind::AttnScores || k == OpKind::AttnValues;
      if (mac && p != Pass::BackwardWeight) want.saturate = 32768;
      EXPECT_EQ(g.at(k, p), want) << name_of(k) << "." << name_of(p);
      EXPECT_EQ(g.at(k, p).approx, Approx{});
    }
  EXPECT_EQ(g.at(OpKind::ResidualAttn, Pass::Forward), uniform(fmts::fp32));  // the attention residual on the CPU
  EXPECT_EQ(g.at(OpKind::ResidualFfn, Pass::Forward).storage, fmts::fp16);   // the stream leaves each layer in fp16
  EXPECT_EQ(g.loss_scale(), 256.0);
  for (TensorRole r : kAllRoles) EXPECT_EQ(g.storage_for(r), fmts::fp32);
}

TEST(Policy, AneMatmulOnlyIsAutoAnesMatmulOnlyMode) {
  // AutoANE's matmul-only mode: the 7 forward projections on the ANE (fp16 in and out), everything else fp32 on
  // the CPU. The preset differs from fp32 in matmul fwd only; the guide's accumulator is one override away.
  const Policy m = Policy::preset("ane-matmul-only"), f32 = Policy::preset("fp32");
  for (OpKind k : kAllOps)
    for (Pass p : kAllPasses) {
      if (k == OpKind::Matmul && p == Pass::Forward) continue;
      EXPECT_EQ(m.at(k, p), f32.at(k, p)) << name_of(k);
    }
  EXPECT_EQ(m.at(OpKind::Matmul, Pass::Forward), uniform(fmts::fp16));
  const Policy g = Policy::parse("ane-matmul-only,matmul.fwd.acc=ane-tile4");
  EXPECT_EQ(g.at(OpKind::Matmul, Pass::Forward).accumulate, numerics::parse_accumulation("ane-tile4"));
  EXPECT_EQ(g.canonical(), "ane-matmul-only,matmul.fwd.acc=ane-tile4");
}

TEST(Policy, AneFieldsParsePrintAndRoundTrip) {
  const Policy p = Policy::parse("ane-guide,silu.approx=ane-lut,softmax.fwd.approx=ane-lut:17:-12:0.5,"
                                 "matmul.bwd-data.saturate=none,rope.nan=ieee,classifier.saturate=1e4");
  EXPECT_EQ(p.at(OpKind::Silu, Pass::Forward).approx, (Approx{ApproxKind::AneLut, 0, 0, 0}));
  EXPECT_EQ(p.at(OpKind::Softmax, Pass::Forward).approx, (Approx{ApproxKind::AneLut, 17, -12, 0.5}));
  EXPECT_EQ(p.at(OpKind::Softmax, Pass::BackwardData).approx, Approx{});
  EXPECT_EQ(p.at(OpKind::Matmul, Pass::BackwardData).saturate, 0.0);
  EXPECT_EQ(p.at(OpKind::Matmul, Pass::Forward).saturate, 32768.0);
  EXPECT_EQ(p.at(OpKind::RopeRotate, Pass::Forward).nan, NanRule::Ieee);
  EXPECT_EQ(p.at(OpKind::Classifier, Pass::Forward).saturate, 1e4);
  EXPECT_EQ(Policy::parse(p.canonical()), p) << p.canonical();
  EXPECT_EQ(Policy::parse("ane-guide,silu.approx=exact"), Policy::preset("ane-guide"));
  EXPECT_EQ(Policy::parse("ane-guide,rmsnorm.approx=ane-lut:40").canonical(), "ane-guide,rmsnorm.approx=ane-lut:40");
  // A full PREC override keeps the separate fields, and canonical() prints them as their own items.
  const Policy q = Policy::parse("fp32,matmul=fp16/fp32/fp16-seq/up,matmul.saturate=32768,matmul.nan=ane-inf");
  EXPECT_EQ(q.at(OpKind::Matmul, Pass::Forward).nan, NanRule::AneInf);
  EXPECT_EQ(Policy::parse("fp32,matmul.saturate=32768,matmul=fp16").at(OpKind::Matmul, Pass::Forward).saturate,
            32768.0);
  EXPECT_EQ(Policy::parse(q.canonical()), q) << q.canonical();
  EXPECT_EQ(lut_spec(Approx{ApproxKind::AneLut, 0, 0, 0}, numerics::LutFunction::Sigmoid),
            numerics::default_lut(numerics::LutFunction::Sigmoid));
  EXPECT_EQ(lut_spec(Approx{ApproxKind::AneLut, 65, 0, 0}, numerics::LutFunction::Tanh).knots, 65);
  // The table view (policy show --table) lists the non-default fields.
  EXPECT_EQ(extras_text(p.at(OpKind::Silu, Pass::Forward)), "approx=ane-lut nan=ane-inf");
  EXPECT_EQ(extras_text(p.at(OpKind::Matmul, Pass::Forward)), "saturate=32768 nan=ane-inf");
  EXPECT_EQ(extras_text(uniform(fmts::fp32)), "");
  // Every non-PREC field is listed, fp8-rescale included (it was once left out of the table).
  EXPECT_EQ(extras_text(Policy::preset("deepseek-fp8-nopromote-rescaled").at(OpKind::Matmul, Pass::BackwardData)),
            "fp8-x=e4m3:1x128:pad fp8-w=e4m3:128x128:pad fp8-dy=e4m3:1x128:pad fp8-rescale=e4m3");
  EXPECT_EQ(extras_text(Policy::preset("deepseek-fp8-nopromote").at(OpKind::Matmul, Pass::BackwardData)),
            "fp8-x=e4m3:1x128:pad fp8-w=e4m3:128x128:pad fp8-dy=e4m3:1x128:pad");
}

TEST(Policy, PureAndAmpLayouts) {
  const Policy p = Policy::preset("pure-bf16");
  EXPECT_EQ(p.at(OpKind::Softmax, Pass::Forward), uniform(fmts::bf16));
  EXPECT_EQ(p.at(OpKind::AdamW, Pass::Forward), uniform(fmts::fp32));
  EXPECT_EQ(p.storage_for(TensorRole::Weight), fmts::bf16);
  EXPECT_EQ(p.storage_for(TensorRole::MasterWeight), fmts::fp32);
  EXPECT_EQ(p.storage_for(TensorRole::AdamV), fmts::fp32);
  const Policy a = Policy::preset("amp-fp16");
  EXPECT_EQ(a.at(OpKind::Matmul, Pass::BackwardWeight).storage, fmts::fp16);
  EXPECT_EQ(a.at(OpKind::Matmul, Pass::BackwardWeight).accumulate, sequential_in(fmts::fp32));
  EXPECT_EQ(a.at(OpKind::Softmax, Pass::Forward), uniform(fmts::fp32));
  EXPECT_EQ(a.at(OpKind::RmsNorm, Pass::Forward), uniform(fmts::fp32));
  EXPECT_EQ(a.storage_for(TensorRole::Weight), fmts::fp32);
}

TEST(Policy, OverridesApplyLeftToRight) {
  const Policy p = Policy::parse("ane-fp16,softmax=fp32,matmul.acc=fp32-seq,matmul.bwd-data=fp16/fp16-seq");
  EXPECT_EQ(p.at(OpKind::Softmax, Pass::Forward), uniform(fmts::fp32));
  EXPECT_EQ(p.at(OpKind::Matmul, Pass::Forward).storage, fmts::fp16);
  EXPECT_EQ(p.at(OpKind::Matmul, Pass::Forward).accumulate, sequential_in(fmts::fp32));
  EXPECT_EQ(p.at(OpKind::Matmul, Pass::BackwardData), uniform(fmts::fp16));
  EXPECT_EQ(Policy::parse(p.canonical()), p);
  const Policy q = Policy::parse("fp32,all.bwd.rounding=stochastic,weights=bf16,loss-scale=1024");
  EXPECT_EQ(q.at(OpKind::Silu, Pass::BackwardData).rounding, Rounding::Stochastic);
  EXPECT_EQ(q.at(OpKind::Silu, Pass::Forward).rounding, Rounding::NearestEven);
  EXPECT_EQ(q.storage_for(TensorRole::Weight), fmts::bf16);
  EXPECT_EQ(q.loss_scale(), 1024.0);
  EXPECT_EQ(Policy::parse(q.canonical()), q);
  // Without a preset the base is fp32.
  EXPECT_EQ(Policy::parse("softmax=fp16"), Policy::parse("fp32,softmax=fp16"));
  // A full PREC: storage/compute/acc/rounding.
  const Policy r = Policy::parse("rmsnorm=fp16/fp32/fp32-seq/toward-zero");
  EXPECT_EQ(r.at(OpKind::RmsNorm, Pass::BackwardWeight),
            (OpPrecision{fmts::fp16, fmts::fp32, Rounding::TowardZero, sequential_in(fmts::fp32)}));
}

TEST(Policy, CanonicalPicksTheNearestPreset) {
  EXPECT_EQ(Policy::parse("ane-fp16,softmax=fp32").canonical().rfind("ane-fp16,", 0), 0u);
  EXPECT_EQ(Policy::parse("pure-bf16,adamw=bf16").canonical().rfind("pure-bf16,", 0), 0u);
}

TEST(Policy, AttentionOrderParsesAndRoundTrips) {
  for (const std::string& name : Policy::preset_names())
    EXPECT_EQ(Policy::preset(name).attention_order(), AttentionOrder::Materialised) << name;
  for (AttentionOrder o : kAllAttentionOrders) {
    const Policy p = Policy::parse("ane-fp16,attention=" + std::string(name_of(o)));
    EXPECT_EQ(p.attention_order(), o);
    EXPECT_EQ(Policy::parse(p.canonical()), p);
  }
  const Policy on = Policy::parse("ane-fp16,attention=online");
  EXPECT_EQ(on.canonical(), "ane-fp16,attention=online");
  EXPECT_NE(on, Policy::preset("ane-fp16"));
  // The default is not printed: an explicit attention=materialised is the preset itself.
  EXPECT_EQ(Policy::parse("ane-fp16,attention=materialised"), Policy::preset("ane-fp16"));
  EXPECT_EQ(Policy::parse("ane-fp16,attention=materialised").canonical(), "ane-fp16");
  // Items apply left to right; without a preset the base is fp32; it composes with the other overrides.
  EXPECT_EQ(Policy::parse("fp32,attention=online,attention=materialised").attention_order(),
            AttentionOrder::Materialised);
  EXPECT_EQ(Policy::parse("attention=online"), Policy::parse("fp32,attention=online"));
  const Policy q = Policy::parse("pure-bf16,attention=online,softmax=fp32,loss-scale=8");
  EXPECT_EQ(q.canonical(), "pure-bf16,softmax=fp32/fp32/fp32-seq/nearest-even,loss-scale=8,attention=online");
  EXPECT_EQ(Policy::parse(q.canonical()), q);
  EXPECT_EQ(Policy().set_attention_order(AttentionOrder::Online).attention_order(), AttentionOrder::Online);
}

/// Random valid specs: a random preset then random overrides drawn from every selector/field form.
std::string random_spec(std::mt19937_64& rng) {
  auto pick = [&](const auto& v) { return v[std::uniform_int_distribution<std::size_t>(0, v.size() - 1)(rng)]; };
  const std::vector<std::string> formats = {"fp64", "fp32", "bf16", "fp16", "tf32", "e5m2", "p12:emin-20:emax20"};
  const std::vector<std::string> roundings = {"nearest-even", "toward-zero", "stochastic", "up", "odd"};
  const std::vector<std::string> accs = {"fp16-seq", "fp32-seq", "bf16-seq", "fp64-seq", "fp16-pairwise",
                                         "fp16-splitk32-fp32"};
  const std::vector<std::string> approxes = {"exact", "ane-lut", "ane-lut:9", "ane-lut:33:-8:8", "ane-lut:5:-0.1:1e3"};
  const std::vector<std::string> saturations = {"none", "32768", "1e4", "0.5"};
  const std::vector<std::string> nans = {"ieee", "ane-inf"};
  std::vector<std::string> sels = {"all"};
  for (OpKind k : kAllOps) sels.emplace_back(name_of(k));
  std::vector<std::string> passes = {"", ".fwd", ".bwd-data", ".bwd-weight", ".bwd"};
  std::string s = pick(Policy::preset_names());
  const int n = std::uniform_int_distribution<int>(0, 8)(rng);
  for (int i = 0; i < n; ++i) {
    s += ",";
    const int form = std::uniform_int_distribution<int>(0, 11)(rng);
    const std::string sel = pick(sels) + pick(passes);
    switch (form) {
      case 0: s += sel + "=" + pick(formats); break;
      case 1: s += sel + "=" + pick(formats) + "/" + pick(formats) + "/" + pick(accs) + "/" + pick(roundings); break;
      case 2: s += sel + ".storage=" + pick(formats); break;
      case 3: s += sel + ".compute=" + pick(formats); break;
      case 4: s += sel + ".rounding=" + pick(roundings); break;
      case 5: s += sel + ".acc=" + pick(accs); break;
      case 6: s += std::string(pick(kRoleNames)) + "=" + pick(formats); break;
      case 7: s += "attention=" + std::string(name_of(pick(kAllAttentionOrders))); break;
      case 8: s += sel + ".approx=" + pick(approxes); break;
      case 9: s += sel + ".saturate=" + pick(saturations); break;
      case 10: s += sel + ".nan=" + pick(nans); break;
      default: s += "loss-scale=" + std::to_string(std::uniform_int_distribution<int>(1, 1 << 20)(rng)) + ".5"; break;
    }
  }
  return s;
}

TEST(Policy, RandomSpecsRoundTrip) {
  std::mt19937_64 rng(20261122);
  for (int i = 0; i < 1000; ++i) {
    const std::string spec = random_spec(rng);
    const Policy p = Policy::parse(spec);
    const std::string c = p.canonical();
    ASSERT_EQ(Policy::parse(c), p) << spec << "\n -> " << c;
    ASSERT_EQ(Policy::parse(c).canonical(), c) << spec;
  }
}

TEST(Policy, NonPresetAccumulationIsBracketed) {
  const std::string acc = "[" + numerics::canonical(numerics::parse_accumulation("fp16-splitk32-fp32")) + "]";
  const Policy p = Policy::parse("fp32,matmul.acc=" + acc);
  EXPECT_EQ(p.at(OpKind::Matmul, Pass::Forward).accumulate, numerics::parse_accumulation("fp16-splitk32-fp32"));
  EXPECT_EQ(Policy::parse(p.canonical()), p);
}

/// The error message of parse(spec), or "" when it parses.
std::string error_of(const std::string& spec) {
  try {
    (void)Policy::parse(spec);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(Policy, MalformedSpecsGiveOneLineErrors) {
  struct Case {
    std::string spec, must_contain;
  };
  const std::vector<Case> cases = {
      {"ane-fp17", "item 1 'ane-fp17': unknown preset; valid: fp64, fp32, ane-fp16"},
      {"ane-fp16,softmx=fp32", "item 2 'softmx=fp32': unknown op or role 'softmx'; valid: all, embedding"},
      {"ane-fp16,softmax=fp33", "item 2 'softmax=fp33'"},
      {"fp32,matmul.fwdd=fp16", "unknown pass or field 'fwdd'; valid passes: fwd, bwd-data, bwd-weight"},
      {"fp32,matmul.acc=fp16-sek", "item 2 'matmul.acc=fp16-sek'"},
      {"fp32,matmul.rounding=nearest", "item 2 'matmul.rounding=nearest'"},
      {"fp32,,softmax=fp16", "item 2 '': empty item"},
      {"fp32,ane-fp16", "a preset is only allowed as the first item"},
      {"fp32,loss-scale=-1", "loss-scale must be a positive finite number"},
      {"fp32,softmax=", "empty value"},
      {"fp32,softmax.fwd.storage.x=fp16", "too many parts"},
      {"fp32,softmax=fp16/fp16/nearest-even/up", "rounding given twice"},
      {"ane-fp16,attention=flash",
       "item 2 'attention=flash': unknown attention order 'flash'; valid: materialised, online"},
      {"ane-fp16,attention=Online", "unknown attention order 'Online'; valid: materialised, online"},
      {"fp32,attention.fwd=online", "item 2 'attention.fwd=online': attention takes no pass or field"},
      {"fp32,attention=", "item 2 'attention=': empty value"},
      {"fp32,atention=online", "unknown op or role 'atention'; valid: all, embedding"},
      {"fp32,silu.approx=lut", "item 2 'silu.approx=lut': unknown approximation 'lut'; valid: exact, ane-lut"},
      {"fp32,silu.approx=ane-lut:1", "knot count '1' is not an integer in 2..4097"},
      {"fp32,silu.approx=ane-lut:x", "knot count 'x'"},
      {"fp32,silu.approx=ane-lut:33:8:-8", "table range needs LO < HI"},
      {"fp32,silu.approx=ane-lut:33:-8", "unknown approximation 'ane-lut:33:-8'"},
      {"fp32,silu.approx=ane-lut:33:-8:inf", "table bound 'inf' is not a finite number"},
      {"fp32,matmul.saturate=-32768", "saturate must be none or a positive finite number (e.g. 32768), not '-32768'"},
      {"fp32,matmul.saturate=0", "saturate must be none or a positive finite number"},
      {"fp32,matmul.nan=inf", "unknown NaN rule 'inf'; valid: ieee, ane-inf"},
      {"fp32,matmul.aprox=ane-lut", "unknown pass or field 'aprox'"},
  };
  for (const Case& c : cases) {
    const std::string e = error_of(c.spec);
    EXPECT_NE(e.find(c.must_contain), std::string::npos) << c.spec << " gave: " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

TEST(Policy, PolicyFile) {
  const std::string path = ::testing::TempDir() + "roundoff_policy_test.policy";
  {
    std::ofstream f(path);
    f << "# the ANE layout with an fp32 softmax\nane-fp16\nsoftmax=fp32   # upcast\n\nmatmul.acc=fp32-seq\n";
  }
  EXPECT_EQ(load_policy(path), Policy::parse("ane-fp16,softmax=fp32,matmul.acc=fp32-seq"));
  {
    std::ofstream f(path);
    f << "ane-fp16\nsoftmx=fp32\n";
  }
  try {
    (void)load_policy(path);
    ADD_FAILURE() << "malformed policy file parsed";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("policy file '" + path + "': policy spec item 2 'softmx=fp32'"),
              std::string::npos)
        << e.what();
  }
  std::remove(path.c_str());
  EXPECT_EQ(load_policy("pure-fp16"), Policy::preset("pure-fp16"));
}

}  // namespace
}  // namespace roundoff::ops
