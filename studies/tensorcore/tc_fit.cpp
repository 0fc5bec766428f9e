#include "studies/tensorcore/tc_fit.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "numerics/arith.hpp"
#include "numerics/round.hpp"
#include "studies/common/out_dir.hpp"

namespace roundoff::tensorcore {

using namespace numerics;

namespace {
constexpr char kMagic[8] = {'R', 'T', 'C', 'P', 'R', 'O', 'B', 'E'};
constexpr std::size_t kHeader = 8 + 4 * 4 + 8 * 2;
constexpr std::size_t kOutputsPerTile = 16 * 8;

bool is_nan(const Field& f, std::uint32_t bits) { return std::isnan(decode(f, bits)); }

/// Refuses a dump whose file is shorter than its header says, before anything is allocated from the header's
/// counts (a 512 KB file claiming 2^32 tiles would otherwise allocate 2 GB, or end in std::bad_alloc).
void require_length(const std::string& what, const std::string& path, std::uintmax_t need, const std::string& claim) {
  std::error_code ec;
  const std::uintmax_t have = std::filesystem::file_size(path, ec);
  if (ec) throw std::runtime_error(what + " " + path + ": cannot read its size: " + ec.message());
  if (have < need)
    throw std::runtime_error(what + " " + path + ": truncated (header says " + claim + ", " + std::to_string(need) +
                             " bytes; the file holds " + std::to_string(have) + ")");
}
}  // namespace

ProbeDump read_probe(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("probe dump " + path + ": cannot open");
  char magic[8];
  std::uint32_t head[4];
  std::uint64_t tail[2];
  in.read(magic, 8);
  in.read(reinterpret_cast<char*>(head), sizeof head);
  in.read(reinterpret_cast<char*>(tail), sizeof tail);
  if (!in || std::memcmp(magic, kMagic, 8) != 0)
    throw std::runtime_error("probe dump " + path + ": not a probe dump (no RTCPROBE header)");
  if (head[0] != 1u) throw std::runtime_error("probe dump " + path + ": version " + std::to_string(head[0]) +
                                              ", this build reads version 1");
  if (head[1] >= static_cast<std::uint32_t>(kShapeCount))
    throw std::runtime_error("probe dump " + path + ": unknown shape " + std::to_string(head[1]) + " (valid: 0.." +
                             std::to_string(kShapeCount - 1) + ")");
  require_length("probe dump", path, kHeader + std::uintmax_t{head[2]} * kOutputsPerTile * 4,
                 std::to_string(head[2]) + " tiles");
  ProbeDump d;
  d.shape = static_cast<Shape>(head[1]);
  d.tiles = head[2];
  d.seed = tail[0];
  d.operand_hash = tail[1];
  d.d.resize(static_cast<std::size_t>(d.tiles) * kOutputsPerTile);
  in.read(reinterpret_cast<char*>(d.d.data()), static_cast<std::streamsize>(d.d.size() * 4));
  if (!in) throw std::runtime_error("probe dump " + path + ": truncated (header says " + std::to_string(d.tiles) +
                                    " tiles)");
  return d;
}

void write_probe(const std::string& path, const ProbeDump& dump, std::uint32_t tiles) {
  if (tiles > dump.tiles) throw std::invalid_argument("write_probe: the dump has fewer tiles than asked");
  const std::string tmp = studies::temp_path_for(path).string();
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    const std::uint32_t head[4] = {1u, static_cast<std::uint32_t>(dump.shape), tiles, 0u};
    const std::uint64_t tail[2] = {dump.seed, operand_hash(dump.shape, dump.seed, tiles)};
    out.write(kMagic, 8);
    out.write(reinterpret_cast<const char*>(head), sizeof head);
    out.write(reinterpret_cast<const char*>(tail), sizeof tail);
    out.write(reinterpret_cast<const char*>(dump.d.data()), static_cast<std::streamsize>(tiles * kOutputsPerTile * 4));
    if (!out) throw std::runtime_error("cannot write " + tmp);
  }
  std::error_code renamed;
  std::filesystem::rename(tmp, path, renamed);
  if (renamed) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw std::runtime_error("cannot write " + path + ": " + renamed.message());
  }
}

