// `roundoff quantize`: block-scaled quantization of a float32/float64 .npy into an .npz of values, codes and
// scales (numerics/block_format.hpp), with the error against the input as one JSON line.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "numerics/block_format.hpp"
#include "studies/cli/commands.hpp"
#include "studies/common/npy.hpp"
#include "studies/common/provenance.hpp"

namespace roundoff::cli {

namespace {

namespace fs = std::filesystem;
using numerics::BlockFormat;

/// The zip comment that marks an .npz as written by this command (the only files it overwrites).
constexpr std::string_view kWriter = "roundoff quantize";
constexpr std::string_view kValidOut = "a new .npz path, or an .npz that roundoff quantize wrote";
/// Input files above this size are refused (the work holds about 6 copies of the values in memory).
constexpr std::uintmax_t kMaxInputBytes = std::uintmax_t{1} << 30;

struct Options {
  std::string format, rule, in, out;
  int axis = -1;
};

template <class T>
std::string le_bytes(const std::vector<T>& v) {
  std::string s(v.size() * sizeof(T), '\0');
  if (!v.empty()) std::memcpy(s.data(), v.data(), s.size());  // x86-64 and aarch64 Linux are little endian
  return s;
}

/// Permutes a C-order array of shape (outer, n, inner) to (outer, inner, n) when `forward`, back otherwise.
template <class T>
std::vector<T> swap_axis(const std::vector<T>& a, std::size_t outer, std::size_t n, std::size_t inner, bool forward) {
  if (inner == 1) return a;
  std::vector<T> b(a.size());
  for (std::size_t o = 0; o < outer; ++o)
    for (std::size_t k = 0; k < n; ++k)
      for (std::size_t i = 0; i < inner; ++i) {
        const std::size_t src = (o * n + k) * inner + i, dst = (o * inner + i) * n + k;
        if (forward) b[dst] = a[src];
        else b[src] = a[dst];
      }
  return b;
}

void run(const Options& o) {
  if (o.out.empty()) throw CliError("quantize: --out must name a file (got an empty string); valid: " + std::string(kValidOut));
  if (!o.rule.empty() && o.format.find(':') != std::string::npos)
    throw CliError("quantize: --rule " + o.rule + " given with --format " + o.format +
                   ", which already names a rule; valid: a rule in one of the two places");
  const BlockFormat b = numerics::parse_block_format(o.rule.empty() ? o.format : o.format + ":" + o.rule);
  std::error_code ec;
  const auto out_status = fs::status(o.out, ec);
  if (fs::exists(out_status)) {
    if (out_status.type() != fs::file_type::regular)
      throw CliError("quantize: --out " + o.out + " exists and is not a regular file; valid: " + std::string(kValidOut));
    if (fs::equivalent(o.in, o.out, ec))
      throw CliError("quantize: --out " + o.out + " is the input file; valid: " + std::string(kValidOut));
    if (!studies::npz_written_by(o.out, kWriter))
      throw CliError("quantize: --out " + o.out + " exists and was not written by roundoff quantize (remove it if it may go); valid: " +
                     std::string(kValidOut));
  }
  const studies::NpyArray a = studies::read_npy(o.in, kMaxInputBytes);
  const auto ndim = static_cast<int>(a.shape.size());
  if (o.axis < -ndim || o.axis >= ndim)
    throw CliError("quantize: --axis " + std::to_string(o.axis) + " is out of range for " + std::to_string(ndim) +
                   " dimensions; valid: " + std::to_string(-ndim) + " to " + std::to_string(ndim - 1));
  const auto ax = static_cast<std::size_t>((o.axis + ndim) % ndim);
  std::size_t outer = 1, inner = 1;
  for (std::size_t i = 0; i < ax; ++i) outer *= a.shape[i];
  for (std::size_t i = ax + 1; i < a.shape.size(); ++i) inner *= a.shape[i];
  const std::size_t n = a.shape[ax];
  const auto k = static_cast<std::size_t>(b.block_size);
  if (b.block_rows > 1 && ndim != 2)
    throw CliError("quantize: " + b.name + " quantizes matrices in " + std::to_string(b.block_rows) + "x" +
                   std::to_string(k) + " tiles but the input has " + std::to_string(ndim) +
                   " dimensions; valid: a 2-D .npy");
  if (b.block_rows > 1 && (outer * inner) % static_cast<std::size_t>(b.block_rows) != 0)
    throw CliError("quantize: " + b.name + " needs the other axis to be a multiple of " + std::to_string(b.block_rows) +
                   " but it has length " + std::to_string(outer * inner) + "; valid: both axes multiples of " +
                   std::to_string(b.block_rows));
  if (n == 0 || n % k != 0)
    throw CliError("quantize: " + b.name + " has blocks of " + std::to_string(k) + " but axis " + std::to_string(ax) +
                   " has length " + std::to_string(n) + "; valid: axes whose length is a nonzero multiple of " +
                   std::to_string(k) + " (choose one with --axis)");
  const std::vector<double> moved = swap_axis(a.values, outer, n, inner, true);
  const numerics::BlockCodes q = numerics::quantize(b, moved, n);
  const std::vector<double> vmoved = numerics::dequantize(b, q.codes, q.scales, q.tensor_scale, numerics::formats::fp32, q.biases, n);
  const std::vector<double> v = swap_axis(vmoved, outer, n, inner, false);
  const std::vector<std::uint8_t> codes = swap_axis(q.codes, outer, n, inner, false);
  // 2-D tiles: the moved matrix is (outer·inner) × n, its scales a grid (outer·inner / rows) × (n / k).
  const std::size_t rt = static_cast<std::size_t>(b.block_rows);
  const std::size_t outer_s = rt > 1 && ax == 1 ? outer / rt : outer, inner_s = rt > 1 && ax == 0 ? inner / rt : inner;
  const std::vector<std::uint32_t> scales32 = swap_axis(q.scales, outer_s, n / k, inner_s, false);

  std::vector<float> vf(v.size());
  double max_abs = 0, sum_sq = 0, max_rel = 0;
  std::size_t finite = 0, nonzero = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    vf[i] = static_cast<float>(v[i]);  // exact: dequantize rounded to fp32
    const double x = a.values[i];
    if (!std::isfinite(x) || !std::isfinite(v[i])) continue;
    const double e = std::fabs(v[i] - x);  // both have at most 53 significant bits; the difference is rounded once
    ++finite;
    max_abs = std::max(max_abs, e);
    sum_sq += e * e;
    if (x != 0) {
      ++nonzero;
      max_rel = std::max(max_rel, e / std::fabs(x));
    }
  }
  std::vector<studies::NpyMember> members;
  members.push_back({"values", "<f4", a.shape, le_bytes(vf)});
  members.push_back({"codes", "|u1", a.shape, le_bytes(codes)});
  std::vector<std::size_t> scale_shape = a.shape;
  scale_shape[ax] = n / k;
  if (rt > 1) scale_shape[1 - ax] /= rt;
  const auto per_block_member = [&](const char* name, const std::vector<std::uint32_t>& codes32) {
    switch (numerics::scale_bits(b.scale)) {
      case 8: {
        std::vector<std::uint8_t> s8(codes32.size());
        for (std::size_t i = 0; i < s8.size(); ++i) s8[i] = static_cast<std::uint8_t>(codes32[i]);
        members.push_back({name, "|u1", scale_shape, le_bytes(s8)});
        break;
      }
      case 16: {
        std::vector<std::uint16_t> s16(codes32.size());
        for (std::size_t i = 0; i < s16.size(); ++i) s16[i] = static_cast<std::uint16_t>(codes32[i]);
        members.push_back({name, "<u2", scale_shape, le_bytes(s16)});
        break;
      }
      default: members.push_back({name, "<u4", scale_shape, le_bytes(codes32)});
    }
  };
  per_block_member("scales", scales32);
  if (!q.biases.empty()) per_block_member("biases", swap_axis(q.biases, outer_s, n / k, inner_s, false));
  if (b.rule == numerics::ScaleRule::Nvfp4) members.push_back({"tensor_scale", "<f4", {}, le_bytes(std::vector<float>{q.tensor_scale})});
  studies::write_file_atomic(o.out, studies::npz_bytes(members, kWriter));

