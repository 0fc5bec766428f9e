// The per-op error study: CLI output files, the RMSNorm overflow threshold finder, determinism.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "ops/policy.hpp"
#include "studies/op_error/experiments.hpp"
#include "studies/op_error/study.hpp"

namespace fs = std::filesystem;
namespace oe = roundoff::studies::op_error;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> v;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

fs::path temp_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("roundoff_op_error_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

}  // namespace

TEST(OpErrorCli, WritesCsvAndJsonWithExpectedColumns) {
  oe::SingleOptions o;
  o.op = "rmsnorm";
  o.precision = "pure-fp16";
  o.shape = "tokens=8,d=64";
  o.scales = {1.0, 16.0};
  o.rows = 4;
  o.out = temp_dir("single");
  o.command = "test";
  const fs::path csv = oe::run_single(o);
  ASSERT_EQ(csv, o.out / "rmsnorm.csv");
  const auto lines = lines_of(slurp(csv));
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0],
            "preset,op,tensor,pass,scale_kind,scale,shape,rows,precision,count,median_ulp,p95_ulp,max_ulp,above_1ulp,"
            "max_rel,norm_rel,dot_ratio,underflow,elements,inf,nan,subnormal,zero,max_abs");
  // rmsnorm records: forward y and rstd, bwd-data dx, bwd-weight dw — per scale.
  ASSERT_EQ(lines.size(), 1u + 2u * 4u);
  std::size_t fwd = 0, bwd = 0;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i].rfind("pure-fp16,rmsnorm,", 0), 0u) << lines[i];
    fwd += lines[i].find(",fwd,") != std::string::npos;
    bwd += lines[i].find(",bwd-data,") != std::string::npos || lines[i].find(",bwd-weight,") != std::string::npos;
  }
  EXPECT_EQ(fwd, 4u);
  EXPECT_EQ(bwd, 4u);
  // At sigma 16 the fp16 Σx² (64 · 256 = 16384 on average) still fits, so no inf; the tape counts the rows.
  const auto j = nlohmann::json::parse(slurp(o.out / "rmsnorm.json"));
  for (const char* key : {"git_revision", "build_flags", "command", "policy", "seed", "shape", "rows", "scales"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["policy"], roundoff::ops::Policy::parse("pure-fp16").canonical());
  EXPECT_EQ(j["shape"], "d=64,tokens=8");
  fs::remove_all(o.out);
}

TEST(OpErrorCli, BadOpOrShapeIsOneLineErrorListingValidNames) {
  oe::SingleOptions o;
  o.out = temp_dir("bad");
  o.op = "softmaxx";
  try {
    oe::run_single(o);
    FAIL() << "no error for a bad op";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("softmaxx"), std::string::npos);
    EXPECT_NE(m.find("attn-scores"), std::string::npos);
    EXPECT_EQ(m.find('\n'), std::string::npos);
  }
  o.op = "matmul";
  o.shape = "in=1024,width=3";
  try {
    oe::run_single(o);
    FAIL() << "no error for a bad shape key";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("width=3"), std::string::npos);
    EXPECT_NE(m.find("in, out, tokens"), std::string::npos);
  }
  o.shape = "in=-4";
  EXPECT_THROW(oe::run_single(o), std::invalid_argument);
  EXPECT_FALSE(fs::exists(o.out / "matmul.csv"));
}

// Σx² of a d = 1024 row overflows fp16 (max 65504) at rms ≈ √(65504/1024) = 8.0: the finder must land within one
// sweep step (1/8) of it; bf16's range is never reached.
TEST(OpErrorStudy, RmsNormOverflowThresholdFp16At1024) {
  const auto fp16 = roundoff::ops::Policy::parse("pure-fp16").at(roundoff::ops::OpKind::RmsNorm,
                                                                 roundoff::ops::Pass::Forward);
  const auto pts = oe::rmsnorm_overflow(fp16, 1024, oe::overflow_sigmas(), 64, 7);
  const double thr = oe::overflow_threshold_rms(pts);
  EXPECT_NEAR(thr, std::sqrt(65504.0 / 1024.0), 0.125);
  EXPECT_EQ(pts.front().overflow_fraction, 0.0);
  EXPECT_EQ(pts.back().overflow_fraction, 1.0);
  const auto bf16 = roundoff::ops::Policy::parse("pure-bf16").at(roundoff::ops::OpKind::RmsNorm,
                                                                 roundoff::ops::Pass::Forward);
  EXPECT_TRUE(std::isnan(oe::overflow_threshold_rms(oe::rmsnorm_overflow(bf16, 1024, {16.0}, 8, 7))));
}

TEST(OpErrorStudy, SameSeedSameOutput) {
  oe::StudyOptions o;
  o.presets = {"fp32", "ane-fp16"};
  o.ops = {roundoff::ops::OpKind::RmsNorm, roundoff::ops::OpKind::Softmax, roundoff::ops::OpKind::ResidualFfn};
  o.sigmas = {1.0, 16.0};
  o.logit_stds = {1.0};
  o.rows = 4;
  o.overflow_rows = 4;
  o.softmax_max_len = 64;
  o.rope_positions = 64;
  o.seed = 3;
  std::ostringstream log;
  std::vector<std::string> runs[2];
  for (int r = 0; r < 2; ++r) {
    o.out = temp_dir("det" + std::to_string(r));
    oe::run_study(o, log);
    for (const char* f : {"op_error.csv", "rmsnorm_overflow.csv", "residual_swamping.csv", "softmax_bias.csv",
                          "rope_angles.csv"})
      runs[r].push_back(slurp(o.out / f));
    const auto j = nlohmann::json::parse(slurp(o.out / "op_error.json"));
    EXPECT_FALSE(j["ranked_ane_fp16"].empty());
    fs::remove_all(o.out);
  }
  EXPECT_EQ(runs[0], runs[1]);
  // The fp16 softmax rows really carry error and fp32 rows are present too.
  EXPECT_NE(runs[0][0].find("ane-fp16,softmax,"), std::string::npos);
  EXPECT_NE(runs[0][0].find("fp32,softmax,"), std::string::npos);
}