void check_operands(const ProbeDump& dump) {
  const std::uint64_t h = operand_hash(dump.shape, dump.seed, dump.tiles);
  if (h != dump.operand_hash) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "probe dump of %s: operand hash %016llx, regenerated %016llx (different generator)",
                  geometry(dump.shape).name, static_cast<unsigned long long>(dump.operand_hash),
                  static_cast<unsigned long long>(h));
    throw std::runtime_error(buf);
  }
}

Format format_of(const Field& f) {
  if (f.ebits == 8 && f.used == 23) return formats::fp32;
  if (f.ebits == 8 && f.used == 10) return formats::tf32;
  if (f.ebits == 8 && f.used == 7) return formats::bf16;
  if (f.ebits == 5 && f.used == 10) return formats::fp16;
  if (f.ebits == 4) return formats::e4m3;
  return formats::e5m2;
}

std::string Model::text() const {
  if (!label.empty()) return label;
  std::string s = (k_order.empty() ? "" : "k-pairs ") + canonical(acc);
  if (c_last) s += " c-last " + std::string(name_of(*c_last));
  if (output) s += " then " + std::string(name_of(*output));
  return s;
}

namespace {

/// Scores one tile: a (m×k), b (k×n) and c (m×n) hold the exact operand values, d the hardware's output bits;
/// cls is the tile's case class (for the per-class counts), t its index (for the examples).
void score_tile(const Model& m, int M, int N, int K, const Field& acc_field, std::vector<double>& a,
                std::vector<double>& b, std::vector<double>& c, const std::uint32_t* d, std::uint32_t t, int cls,
                const char* cls_name, std::size_t examples, FitScore& s) {
  const Format acc = format_of(acc_field);
  const RoundingPlan plan(acc);
  const auto sz = [](int v) { return static_cast<std::size_t>(v); };
  const std::vector<double> c0 = c;
  if (!m.k_order.empty()) {
    if (m.k_order.size() != sz(K)) throw std::invalid_argument("k_order is not a permutation of 0..K-1");
    const std::vector<double> a0 = a, b0 = b;
    for (int i = 0; i < M; ++i)
      for (int k = 0; k < K; ++k) a[sz(i * K + k)] = a0[sz(i * K + m.k_order[sz(k)])];
    for (int k = 0; k < K; ++k)
      for (int j = 0; j < N; ++j) b[sz(k * N + j)] = b0[sz(m.k_order[sz(k)] * N + j)];
  }
  gemm(m.acc, sz(M), sz(N), sz(K), ConstMatrix{a.data(), sz(K)}, ConstMatrix{b.data(), sz(N)}, c.data(), sz(N),
       !m.c_last, {}, nullptr, 1);
  for (std::size_t i = 0; i < c.size(); ++i) {
    double v = c[i];
    if (m.c_last) v = add(plan, *m.c_last, c0[i], v);
    if (m.output) v = round_to(acc, *m.output, v);
    const std::uint32_t want = static_cast<std::uint32_t>(to_bits(acc, v));
    const std::uint32_t got = d[i];
    ++s.outputs;
    if (want == got || (is_nan(acc_field, want) && is_nan(acc_field, got))) continue;
    ++s.mismatches;
    ++s.class_mismatches[static_cast<std::size_t>(cls & 7)];
    if (s.examples.size() < examples) {
      char buf[256];
      std::snprintf(buf, sizeof buf, "tile %u (%s) D[%zu][%zu]: C %a, model %a (%08x), hardware %a (%08x)", t,
                    cls_name, i / sz(N), i % sz(N), c0[i], v, want, decode(acc_field, got), got);
      s.examples.emplace_back(buf);
    }
  }
}

}  // namespace

