// The per-GPU tensor-core presets against output bits measured on real V100, A100, A2, Ada, L40S, H100, H200 and
// B200 tensor cores by north-numerical-computing/MATLAB-tensor-core (Khattak & Mikaitis, BSD-2-Clause; every line
// of their model_validation data, converted by studies/tensorcore/peer_to_bin.py into
// tests/fixtures/tensorcore-peer, README there). Every line of every GPU × input format × output must match the
// preset named for that GPU bit for bit; the models these presets replace, and each fitted feature dropped, must
// not (so the comparison can fail). docs/studies/tensorcore.md has the table.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include <sys/wait.h>
#include <unistd.h>

#include "numerics/accumulate.hpp"
#include "studies/common/provenance.hpp"
#include "studies/tensorcore/tc_fit.hpp"

namespace roundoff::tensorcore {
namespace {

std::string fixture(const std::string& name) {
  return std::string(studies::source_dir()) + "/tests/fixtures/tensorcore-peer/" + name + ".bin";
}

Model model(const std::string& text) { return plain_model(numerics::parse_accumulation(text)); }

const PeerGpu& gpu_of(const PeerSet& set, const std::string& name) {
  for (const PeerGpu& g : set.gpus)
    if (g.name == name) return g;
  throw std::invalid_argument("no GPU " + name);
}

/// The preset named for a GPU, for its input format and output (fp32 or fp16).
std::string preset_for(const std::string& gpu, const std::string& in, bool half) {
  const std::string f16 = half ? "-f16acc" : "";
  if (gpu == "V100") return "tc-v100" + f16;
  const std::string family = gpu == "A100" || gpu == "A2"   ? "tc-a100"
                             : gpu == "Ada" || gpu == "L40S" ? "tc-ada"
                             : gpu == "B200"                 ? "tc-b200"
                                                             : "tc-h100";
  if (in == "fp16") return family + f16;
  if (in == "bf16" || in == "tf32") return family + "-" + in;
  // fp8: Ada's native QMMA; on H100/H200 the binary32 lines are wgmma (QGMMA, C = 0) and the fp16 lines mma.sync,
  // which nvcc runs as two fp16 HMMAs (on B200 both outputs are mma.sync).
  const std::string e5m2 = in == "e5m2" ? "-e5m2" : "";
  if (family == "tc-ada") return "tc-ada-fp8" + e5m2 + f16;
  if (family == "tc-h100" && !half) return "tc-h100-fp8" + e5m2;
  return family + "-fp8-mma" + f16;
}

TEST(TensorCorePeer, EveryLineOfEveryGpuMatchesItsPreset) {
  std::int64_t outputs = 0;
  std::map<std::string, int> per_gpu;
  for (const char* name : {"fp16-k4", "fp16-k8", "fp16-k16", "bf16-k8", "bf16-k16", "tf32-k4", "e4m3-k32",
                           "e5m2-k32"}) {
    const PeerSet set = read_peer(fixture(name));
    ASSERT_EQ(set.lines, 5000u) << name;
    const std::string in = peer_format_name(set.in);
    for (const PeerGpu& gpu : set.gpus)
      for (const bool half : {false, true}) {
        if ((half ? gpu.d16 : gpu.d32).empty()) continue;
        const std::string preset = preset_for(gpu.name, in, half);
        const FitScore s = score(set, gpu, half ? kFp16 : kFp32, model(preset));
        EXPECT_EQ(s.outputs, 5000) << gpu.name << " " << in;
        EXPECT_EQ(s.mismatches, 0) << gpu.name << " " << in << (half ? "->fp16" : "->fp32") << " under " << preset
                                   << ": " << (s.examples.empty() ? std::string() : s.examples.front());
        outputs += s.outputs;
        ++per_gpu[gpu.name];
      }
  }
  // Their data: V100 fp16 (2 outputs); A100, A2: fp16 (2), bf16, tf32; Ada: also e4m3, e5m2 (2 each); L40S the
  // same without fp8's fp16 output; H100, H200, B200: fp16 (2), bf16, tf32, e4m3 (2), e5m2 (2).
  const std::map<std::string, int> expected = {{"V100", 2}, {"A100", 4}, {"A2", 4},   {"Ada", 8},
                                               {"L40S", 6}, {"H100", 8}, {"H200", 8}, {"B200", 8}};
  EXPECT_EQ(per_gpu, expected);
  EXPECT_EQ(outputs, 48 * 5000);
}

TEST(TensorCorePeer, TheModelsTheseReplaceGetWrongBits) {
  // Fasi et al.'s models (tc-v100 and tc-a100 until these presets): the 16 % and 47 %.
  const PeerSet k4 = read_peer(fixture("fp16-k4")), k8 = read_peer(fixture("fp16-k8"));
  EXPECT_EQ(score(k4, gpu_of(k4, "V100"), kFp32, model("fasi-v100")).mismatches, 793);
  EXPECT_EQ(score(k8, gpu_of(k8, "A100"), kFp32, model("fasi-a100")).mismatches, 2343);
  // The H100 model is wrong on the A100 and Ada generation, theirs on the H100's.
  const PeerSet k16 = read_peer(fixture("fp16-k16"));
  EXPECT_GT(score(k8, gpu_of(k8, "A100"), kFp32, model("tc-h100")).mismatches, 0);
  EXPECT_GT(score(k8, gpu_of(k8, "Ada"), kFp32, model("tc-h100")).mismatches, 0);
  EXPECT_GT(score(k16, gpu_of(k16, "H100"), kFp32, model("tc-a100,group=16")).mismatches, 0);
}

TEST(TensorCorePeer, EachFittedFeatureIsNeeded) {
  const PeerSet k4 = read_peer(fixture("fp16-k4")), k8 = read_peer(fixture("fp16-k8"));
  const PeerSet e4 = read_peer(fixture("e4m3-k32")), e5 = read_peer(fixture("e5m2-k32"));
  const PeerGpu &v100 = gpu_of(k4, "V100"), &a100 = gpu_of(k8, "A100");
  const auto wrong = [](const PeerSet& set, const PeerGpu& g, const Field& out, const std::string& spec) {
    return score(set, g, out, model(spec), 0).mismatches;
  };
  // V100: the exponent-sum anchor (Fasi's leading-bit anchor is fasi-v100 above), no extra bit.
  EXPECT_GT(wrong(k4, v100, kFp32, "tc-v100,extra=1"), 0);
  // A100: one extra bit, not none or two; groups of 8.
  EXPECT_GT(wrong(k8, a100, kFp32, "tc-a100,extra=0"), 0);
  EXPECT_GT(wrong(k8, a100, kFp32, "tc-a100,extra=2"), 0);
  EXPECT_GT(wrong(k8, a100, kFp32, "tc-a100,anchor=lead"), 0);
  EXPECT_GT(wrong(k8, a100, kFp32, "tc-a100,normalize=nearest-even"), 0);
  // Ada fp8: groups of 16 (two steps per k32 instruction) into a 14-bit accumulator; fp16 output: that window
  // (3 bits below fp16's) rounded to nearest each step, with at least 2 carry bits.
  const PeerGpu &ada = gpu_of(e4, "Ada"), &ada5 = gpu_of(e5, "Ada");
  EXPECT_GT(wrong(e4, ada, kFp32, "tc-ada-fp8,group=32"), 0);
  EXPECT_GT(wrong(e4, ada, kFp32, "tc-ada-fp8,acc=p15:emin-126:emax127"), 0);
  EXPECT_GT(wrong(e4, ada, kFp32, "tc-h100,anchor=exp-sum:-6"), 0);
  EXPECT_GT(wrong(e4, ada, kFp16, "tc-ada-fp8-f16acc,extra=2"), 0);
  EXPECT_GT(wrong(e4, ada, kFp16, "tc-ada-fp8-f16acc,extra=4"), 0);
  EXPECT_GT(wrong(e4, ada, kFp16, "tc-ada-fp8-f16acc,carry=1"), 0);
  EXPECT_GT(wrong(e5, ada5, kFp16, "tc-h100-f16acc"), 0);
  // fp8 mma.sync on H100 and B200: C last (promotion), and the k-pair feed (seen with the fp16 output).
  for (const char* g : {"H100", "B200"}) {
    const PeerGpu& gpu = gpu_of(e4, g);
    EXPECT_GT(wrong(e4, gpu, kFp16, "tc-h100-fp8-mma-f16acc,feed=in-order"), 0) << g;
    EXPECT_GT(wrong(e4, gpu, kFp16, "tc-h100-f16acc"), 0) << g;  // C in the first step, natural order
  }
  const PeerGpu& b200 = gpu_of(e4, "B200");
  EXPECT_GT(wrong(e4, b200, kFp32, "tc-h100"), 0);
  EXPECT_GT(wrong(e4, b200, kFp32, "tc-h100-fp8"), 0);
  // H100/H200 binary32 lines (C = 0): QGMMA's 14-bit accumulator, not the mma.sync composite.
  EXPECT_GT(wrong(e4, gpu_of(e4, "H100"), kFp32, "tc-h100-fp8-mma"), 0);
}

TEST(TensorCorePeer, ReaderErrorsNameTheFileAndTheProblem) {
  const auto dir = std::filesystem::temp_directory_path() / ("roundoff-peer-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto expect_error = [](const std::string& path, const std::string& part) {
    try {
      read_peer(path);
      ADD_FAILURE() << "no throw for " << path;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  };
  expect_error((dir / "missing.bin").string(), "cannot open");
  {
    std::ofstream(dir / "bad.bin") << "RTCPROBE and more bytes than a header";
  }
  expect_error((dir / "bad.bin").string(), "no RTCPEER1 header");
  {  // a valid header and GPU table, then too few bytes
    std::ifstream in(fixture("fp16-k4"), std::ios::binary);
    std::string head(28 + 12 + 100, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    std::ofstream(dir / "short.bin", std::ios::binary) << head;
  }
  expect_error((dir / "short.bin").string(), "truncated");
  std::filesystem::remove_all(dir);
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(TensorCorePeer, CliScoresAPeerSetAndRefusesAnUnknownGpu) {
  const auto dir = std::filesystem::temp_directory_path() / ("roundoff-peer-cli-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string set = fixture("fp16-k4");
  std::string cmd = std::string(ROUNDOFF_EXE) + " tensorcore-fit " + set +
                    " --gpu V100 --output fp32 --model tc-v100 --model fasi-v100 --out " + (dir / "fit").string() +
                    " >" + (dir / "out").string() + " 2>&1";
  ASSERT_EQ(WEXITSTATUS(std::system(cmd.c_str())), 0) << slurp(dir / "out");
  const std::string out = slurp(dir / "out");
  EXPECT_NE(out.find("V100 fp16->fp32 (K 4): 5000 lines"), std::string::npos) << out;
  EXPECT_NE(out.find("0 of 5000 wrong"), std::string::npos) << out;
  EXPECT_NE(out.find("793 of 5000 wrong"), std::string::npos) << out;
  EXPECT_NE(slurp(dir / "fit" / "fit.csv").find("tc-v100,5000,5000,0"), std::string::npos);
  cmd = std::string(ROUNDOFF_EXE) + " tensorcore-fit " + set + " --gpu A100 --model tc-a100 2>" +
        (dir / "err").string() + " >/dev/null";
  EXPECT_EQ(WEXITSTATUS(std::system(cmd.c_str())), 2);
  EXPECT_NE(slurp(dir / "err").find("--gpu A100: " + set + " holds V100"), std::string::npos) << slurp(dir / "err");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace roundoff::tensorcore
