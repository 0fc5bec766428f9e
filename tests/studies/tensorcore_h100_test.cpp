// The H100 tensor-core models against the hardware's own output bits: notebooks-data/tensorcore-h100 holds the
// first 1024 tiles of each probe dump (studies/tensorcore/mma_probe.cu run on an H100, 16384 tiles per shape;
// docs/studies/tensorcore.md). Every output of the fitted presets must match bit for bit; the older tensor-core
// models must not, so the comparison can fail.
#include <gtest/gtest.h>

#include <string>

#include "numerics/accumulate.hpp"
#include "studies/common/provenance.hpp"
#include "studies/tensorcore/tc_fit.hpp"

namespace roundoff::tensorcore {
namespace {

ProbeDump load(const char* shape) {
  const std::string path =
      std::string(studies::source_dir()) + "/notebooks-data/tensorcore-h100/tc-" + shape + ".bin";
  ProbeDump d = read_probe(path);
  check_operands(d);  // the generator still makes the operands the hardware saw
  return d;
}

Model model(const char* text) { return plain_model(numerics::parse_accumulation(text)); }

TEST(TensorCoreH100, FittedPresetsReproduceEveryOutputBit) {
  const std::pair<const char*, const char*> fits[] = {
      {"f16-f32", "tc-h100"}, {"bf16-f32", "tc-h100-bf16"}, {"tf32-f32", "tc-h100-tf32"}, {"f16-f16", "tc-h100-f16acc"}};
  for (const auto& [shape, preset] : fits) {
    const ProbeDump d = load(shape);
    ASSERT_EQ(d.tiles, 1024u) << shape;
    const FitScore s = score(d, model(preset));
    EXPECT_EQ(s.outputs, 1024 * 128) << shape;
    EXPECT_EQ(s.mismatches, 0) << shape << " under " << preset << ": "
                               << (s.examples.empty() ? std::string() : s.examples.front());
  }
}

TEST(TensorCoreH100, EachFittedFeatureIsNeeded) {
  // Dropping any one feature of the fitted model breaks some outputs (of the classes that exercise it).
  const ProbeDump f16 = load("f16-f32");
  const ProbeDump bf16 = load("bf16-f32");
  const ProbeDump half = load("f16-f16");
  EXPECT_GT(score(f16, model("fasi-a100")).mismatches, 0);  // Fasi et al.'s models
  EXPECT_GT(score(f16, model("fasi-v100")).mismatches, 0);
  EXPECT_GT(score(f16, model("tc-h100,anchor=lead")).mismatches, 0);
  EXPECT_GT(score(f16, model("tc-h100,extra=1")).mismatches, 0);
  EXPECT_GT(score(f16, model("tc-h100,extra=3")).mismatches, 0);
  EXPECT_GT(score(f16, model("tc-h100,group=8")).mismatches, 0);
  EXPECT_GT(score(f16, model("tc-h100,normalize=nearest-even")).mismatches, 0);
  EXPECT_GT(score(f16, model("tc-h100,align=nearest-even")).mismatches, 0);
  EXPECT_GT(score(bf16, model("tc-h100-bf16,edges=ieee")).mismatches, 0);
  EXPECT_GT(score(bf16, model("tc-h100")).mismatches, 0);  // fp16's emin for bf16 inputs
  EXPECT_GT(score(half, plain_model(numerics::parse_accumulation("tc-h100"), numerics::Rounding::NearestEven)).mismatches,
            0);  // binary32 first, then fp16: double rounding
}

TEST(TensorCoreH100, Fp8MmaSyncIsTwoFp16StepsThenABinary32Add) {
  // nvcc 13.0 compiles fp8 mma.sync for sm_90 into two HMMA.16816.F32 on fp16-converted operands (the probe's
  // SASS): the k-pairs {0,1,4,5,..} first, then {2,3,6,7,..}, and C added at the end by an IEEE binary32 add.
  for (const char* shape : {"e4m3-f32", "e5m2-f32"}) {
    const ProbeDump d = load(shape);
    const Model fit = fp8_mma_sync_sm90_model(d.shape);
    const FitScore s = score(d, fit);
    EXPECT_EQ(s.mismatches, 0) << shape << ": " << (s.examples.empty() ? std::string() : s.examples.front());
    Model natural = fit;  // k in natural order
    for (int k = 0; k < 32; ++k) natural.k_order[static_cast<std::size_t>(k)] = k;
    EXPECT_GT(score(d, natural).mismatches, 0) << shape;
    Model c_first = fit;  // C as the first step's starting value, as for native mma.sync
    c_first.c_last.reset();
    EXPECT_GT(score(d, c_first).mismatches, 0) << shape;
    // The same composite as an Accumulation: feed=even-pairs-first, C added last through promote=32.
    const FitScore preset = score(d, model("tc-h100-fp8-mma"));
    EXPECT_EQ(preset.mismatches, 0) << shape << ": " << (preset.examples.empty() ? "" : preset.examples.front());
    EXPECT_GT(score(d, model("tc-h100-fp8-mma,feed=in-order")).mismatches, 0) << shape;
  }
}

TEST(TensorCoreH100, WarpgroupMmaOnAnH200FollowsTheSameModel) {
  // wgmma (Triton tl.dot, the accumulator initialised from C) on an H200, the same GH100 tensor cores: each
  // wgmma adds 16 products (8 for tf32), chained through the accumulator, so K = 64 is four tc-h100 steps;
  // with an fp16 accumulator each step rounds to fp16.
  struct Fit {
    const char* name;
    const char* preset;
    const char* wrong;  ///< a nearby model that must not fit
  };
  const Fit fits[] = {{"wg-f16-k16-imp0", "tc-h100", "fasi-a100"},
                      {"wg-f16-k64-imp0", "tc-h100", "tc-h100,group=64"},
                      {"wg-bf16-k64-imp0", "tc-h100-bf16", "tc-h100-bf16,anchor=lead"},
                      {"wg-f16-k64-imp0-acc16", "tc-h100-f16acc", "tc-h100-f16acc,group=64"},
                      {"wg-tf32-k32-imp0", "tc-h100-tf32", "tc-h100-tf32,group=16"}};
  for (const auto& [name, preset, wrong] : fits) {
    const WgmmaDump d = read_wgmma(std::string(studies::source_dir()) + "/notebooks-data/tensorcore-h200-wgmma/" +
                                   name + ".bin");
    ASSERT_EQ(d.tiles, 8u) << name;
    const FitScore s = score(d, model(preset));
    EXPECT_EQ(s.outputs, 8 * 64 * 64) << name;
    EXPECT_EQ(s.mismatches, 0) << name << ": " << (s.examples.empty() ? std::string() : s.examples.front());
    EXPECT_GT(score(d, model(wrong)).mismatches, 0) << name << " under " << wrong;
  }
}

WgmmaDump wgmma(const char* name) {
  return read_wgmma(std::string(studies::source_dir()) + "/notebooks-data/tensorcore-h200-wgmma/" + name + ".bin");
}

TEST(TensorCoreH100, Fp8WarpgroupMmaHasAFourteenBitAccumulator) {
  // QGMMA: 32 products and the accumulator per step, aligned 13 bits below the largest exponent sum, the sum
  // truncated to 14 significant bits. Triton's max_num_imprecise_acc = N starts each N-chunk from zero and adds
  // it into binary32 to nearest (promote=N:fp32, the promoted total starting at C); unset, C is the first
  // step's starting value and nothing is promoted.
  const std::pair<const char*, const char*> fits[] = {
      {"wg-e4m3-k32-imp32", "tc-h100-fp8,promote=32:fp32"},
      {"wg-e4m3-k32-imp32-designed", "tc-h100-fp8,promote=32:fp32"},
      {"wg-e4m3-k128-imp128", "tc-h100-fp8,promote=128:fp32"},
      {"wg-e5m2-k128-imp128", "tc-h100-fp8-e5m2,promote=128:fp32"},
      {"wg-e4m3-k128-imp0", "tc-h100-fp8"}};
  for (const auto& [name, spec] : fits) {
    const WgmmaDump d = wgmma(name);
    const FitScore s = score(d, model(spec));
    EXPECT_EQ(s.outputs, static_cast<std::int64_t>(d.tiles) * 64 * 64) << name;
    EXPECT_EQ(s.mismatches, 0) << name << " under " << spec << ": "
                               << (s.examples.empty() ? std::string() : s.examples.front());
  }
  // Each feature is needed: the binary32 register of fp16, a 15-bit accumulator, one more alignment bit, the
  // leading-bit anchor, no promotion where Triton promotes, promotion where it does not.
  const WgmmaDump k32 = wgmma("wg-e4m3-k32-imp32");
  for (const char* wrong : {"tc-h100,group=32", "tc-h100-fp8,promote=32:fp32,acc=p15:emin-126:emax127",
                            "tc-h100-fp8,promote=32:fp32,extra=1", "tc-h100-fp8,promote=32:fp32,anchor=lead",
                            "tc-h100-fp8"})
    EXPECT_GT(score(k32, model(wrong)).mismatches, 0) << wrong;
  EXPECT_GT(score(wgmma("wg-e4m3-k128-imp0"), model("tc-h100-fp8,promote=128:fp32")).mismatches, 0);
}

TEST(TensorCoreH100, ProbeDumpErrorsNameTheProblem) {
  try {
    read_probe("/nonexistent/tc-f16-f32.bin");
    FAIL() << "no throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos) << e.what();
  }
  ProbeDump d = load("f16-f32");
  d.seed ^= 1;
  EXPECT_THROW(check_operands(d), std::runtime_error);
}

}  // namespace
}  // namespace roundoff::tensorcore