FitScore score(const ProbeDump& dump, const Model& m, std::uint32_t tiles, std::size_t examples) {
  const Geometry g = geometry(dump.shape);
  if (tiles == 0 || tiles > dump.tiles) tiles = dump.tiles;
  FitScore s;
  std::vector<double> a(static_cast<std::size_t>(g.m * g.k)), b(static_cast<std::size_t>(g.k * g.n)),
      c(static_cast<std::size_t>(g.m * g.n));
  for (std::uint32_t t = 0; t < tiles; ++t) {
    const Tile tile = make_tile(dump.shape, dump.seed, t);
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = decode(g.in, tile.a[i]);
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = decode(g.in, tile.b[i]);
    for (std::size_t i = 0; i < c.size(); ++i) c[i] = decode(g.acc, tile.c[i]);
    const int cls = static_cast<int>(t & 7u);
    score_tile(m, g.m, g.n, g.k, g.acc, a, b, c, &dump.d[t * kOutputsPerTile], t, cls, class_name(cls), examples, s);
  }
  return s;
}

WgmmaDump read_wgmma(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("wgmma dump " + path + ": cannot open");
  char magic[8];
  std::uint32_t head[6];
  in.read(magic, 8);
  in.read(reinterpret_cast<char*>(head), sizeof head);
  if (!in || std::memcmp(magic, "RTCWGMMA", 8) != 0)
    throw std::runtime_error("wgmma dump " + path + ": not a wgmma dump (no RTCWGMMA header)");
  if (head[0] != 1u) throw std::runtime_error("wgmma dump " + path + ": version " + std::to_string(head[0]) +
                                              ", this build reads version 1");
  const Field fields[5] = {kFp16, kBf16, kE4m3, kE5m2, kTf32};
  if (head[1] > 4u)
    throw std::runtime_error("wgmma dump " + path + ": unknown input format code " + std::to_string(head[1]) +
                             " (valid: 0 f16, 1 bf16, 2 e4m3, 3 e5m2, 4 tf32)");
  if (head[5] > 1u) throw std::runtime_error("wgmma dump " + path + ": unknown accumulator code " +
                                             std::to_string(head[5]) + " (valid: 0 binary32, 1 fp16)");
  if (head[2] == 0 || head[2] > 4096 || head[3] == 0 || head[3] > 65536)
    throw std::runtime_error("wgmma dump " + path + ": K " + std::to_string(head[2]) + " or tiles " +
                             std::to_string(head[3]) + " out of range");
  {
    const std::uintmax_t T = head[3], K = head[2];
    require_length("wgmma dump", path, 8 + sizeof head + T * (2 * 64 * K + 2 * 64 * 64) * 4,
                   "K " + std::to_string(K) + " and " + std::to_string(T) + " tiles");
  }
  WgmmaDump d;
  d.in = fields[head[1]];
  d.acc = head[5] == 1u ? kFp16 : kFp32;
  d.k = static_cast<int>(head[2]);
  d.tiles = head[3];
  d.imprecise = static_cast<int>(head[4]);
  const std::size_t T = d.tiles, K = static_cast<std::size_t>(d.k);
  for (auto* v : {&d.a, &d.b}) v->resize(T * 64 * K);
  for (auto* v : {&d.c, &d.d}) v->resize(T * 64 * 64);
  for (auto* v : {&d.a, &d.b, &d.c, &d.d})
    in.read(reinterpret_cast<char*>(v->data()), static_cast<std::streamsize>(v->size() * 4));
  if (!in) throw std::runtime_error("wgmma dump " + path + ": truncated");
  return d;
}

FitScore score(const WgmmaDump& dump, const Model& m, std::size_t examples) {
  static const char* const names[4] = {"narrow", "cancel", "all-finite", "zeros-tiny"};
  const std::size_t K = static_cast<std::size_t>(dump.k);
  FitScore s;
  std::vector<double> a(64 * K), b(K * 64), c(64 * 64);
  for (std::uint32_t t = 0; t < dump.tiles; ++t) {
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = decode(dump.in, dump.a[t * 64 * K + i]);
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = decode(dump.in, dump.b[t * 64 * K + i]);
    for (std::size_t i = 0; i < c.size(); ++i) c[i] = decode(dump.acc, dump.c[t * 64 * 64 + i]);
    const int cls = static_cast<int>(t % 4);
    score_tile(m, 64, 64, dump.k, dump.acc, a, b, c, &dump.d[t * 64 * 64], t, cls, names[cls], examples, s);
  }
  return s;
}

