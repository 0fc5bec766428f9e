// `roundoff quantize`: block-scaled quantization of a float32/float64 .npy into an .npz of values, codes and
// scales (numerics/block_format.hpp), with the error against the input as one JSON line.
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "numerics/block_format.hpp"
#include "numerics/palette.hpp"
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
  std::string format, rule, in, out, lut;
  int axis = -1;
  bool axis_given = false;
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

void check_out(const Options& o) {
  if (o.out.empty()) throw CliError("quantize: --out must name a file (got an empty string); valid: " + std::string(kValidOut));
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
}

/// The error of values v against the input x, as the JSON fields every format prints.
void error_fields(nlohmann::json& j, const std::vector<double>& x, const std::vector<double>& v) {
  double max_abs = 0, sum_sq = 0, max_rel = 0;
  std::size_t finite = 0, nonzero = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(x[i]) || !std::isfinite(v[i])) continue;
    const double e = std::fabs(v[i] - x[i]);
    ++finite;
    max_abs = std::max(max_abs, e);
    sum_sq += e * e;
    if (x[i] != 0) {
      ++nonzero;
      max_rel = std::max(max_rel, e / std::fabs(x[i]));
    }
  }
  j["count"] = v.size();
  j["finite_count"] = finite;
  j["nonzero_count"] = nonzero;
  j["max_abs_error"] = max_abs;
  j["rms_error"] = finite ? std::sqrt(sum_sq / static_cast<double>(finite)) : 0.0;
  j["max_rel_error"] = max_rel;
}

/// --format palette: indices into a given LUT (numerics/palette.hpp), per tensor ((k,) LUT) or per group of rows
/// along axis 0 ((G, k) LUT).
void run_palette(const Options& o) {
  if (o.lut.empty()) throw CliError("quantize: --format palette needs --lut LUT.npy; valid: a float32 .npy of shape (k,) or (G, k), k <= 256");
  if (!o.rule.empty()) throw CliError("quantize: --rule " + o.rule + " does not apply to palette; valid: no --rule");
  if (o.axis_given) throw CliError("quantize: --axis does not apply to palette (groups run along axis 0); valid: no --axis");
  check_out(o);
  const studies::NpyArray lut = studies::read_npy(o.lut, std::uintmax_t{1} << 20);
  if (lut.shape.size() > 2)
    throw CliError("quantize: --lut " + o.lut + " has " + std::to_string(lut.shape.size()) +
                   " dimensions; valid: (k,) for one LUT or (G, k) for G groups of rows");
  numerics::Palette p;
  p.k = lut.shape.back();
  p.groups = lut.shape.size() == 2 ? lut.shape[0] : 1;
  for (std::size_t i = 0; i < lut.values.size(); ++i) {
    const auto f = static_cast<float>(lut.values[i]);
    if (static_cast<double>(f) != lut.values[i] && !std::isnan(lut.values[i]))
      throw CliError("quantize: --lut value " + std::to_string(i) + " (" + std::to_string(lut.values[i]) +
                     ") is not an fp32 value; valid: LUT entries representable in float32");
    p.lut.push_back(f);
  }
  const studies::NpyArray a = studies::read_npy(o.in, kMaxInputBytes);
  const std::size_t rows = a.shape[0];
  if (rows % p.groups != 0)
    throw CliError("quantize: " + std::to_string(p.groups) + " LUTs do not split axis 0 of length " + std::to_string(rows) +
                   "; valid: a LUT count that divides it");
  const std::vector<std::uint8_t> idx = numerics::palettize(p, a.values, rows);
  const std::vector<double> v = numerics::depalettize(p, idx, rows);
  std::vector<float> vf(v.begin(), v.end());  // exact: LUT values are fp32
  studies::write_file_atomic(o.out, studies::npz_bytes({{"values", "<f4", a.shape, le_bytes(vf)},
                                                        {"codes", "|u1", a.shape, le_bytes(idx)},
                                                        {"lut", "<f4", lut.shape, le_bytes(p.lut)}},
                                                       kWriter));
  nlohmann::json j;
  j["format"] = "palette";
  j["input"] = o.in;
  j["input_dtype"] = a.float32 ? "float32" : "float64";
  j["lut"] = o.lut;
  j["lut_entries"] = p.k;
  j["lut_groups"] = p.groups;
  j["out"] = o.out;
  error_fields(j, a.values, v);
  std::printf("%s\n", j.dump().c_str());
}

