// `roundoff gemm`: D = A·B (+ C) of two .npy matrices under an accumulation (numerics::gemm), written as an
// .npy, with a summary and, against an expected .npy, the differing bits.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "numerics/accumulate.hpp"
#include "numerics/format.hpp"
#include "numerics/mpfr_util.hpp"
#include "numerics/round.hpp"
#include "studies/cli/cli_checks.hpp"
#include "studies/cli/cli_format.hpp"
#include "studies/cli/commands.hpp"
#include "studies/common/npy.hpp"
#include "studies/common/provenance.hpp"

namespace roundoff::cli {

namespace {

namespace fs = std::filesystem;
using numerics::Accumulation;
using numerics::Format;
using numerics::RoundingPlan;

/// Input files above this size are refused (each is held as binary64 values, up to 4 copies of a float16 file).
constexpr std::uintmax_t kMaxInputBytes = std::uintmax_t{1} << 30;
constexpr const char* kLikeValid = "cublas-h100 (also H200: the same tensor cores and kernels)";
/// --splitk auto tries S = 1..kMaxAutoSplit.
constexpr int kMaxAutoSplit = 64;

struct Options {
  std::string a, b, c, inputs, accumulation, like, splitk, out, expect, expect_format;
  bool fast_accum = false, json = false;
  std::uint64_t seed = 0;
  int threads = 0;
};

/// A 2-D .npy operand: its values (row-major) and shape.
struct Matrix {
  std::vector<double> v;
  std::size_t rows = 0, cols = 0;
  std::string dtype;
};

Matrix read_matrix(const std::string& path, const std::string& what) {
  studies::NpyArray a;
  try {
    a = studies::read_npy(path, kMaxInputBytes, true);
  } catch (const std::invalid_argument& e) {
    throw CliError("gemm: " + what + " " + e.what());
  }
  if (a.shape.size() != 2) {
    std::string s;
    for (std::size_t d : a.shape) s += (s.empty() ? "" : "x") + std::to_string(d);
    throw CliError("gemm: " + what + " " + path + " has shape " + s + "; valid: a 2-D array");
  }
  return Matrix{std::move(a.values), a.shape[0], a.shape[1], a.dtype};
}

/// Refuses the first element of m that is not a value of f (row-major order).
void check_values(const Matrix& m, const std::string& what, const std::string& path, const Format& f) {
  const RoundingPlan plan(f);
  for (std::size_t i = 0; i < m.v.size(); ++i)
    if (!numerics::is_representable(plan, m.v[i]))
      throw CliError("gemm: " + what + " " + path + " element [" + std::to_string(i / m.cols) + ", " +
                     std::to_string(i % m.cols) + "] = " + decimal_text(m.v[i]) + " is not a value of " +
                     numerics::name_of(f) + "; valid: values of --inputs (round the array to " + numerics::name_of(f) +
                     " first, e.g. roundoff.round(a, '" + numerics::name_of(f) + "'))");
}

/// The inputs: one format, or "FA,FB" for A's and B's.
std::pair<Format, Format> parse_inputs(const std::string& text) {
  const auto comma = text.find(',');
  try {
    if (comma == std::string::npos) {
      const Format f = numerics::parse_format(text);
      return {f, f};
    }
    return {numerics::parse_format(text.substr(0, comma)), numerics::parse_format(text.substr(comma + 1))};
  } catch (const std::invalid_argument& e) {
    throw CliError(std::string("gemm: --inputs: ") + e.what());
  }
}

/// The accumulation --like names for inputs `f`, with --fast-accum and `splitk` ("S[:G]", or "" for none).
Accumulation like_accumulation(const Options& o, const Format& fa, const Format& fb, const std::string& splitk) {
  if (o.like != "cublas-h100") throw CliError("gemm: --like '" + o.like + "' is not known; valid: " + kLikeValid);
  if (!(fa == fb))
    throw CliError("gemm: --like cublas-h100 needs one input format for A and B (got --inputs " + o.inputs +
                   "); valid: fp16, bf16, tf32, e4m3, e5m2, or give --accumulation");
  // The preset per input format and the k-tile of the split-K kernels cuBLAS picked on an H200 (nvjet for
  // fp16/bf16/fp8, CUTLASS sm80 kernels for tf32): docs/studies/tensorcore.md, "cuBLAS on H200".
  struct Model {
    const char* input;
    const char* preset;
    int granule;
    bool fp8;
  };
  constexpr Model kModels[] = {{"fp16", "tc-h100", 64, false},     {"bf16", "tc-h100-bf16", 64, false},
                               {"tf32", "tc-h100-tf32", 32, false}, {"e4m3", "tc-h100-fp8", 128, true},
                               {"e5m2", "tc-h100-fp8-e5m2", 128, true}};
  const std::string name = numerics::name_of(fa);
  const Model* model = nullptr;
  for (const Model& m : kModels)
    if (name == m.input) model = &m;
  if (model == nullptr)
    throw CliError("gemm: --like cublas-h100 has no model for --inputs " + name +
                   "; valid: fp16, bf16, tf32, e4m3, e5m2 (or give --accumulation)");
  std::string spec = model->preset;
  const int granule = model->granule;
  const bool fp8 = model->fp8;
  if (o.fast_accum && !fp8) throw CliError("gemm: --fast-accum applies to fp8 inputs (e4m3, e5m2) only");
  // torch._scaled_mm's default (use_fast_accum=False) promotes into binary32 every 128 products.
  if (fp8 && !o.fast_accum) spec += ",promote=128:fp32";
  if (!splitk.empty()) {
    const auto colon = splitk.find(':');
    spec += ",splitk=" + splitk + (colon == std::string::npos ? ":" + std::to_string(granule) : "");
  }
  try {
    return numerics::parse_accumulation(spec);
  } catch (const std::invalid_argument& e) {
    throw CliError("gemm: --splitk '" + splitk + "': " + e.what());
  }
}

/// True when every value of f is a binary32 value (so D can be written as float32 exactly).
bool fits_float32(const Format& f) {
  return f.precision <= 24 && f.emax <= 127 && f.emin - f.precision + 1 >= -149;
}

/// x rounded to f to nearest-even (*value) and its encoding in f.
std::uint64_t encoded(const RoundingPlan& f, double x, double* value) {
  const double r = std::isnan(x) ? x : numerics::round_to(f, numerics::Rounding::NearestEven, x);
  *value = r;
  if (f.format == numerics::formats::fp64) return std::bit_cast<std::uint64_t>(r);
  return numerics::to_bits(f.format, r);
}

std::string bits_hex(std::uint64_t b, const Format& f) {
  const auto enc = numerics::encoding_of(f);
  const int digits = enc ? (enc->total_bits() + 3) / 4 : 16;
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%0*llx", digits, static_cast<unsigned long long>(b));
  return buf;
}

/// The expected array of --expect, checked (shape M x N, values of the compared format) before any work, and
/// the format D is compared in: E's dtype's, or --expect-format's.
struct Expected {
  studies::NpyArray e;
  Format format;
};

Expected load_expected(std::size_t M, std::size_t N, const Options& o) {
  studies::NpyArray e;
  try {
    e = studies::read_npy(o.expect, kMaxInputBytes, true);
  } catch (const std::invalid_argument& err) {
    throw CliError(std::string("gemm: --expect ") + err.what());
  }
  if (e.shape.size() != 2 || e.shape[0] != M || e.shape[1] != N) {
    std::string s;
    for (std::size_t x : e.shape) s += (s.empty() ? "" : "x") + std::to_string(x);
    throw CliError("gemm: --expect " + o.expect + " has shape " + s + "; valid: the result's shape " +
                   std::to_string(M) + "x" + std::to_string(N));
  }
  Format f = e.dtype == "float16" ? numerics::formats::fp16
             : e.dtype == "float32" ? numerics::formats::fp32
                                    : numerics::formats::fp64;
  if (!o.expect_format.empty()) {
    try {
      f = numerics::parse_format(o.expect_format);
    } catch (const std::invalid_argument& err) {
      throw CliError(std::string("gemm: --expect-format: ") + err.what());
    }
    if (!numerics::encoding_of(f) && !(f == numerics::formats::fp64))
      throw CliError("gemm: --expect-format " + o.expect_format + " has no bit encoding; valid: fp16, bf16, fp32, ...");
  }
  const RoundingPlan plan(f);
  for (std::size_t i = 0; i < e.values.size(); ++i)
    if (!std::isnan(e.values[i]) && !numerics::is_representable(plan, e.values[i]))
      throw CliError("gemm: --expect " + o.expect + " element [" + std::to_string(i / N) + ", " +
                     std::to_string(i % N) + "] = " + decimal_text(e.values[i]) + " is not a value of " +
                     numerics::name_of(f) + "; valid: --expect-format naming the format E holds");
  return Expected{std::move(e), f};
}

/// D against the expected array: elements whose encodings differ (any NaN equals any NaN), the total number of
/// differing bits, and the first differing element.
nlohmann::json compare(const std::vector<double>& d, std::size_t N, const Options& o, const Expected& x) {
  const studies::NpyArray& e = x.e;
  const Format& f = x.format;
  const RoundingPlan plan(f);
  std::int64_t elements = 0, bits = 0;
  nlohmann::json first = nullptr;
  for (std::size_t i = 0; i < d.size(); ++i) {
    double got_v = 0, want_v = 0;
    const std::uint64_t got = encoded(plan, d[i], &got_v);
    const std::uint64_t want = encoded(plan, e.values[i], &want_v);
    if (got == want || (std::isnan(got_v) && std::isnan(want_v))) continue;
    ++elements;
    bits += std::popcount(got ^ want);
    if (first.is_null()) {
      first = {{"index", {i / N, i % N}},
               {"got", numerics::hex_float(got_v)},
               {"expected", numerics::hex_float(want_v)},
               {"got_bits", bits_hex(got, f)},
               {"expected_bits", bits_hex(want, f)}};
    }
  }
  return {{"path", o.expect}, {"dtype", e.dtype}, {"format", numerics::name_of(f)}, {"elements", d.size()},
          {"differing_elements", elements}, {"differing_bits", bits}, {"first_difference", first}};
}

void run(const Options& o) {
  if (o.out.empty()) throw CliError("gemm: --out must name a file (got an empty string); valid: a new .npy path");
  if (o.accumulation.empty() == o.like.empty())
    throw CliError("gemm: give exactly one of --accumulation SPEC and --like cublas-h100");
  if (!o.expect_format.empty() && o.expect.empty()) throw CliError("gemm: --expect-format goes with --expect");
  if (o.like.empty() && (!o.splitk.empty() || o.fast_accum))
    throw CliError("gemm: --splitk and --fast-accum go with --like; with --accumulation write ',splitk=S:G' in the spec");
  std::error_code ec;
  if (fs::exists(fs::symlink_status(o.out, ec)))
    throw CliError("gemm: --out " + o.out + " exists; roundoff gemm never replaces a file (remove it or choose a new path)");
  const bool auto_s = o.splitk == "auto";
  if (auto_s && o.expect.empty())
    throw CliError("gemm: --splitk auto needs --expect E.npy (the output whose split-K count S it finds)");
  const auto [fa, fb] = parse_inputs(o.inputs);
  Accumulation acc;
  if (!o.like.empty()) {
    acc = like_accumulation(o, fa, fb, auto_s ? std::string() : o.splitk);
  } else {
    try {
      acc = numerics::parse_accumulation(o.accumulation);
    } catch (const std::invalid_argument& e) {
      throw CliError(std::string("gemm: --accumulation: ") + e.what());
    }
  }
  const Matrix A = read_matrix(o.a, "A");
  const Matrix B = read_matrix(o.b, "B");
  if (A.cols != B.rows)
    throw CliError("gemm: A " + o.a + " is " + std::to_string(A.rows) + "x" + std::to_string(A.cols) + " and B " + o.b +
                   " is " + std::to_string(B.rows) + "x" + std::to_string(B.cols) +
                   "; valid: A (M x K) and B (K x N) with the same K");
  check_values(A, "A", o.a, fa);
  check_values(B, "B", o.b, fb);
  const std::size_t M = A.rows, N = B.cols, K = A.cols;
  std::vector<double> D(M * N, 0.0);  // (M, N) row-major
  if (!o.c.empty()) {
    const Matrix C = read_matrix(o.c, "C");
    if (C.rows != M || C.cols != N)
      throw CliError("gemm: C " + o.c + " is " + std::to_string(C.rows) + "x" + std::to_string(C.cols) +
                     "; valid: M x N = " + std::to_string(M) + "x" + std::to_string(N));
    D = C.v;
  }
  std::optional<Expected> expected;
  if (!o.expect.empty()) expected = load_expected(M, N, o);
  const std::vector<double> start = D;
  numerics::AccumStats stats;
  auto product = [&](const Accumulation& a, std::vector<double>& out, numerics::AccumStats& st) {
    out = start;
    numerics::gemm(a, M, N, K, numerics::ConstMatrix{A.v.data(), K}, numerics::ConstMatrix{B.v.data(), N},
                   out.data(), N, !o.c.empty(), numerics::StochasticBits{o.seed, 0}, &st, o.threads);
  };
  const auto t0 = std::chrono::steady_clock::now();
  nlohmann::json search = nlohmann::json::array();
  if (auto_s) {
    // S = 1, 2, ... up to kMaxAutoSplit, one GEMM per distinct chunk length; the first S whose output equals E
    // (else the one with the fewest differing elements). S = 1 is the unsplit chain.
    std::int64_t best = -1;
    std::vector<std::size_t> lengths;
    for (int S = 1; S <= kMaxAutoSplit; ++S) {
      const Accumulation a = like_accumulation(o, fa, fb, std::to_string(S));
      const std::size_t len = numerics::splitk_chunk(a.splitk, K);
      if (std::find(lengths.begin(), lengths.end(), len) != lengths.end()) continue;
      lengths.push_back(len);
      std::vector<double> d;
      numerics::AccumStats st;
      product(a, d, st);
      const std::int64_t differ = compare(d, N, o, *expected)["differing_elements"].get<std::int64_t>();
      search.push_back({{"splitk", S}, {"chunk", len}, {"differing_elements", differ}});
      if (best < 0 || differ < best) {
        best = differ;
        acc = a;
        D = std::move(d);
        stats = st;
      }
      if (differ == 0) break;
    }
  } else {
    product(acc, D, stats);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  const Format rf = numerics::result_format(acc);
  const bool f32 = fits_float32(rf);
  std::string data(M * N * (f32 ? 4 : 8), '\0');
  std::size_t nonfinite = 0;
  for (std::size_t i = 0; i < D.size(); ++i) {
    nonfinite += !std::isfinite(D[i]);
    if (f32) {
      const auto f = static_cast<float>(D[i]);  // exact: D holds values of a format inside binary32
      std::memcpy(data.data() + 4 * i, &f, 4);   // x86-64 and aarch64 Linux are little endian
    } else {
      std::memcpy(data.data() + 8 * i, &D[i], 8);
    }
  }
  studies::write_file_atomic(o.out, studies::npy_bytes({"d", f32 ? "<f4" : "<f8", {M, N}, data}));

  nlohmann::json j;
  j["a"] = o.a;
  j["b"] = o.b;
  j["c"] = o.c.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.c);
  j["m"] = M;
  j["n"] = N;
  j["k"] = K;
  j["inputs"] = fa == fb ? numerics::name_of(fa) : numerics::name_of(fa) + "," + numerics::name_of(fb);
  j["accumulation"] = numerics::canonical(acc);
  j["spec"] = numerics::spec_text(acc);
  j["result_format"] = numerics::name_of(rf);
  j["out"] = o.out;
  j["out_dtype"] = f32 ? "float32" : "float64";
  j["nonfinite"] = nonfinite;
  j["overflows"] = stats.overflows;
  j["seconds"] = seconds;
  if (auto_s) j["splitk_search"] = search;
  std::optional<nlohmann::json> cmp;
  if (expected) cmp = compare(D, N, o, *expected);
  if (cmp) j["expect"] = *cmp;
  if (o.json) {
    std::printf("%s\n", j.dump().c_str());
  } else {
    const std::string name = numerics::canonical(acc), spec = numerics::spec_text(acc);
    std::printf("D = A·B%s: %zux%zu · %zux%zu, %s inputs, under %s%s\n", o.c.empty() ? "" : " + C", M, K, K, N,
                j["inputs"].get<std::string>().c_str(), name.c_str(), name == spec ? "" : (" (" + spec + ")").c_str());
    if (auto_s) {
      std::string tried;
      for (const auto& t : search)
        tried += (tried.empty() ? "" : ", ") + std::to_string(t["splitk"].get<int>()) + " (" +
                 std::to_string(t["differing_elements"].get<std::int64_t>()) + " differ)";
      std::printf("splitk auto: S = %s; kept S = %d\n", tried.c_str(), acc.splitk.count);
    }
    std::printf("wrote %s (%s, values of %s) in %.3g s; %zu non-finite, %lld overflows\n", o.out.c_str(),
                f32 ? "float32" : "float64", numerics::name_of(rf).c_str(), seconds, nonfinite,
                static_cast<long long>(stats.overflows));
    if (cmp) {
      const nlohmann::json& c = *cmp;
      std::printf("expect %s (%s, compared as %s): %lld of %zu elements differ (%lld bits)\n", o.expect.c_str(),
                  c["dtype"].get<std::string>().c_str(), c["format"].get<std::string>().c_str(), static_cast<long long>(c["differing_elements"].get<std::int64_t>()),
                  D.size(), static_cast<long long>(c["differing_bits"].get<std::int64_t>()));
      if (!c["first_difference"].is_null()) {
        const nlohmann::json& f = c["first_difference"];
        std::printf("first at [%zu, %zu]: got %s (%s), expected %s (%s)\n", f["index"][0].get<std::size_t>(),
                    f["index"][1].get<std::size_t>(), f["got"].get<std::string>().c_str(),
                    f["got_bits"].get<std::string>().c_str(), f["expected"].get<std::string>().c_str(),
                    f["expected_bits"].get<std::string>().c_str());
      }
    }
  }
  std::fflush(stdout);
  if (cmp && (*cmp)["differing_elements"].get<std::int64_t>() != 0)
    throw CheckFailed("gemm: " + std::to_string((*cmp)["differing_elements"].get<std::int64_t>()) +
                      " elements differ from --expect " + o.expect);
}

}  // namespace

void add_gemm_command(CLI::App& app) {
  static Options o;
  auto* cmd = app.add_subcommand(
      "gemm",
      "D = A·B (+ C) of .npy matrices under an accumulation, as numerics::gemm computes it: A (M x K) and B "
      "(K x N) float16/float32/float64 .npy holding values of --inputs, C (M x N) the exact starting value of each "
      "output. Writes D as float32 .npy (float64 when the result format does not fit binary32), prints a summary "
      "(--json: one JSON line) and, with --expect, the elements and bits that differ from E (D rounded to E's "
      "format, its dtype's or --expect-format's, to nearest-even, as cuBLAS writes fp16/bf16 outputs; any NaN "
      "equals any NaN). Exit status 1 when "
      "--expect differs, 2 on bad input.");
  cmd->add_option("a", o.a, "A: M x K .npy (float16, float32 or float64, C order)")->required();
  cmd->add_option("b", o.b, "B: K x N .npy")->required();
  cmd->add_option("--c", o.c, "C: M x N .npy, the exact starting value of each output (gemm with accumulate)");
  cmd->add_option("--inputs", o.inputs, "Format A and B hold values of (or FA,FB), e.g. fp16, bf16, tf32, e4m3")
      ->required();
  cmd->add_option("--accumulation", o.accumulation,
                  "Accumulation preset or key=value spec, e.g. tc-h100, 'tc-h100,splitk=3:64', fp32-seq");
  cmd->add_option("--like", o.like,
                  std::string("Shorthand for a measured library: ") + kLikeValid +
                      ": tc-h100, tc-h100-bf16, tc-h100-tf32 for fp16, bf16, tf32 inputs; for e4m3/e5m2 "
                      "torch._scaled_mm (tc-h100-fp8[-e5m2],promote=128:fp32; --fast-accum: no promotion)");
  cmd->add_option("--splitk", o.splitk,
                  "With --like: the split-K kernel's S (chunks) and optional G (granule; default 64 for fp16/bf16, "
                  "128 for fp8, 32 for tf32): K cut into chunks of G·ceil(K/(G·S)) summed in binary32. 'auto' "
                  "(with --expect, the GPU's output): tries S = 1..64 (1 = no split), one GEMM per distinct chunk "
                  "length, keeps the first S that reproduces E (else the closest) and lists them in splitk_search");
  cmd->add_flag("--fast-accum", o.fast_accum, "With --like and fp8 inputs: torch._scaled_mm(use_fast_accum=True)");
  cmd->add_option("--out,-o", o.out, "Output .npy (written atomically; must not exist)")->required();
  cmd->add_option("--expect", o.expect, "Expected D (.npy, M x N, float16/32/64): count the differing bits");
  cmd->add_option("--expect-format", o.expect_format,
                  "Format E holds (default its dtype's: fp16, fp32, fp64), e.g. bf16 for cuBLAS's bf16 outputs "
                  "saved as float32: D is rounded to it to nearest-even before the bits are compared");
  cmd->add_option("--seed", o.seed, "Seed of stochastic rounding (output (i, j) uses stream i·N + j)")
      ->check(seed_value());
  cmd->add_option("--threads", o.threads, "Threads over output rows (default: all; the bits never depend on it)")
      ->check(thread_count());
  cmd->add_flag("--json", o.json, "Print one JSON object");
  cmd->footer(
      "Examples:\n  roundoff gemm a.npy b.npy --inputs fp16 --accumulation tc-h100 --out d.npy\n"
      "  roundoff gemm a.npy b.npy --inputs bf16 --like cublas-h100 --splitk 3 --out d.npy --expect d_gpu.npy\n"
      "  roundoff gemm a.npy b.npy --inputs fp16 --like cublas-h100 --splitk auto --expect d_gpu.npy --out d.npy --json\n"
      "  roundoff gemm a.npy b.npy --c c.npy --inputs fp16 --accumulation fp16-seq --out d.npy --json\n"
      "S for a cuBLAS split-K kernel (…_splitK_…, then splitKreduce_kernel): docs/studies/tensorcore.md, "
      "\"cuBLAS on H200\".");
  cmd->callback([] { run(o); });
}

}  // namespace roundoff::cli