PeerSet read_peer(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("peer operand set " + path + ": cannot open");
  char magic[8];
  std::uint32_t head[5];
  in.read(magic, 8);
  in.read(reinterpret_cast<char*>(head), sizeof head);
  if (!in || std::memcmp(magic, "RTCPEER1", 8) != 0)
    throw std::runtime_error("peer operand set " + path + ": not an operand set (no RTCPEER1 header)");
  if (head[0] != 1u) throw std::runtime_error("peer operand set " + path + ": version " + std::to_string(head[0]) +
                                              ", this build reads version 1");
  const Field fields[5] = {kFp16, kBf16, kE4m3, kE5m2, kTf32};
  const unsigned widths[5] = {2, 2, 1, 1, 4};
  if (head[1] > 4u)
    throw std::runtime_error("peer operand set " + path + ": unknown input format code " + std::to_string(head[1]) +
                             " (valid: 0 fp16, 1 bf16, 2 e4m3, 3 e5m2, 4 tf32)");
  if (head[2] == 0 || head[2] > 256 || head[3] == 0 || head[3] > 1000000 || head[4] == 0 || head[4] > 64)
    throw std::runtime_error("peer operand set " + path + ": K " + std::to_string(head[2]) + ", lines " +
                             std::to_string(head[3]) + " or GPU count " + std::to_string(head[4]) + " out of range");
  PeerSet p;
  p.in = fields[head[1]];
  p.k = static_cast<int>(head[2]);
  p.lines = head[3];
  const std::size_t L = p.lines, K = head[2], w = widths[head[1]];
  std::vector<std::uint32_t> flags;
  for (std::uint32_t g = 0; g < head[4]; ++g) {
    char name[9] = {};
    std::uint32_t f = 0;
    in.read(name, 8);
    in.read(reinterpret_cast<char*>(&f), 4);
    if (!in) throw std::runtime_error("peer operand set " + path + ": truncated GPU table");
    if ((f & 3u) == 0u || f > 7u)
      throw std::runtime_error("peer operand set " + path + ": GPU " + name + " has output flags " +
                               std::to_string(f) + " (valid: bit 0 binary32, bit 1 fp16, at least one; bit 2 C = 0)");
    p.gpus.push_back(PeerGpu{name, {}, {}, {}, (f & 4u) != 0u});
    flags.push_back(f);
  }
  std::uintmax_t need = 8 + sizeof head + 12 * std::uintmax_t{head[4]} + 2 * L * K * w;
  for (std::uint32_t f : flags) need += L * (4 + ((f & 1u) ? 4 : 0) + ((f & 2u) ? 2 : 0));
  require_length("peer operand set", path, need,
                 std::to_string(L) + " lines of K " + std::to_string(K) + " for " + std::to_string(head[4]) + " GPUs");
  const auto read_words = [&](std::vector<std::uint32_t>& v, std::size_t n, std::size_t width) {
    std::vector<unsigned char> raw(n * width);
    in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(raw.size()));
    v.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      std::uint32_t x = 0;
      for (std::size_t byte = 0; byte < width; ++byte) x |= static_cast<std::uint32_t>(raw[i * width + byte]) << (8 * byte);
      v[i] = x;
    }
  };
  read_words(p.a, L * K, w);
  read_words(p.b, L * K, w);
  for (std::size_t g = 0; g < p.gpus.size(); ++g) {
    read_words(p.gpus[g].c, L, 4);
    if (flags[g] & 1u) read_words(p.gpus[g].d32, L, 4);
    if (flags[g] & 2u) read_words(p.gpus[g].d16, L, 2);
  }
  if (!in) throw std::runtime_error("peer operand set " + path + ": truncated");
  return p;
}

const char* peer_format_name(const Field& in) {
  if (in.ebits == 5) return in.mbits == 10 ? "fp16" : "e5m2";
  if (in.ebits == 4) return "e4m3";
  return in.mbits == 7 ? "bf16" : "tf32";
}