void run(const Options& o) {
  if (o.format == "palette") return run_palette(o);
  if (!o.lut.empty()) throw CliError("quantize: --lut applies to --format palette only; valid: no --lut with " + o.format);
  if (!o.rule.empty() && o.format.find(':') != std::string::npos)
    throw CliError("quantize: --rule " + o.rule + " given with --format " + o.format +
                   ", which already names a rule; valid: a rule in one of the two places");
  const BlockFormat b = numerics::parse_block_format(o.rule.empty() ? o.format : o.format + ":" + o.rule);
  check_out(o);
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
  const std::vector<double> vmoved = numerics::dequantize(b, q, numerics::formats::fp32, n);
  const std::vector<double> v = swap_axis(vmoved, outer, n, inner, false);
  const std::vector<std::uint8_t> codes = swap_axis(q.codes, outer, n, inner, false);
  // 2-D tiles: the moved matrix is (outer·inner) × n, its scales a grid (outer·inner / rows) × (n / k).
  const std::size_t rt = static_cast<std::size_t>(b.block_rows);
  const std::size_t outer_s = rt > 1 && ax == 1 ? outer / rt : outer, inner_s = rt > 1 && ax == 0 ? inner / rt : inner;
  const std::vector<std::uint32_t> scales32 = swap_axis(q.scales, outer_s, n / k, inner_s, false);

  std::vector<float> vf(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) vf[i] = static_cast<float>(v[i]);  // exact: dequantize rounded to fp32
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
  if (b.scale_block > 0) {  // nf4-dq: 8-bit scale codes, the fp32 group scales (flat, in block order) and the offset
    std::vector<std::uint8_t> s8(scales32.begin(), scales32.end());
    members.push_back({"scales", "|u1", scale_shape, le_bytes(s8)});
    std::vector<float> ss(q.scale_scales.size());
    for (std::size_t i = 0; i < ss.size(); ++i) ss[i] = std::bit_cast<float>(q.scale_scales[i]);
    members.push_back({"scale_scales", "<f4", {ss.size()}, le_bytes(ss)});
    members.push_back({"scale_offset", "<f4", {}, le_bytes(std::vector<float>{q.scale_offset})});
  } else {
    per_block_member("scales", scales32);
  }
  if (!q.biases.empty()) per_block_member("biases", swap_axis(q.biases, outer_s, n / k, inner_s, false));
  if (b.rule == numerics::ScaleRule::Nvfp4) members.push_back({"tensor_scale", "<f4", {}, le_bytes(std::vector<float>{q.tensor_scale})});
  studies::write_file_atomic(o.out, studies::npz_bytes(members, kWriter));

  nlohmann::json j;
  j["format"] = b.name;
  j["input"] = o.in;
  j["input_dtype"] = a.float32 ? "float32" : "float64";
  j["axis"] = ax;
  j["out"] = o.out;
  error_fields(j, a.values, v);
  std::printf("%s\n", j.dump().c_str());
}

}  // namespace

void add_quantize_command(CLI::App& app) {
  static Options o;
  auto* cmd = app.add_subcommand(
      "quantize",
      "Block-scaled quantization of a float32/float64 .npy (C order) along its last axis (or --axis): writes an "
      ".npz with values (dequantized, float32), codes (uint8 element encodings), scales (raw block-scale "
      "encodings: uint8; uint16 for fp16/bf16 scales; uint32 for fp32 scales), for mlx-int* biases (IEEE bits like scales) and, for nvfp4, tensor_scale (fp32 S_enc); nf4-dq: uint8 scale codes, scale_scales and scale_offset; palette (--lut): codes are LUT indices, plus lut; prints the error "
      "against the input as one JSON line (max abs, rms and max relative over nonzero inputs, over the finite "
      "values). Rules: docs/numerics.md, \"Block-scaled formats\".");
  cmd->add_option("--format,-f", o.format,
                  "Block format: " + [] {
                    std::string s;
                    for (const std::string& n : numerics::block_format_names()) s += (s.empty() ? "" : ", ") + n;
                    return s;
                  }() + ", palette (with --lut) (MX formats also NAME:RULE; MLX affine: mlx-intB-gG[-bf16|-fp32], B 2-8, G 32/64/128)")
      ->required();
  cmd->add_option("--rule", o.rule,
                  "Scale rule of an MX format: ocp-floor (OCP v1.0, the default), nv-ceil (NVIDIA), mlx-round (MLX); "
                  "the same as --format NAME:RULE");
  cmd->add_option("--axis", o.axis, "Axis the blocks run along (default -1, the last)")
      ->each([](const std::string&) { o.axis_given = true; });
  cmd->add_option("--lut", o.lut,
                  "--format palette: the look-up table, a float32 .npy of shape (k,) (one LUT, k <= 256) or (G, k) (one "
                  "per group of rows along axis 0); each value becomes the index of its nearest entry (ties: the lowest "
                  "index); writes values, codes (uint8 indices) and lut");
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
              "  roundoff quantize -f nf4-dq w.npy -o w-nf4dq.npz   # scales: uint8 codes; scale_scales, scale_offset\n"
              "  roundoff quantize -f palette --lut lut.npy w.npy -o w-pal.npz\n"
              "  python3 -c \"import numpy as np; q = np.load('x.npz'); print(q['codes'][:4], q['scales'][:1])\"");
  cmd->callback([] { run(o); });
}

}  // namespace roundoff::cli