  nlohmann::json j;
  j["format"] = b.name;
  j["input"] = o.in;
  j["input_dtype"] = a.float32 ? "float32" : "float64";
  j["axis"] = ax;
  j["out"] = o.out;
  j["count"] = v.size();
  j["finite_count"] = finite;
  j["nonzero_count"] = nonzero;
  j["max_abs_error"] = max_abs;
  j["rms_error"] = finite ? std::sqrt(sum_sq / static_cast<double>(finite)) : 0.0;
  j["max_rel_error"] = max_rel;
  std::printf("%s\n", j.dump().c_str());
}

}  // namespace

void add_quantize_command(CLI::App& app) {
  static Options o;
  auto* cmd = app.add_subcommand(
      "quantize",
      "Block-scaled quantization of a float32/float64 .npy (C order) along its last axis (or --axis): writes an "
      ".npz with values (dequantized, float32), codes (uint8 element encodings), scales (raw block-scale "
      "encodings: uint8; uint16 for fp16/bf16 scales; uint32 for fp32 scales), for mlx-int* biases (IEEE bits like scales) and, for nvfp4, tensor_scale (fp32 S_enc); prints the error "
      "against the input as one JSON line (max abs, rms and max relative over nonzero inputs, over the finite "
      "values). Rules: docs/numerics.md, \"Block-scaled formats\".");
  cmd->add_option("--format,-f", o.format,
                  "Block format: " + [] {
                    std::string s;
                    for (const std::string& n : numerics::block_format_names()) s += (s.empty() ? "" : ", ") + n;
                    return s;
                  }() + " (MX formats also NAME:RULE; MLX affine: mlx-intB-gG[-bf16|-fp32], B 2-8, G 32/64/128)")
      ->required();
  cmd->add_option("--rule", o.rule,
                  "Scale rule of an MX format: ocp-floor (OCP v1.0, the default), nv-ceil (NVIDIA), mlx-round (MLX); "
                  "the same as --format NAME:RULE");
  cmd->add_option("--axis", o.axis, "Axis the blocks run along (default -1, the last)");
  cmd->add_option("in", o.in, "Input .npy (float32 or float64, C order, at most 1 GiB)")->required();
  cmd->add_option("--out,-o", o.out,
                  "Output .npz (written atomically; an existing file is replaced only when roundoff quantize wrote "
                  "it)")
      ->required();
  cmd->footer("Examples:\n  roundoff quantize --format mxfp4 weights.npy --out weights-mxfp4.npz\n"
              "  roundoff quantize --format nvfp4 --axis 0 w.npy --out w-nvfp4.npz\n"
              "  roundoff quantize -f mxfp8-e4m3:nv-ceil x.npy -o x.npz\n"
              "  roundoff quantize -f mxfp4 --rule mlx-round x.npy -o x.npz\n"
              "  roundoff quantize -f mlx-int4-g64-bf16 w.npy -o w-mlx.npz\n"
              "  python3 -c \"import numpy as np; q = np.load('x.npz'); print(q['codes'][:4], q['scales'][:1])\"");
  cmd->callback([] { run(o); });
}

}  // namespace roundoff::cli