FitScore score(const PeerSet& set, const PeerGpu& gpu, const Field& acc, const Model& m, std::size_t examples,
               std::uint32_t lines) {
  const bool half = acc.ebits == 5;
  const std::vector<std::uint32_t>& d = half ? gpu.d16 : gpu.d32;
  if (d.size() != set.lines)
    throw std::invalid_argument(gpu.name + " " + peer_format_name(set.in) + ": no " + (half ? "fp16" : "binary32") +
                                " outputs were measured");
  const std::size_t K = static_cast<std::size_t>(set.k);
  FitScore s;
  std::vector<double> a(K), b(K), c(1);
  if (lines == 0 || lines > set.lines) lines = set.lines;
  for (std::uint32_t l = 0; l < lines; ++l) {
    for (std::size_t k = 0; k < K; ++k) {
      a[k] = decode(set.in, set.a[l * K + k]);
      b[k] = decode(set.in, set.b[l * K + k]);
    }
    const double c32 = !half && gpu.zero_c32 ? 0.0 : decode(kFp32, gpu.c[l]);
    c[0] = half ? decode(kFp16, encode_nearest(kFp16, c32)) : c32;  // their probe's __float2half
    score_tile(m, 1, 1, set.k, acc, a, b, c, &d[l], l, 0, "line", examples, s);
  }
  return s;
}

std::vector<Model> candidate_models(Shape s) {
  const Geometry g = geometry(s);
  return candidate_models(g.in, g.acc, g.k);
}

std::vector<Model> candidate_models(const Field& in, const Field& acc_field, int k) {
  struct {
    int k;
    Field in, acc;
  } g{k, in, acc_field};
  const Format acc = format_of(g.acc);
  const bool half_acc = g.acc.ebits == 5;
  std::vector<Model> out;
  std::vector<int> groups = {4, 8, 16};
  if (g.k > 16) groups.push_back(g.k);
  const Rounding modes[2] = {Rounding::TowardZero, Rounding::NearestEven};
  const int in_emin = format_of(g.in).emin;
  for (const AdderAnchor anchor : {AdderAnchor::LeadingBit, AdderAnchor::ExponentSum}) {
    const bool lead = anchor == AdderAnchor::LeadingBit;
    std::vector<int> extras;
    for (int e = 0; e <= 6; ++e) extras.push_back(e);
    if (half_acc)
      for (int e = 13; e <= 17; ++e) extras.push_back(e);
    for (int group : groups) {
      if (group > g.k) continue;
      for (int extra : extras)
        for (Rounding align : modes)
          for (Rounding norm : modes)
            for (int carry : {1, 2, 3, 6})
              for (AdderEdges edges : {AdderEdges::Ieee, AdderEdges::InfPositiveZero}) {
                Accumulation a;
                a.format = acc;
                a.adder = MultiTermAdder{group, extra, align, norm, carry, anchor, lead ? 0 : in_emin, edges};
                out.push_back(plain_model(a));
                if (half_acc && extra <= 8) {
                  Accumulation w = a;
                  w.format = formats::fp32;
                  for (Rounding o : modes) out.push_back(plain_model(w, o));
                }
              }
    }
  }
  if (g.k == 32) out.push_back(fp8_mma_sync_sm90_model(g.k));
  for (const char* ref : {"fp32-seq", "fp32-pairwise", "fp64-seq"}) {
    Accumulation a = parse_accumulation(ref);
    const bool narrow = !(acc == a.format);
    out.push_back(plain_model(a, narrow ? std::optional<Rounding>(Rounding::NearestEven) : std::nullopt));
  }
  return out;
}

Model plain_model(const Accumulation& acc, std::optional<Rounding> output) {
  Model m;
  m.acc = acc;
  m.output = output;
  return m;
}

Model fp8_mma_sync_sm90_model(Shape s) { return fp8_mma_sync_sm90_model(geometry(s).k); }

Model fp8_mma_sync_sm90_model(int k) {
  Model m;
  m.acc = parse_accumulation("tc-h100");
  m.c_last = Rounding::NearestEven;
  for (int half = 0; half < 2; ++half)
    for (int i = 0; i < k; ++i)
      if ((i / 2) % 2 == half) m.k_order.push_back(i);
  m.label = "tc-h100 on k-pairs {0,1,4,5,..} then {2,3,6,7,..}, then + C (binary32, nearest-even)";
  return m;
}

}  // namespace roundoff::tensorcore
