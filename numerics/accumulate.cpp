#include "numerics/accumulate.hpp"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>

#include "numerics/arith.hpp"
#include "numerics/exact_dot.hpp"
#include "numerics/gemm_kernels.hpp"
#include "numerics/round.hpp"

namespace roundoff::numerics {

// ---------------------------------------------------------------------------------------------------------------
// Names, presets, parsing
// ---------------------------------------------------------------------------------------------------------------

std::string_view name_of(Order o) {
  switch (o) {
    case Order::Sequential: return "seq";
    case Order::Reverse: return "reverse";
    case Order::Pairwise: return "pairwise";
    case Order::Blocked: return "blocked";
    case Order::Kahan: return "kahan";
  }
  return "?";
}

std::string_view name_of(AdderAnchor a) {
  switch (a) {
    case AdderAnchor::LeadingBit: return "lead";
    case AdderAnchor::ExponentSum: return "exp-sum";
  }
  return "?";
}

std::string_view name_of(AdderEdges e) {
  switch (e) {
    case AdderEdges::Ieee: return "ieee";
    case AdderEdges::InfPositiveZero: return "inf-pos-zero";
  }
  return "?";
}

std::string_view name_of(AdderFeed f) {
  switch (f) {
    case AdderFeed::InOrder: return "in-order";
    case AdderFeed::EvenPairsFirst: return "even-pairs-first";
  }
  return "?";
}

namespace {

struct Preset {
  std::string name;
  Accumulation acc;
};

Accumulation seq(Format f, Rounding r = Rounding::NearestEven) {
  Accumulation a;
  a.format = f;
  a.rounding = r;
  return a;
}

const std::vector<Preset>& presets() {
  static const std::vector<Preset> list = [] {
    std::vector<Preset> v;
    const std::pair<const char*, Format> narrow[] = {{"fp16", formats::fp16}, {"bf16", formats::bf16}};
    for (const auto& [name, f] : narrow) {
      const std::string n = name;
      v.push_back({n + "-seq", seq(f)});
      Accumulation unfused = seq(f);
      unfused.fused = false;
      unfused.product_format = f;
      v.push_back({n + "-unfused-seq", unfused});
      Accumulation rev = seq(f);
      rev.order = Order::Reverse;
      v.push_back({n + "-reverse", rev});
      Accumulation pw = seq(f);
      pw.order = Order::Pairwise;
      v.push_back({n + "-pairwise", pw});
      Accumulation kahan = seq(f);
      kahan.order = Order::Kahan;
      v.push_back({n + "-kahan", kahan});
      v.push_back({n + "-sr", seq(f, Rounding::Stochastic)});
      for (int b : {16, 32, 64, 128}) {
        Accumulation blk = seq(f);
        blk.order = Order::Blocked;
        blk.block = b;
        blk.outer_format = formats::fp32;
        v.push_back({n + "-splitk" + std::to_string(b) + "-fp32", blk});
      }
      Accumulation promote = seq(f);
      promote.promote_every = 128;
      promote.promote_format = formats::fp32;
      v.push_back({n + "-promote128-fp32", promote});
    }
    v.push_back({"fp32-seq", seq(formats::fp32)});
    Accumulation fp32pw = seq(formats::fp32);
    fp32pw.order = Order::Pairwise;
    v.push_back({"fp32-pairwise", fp32pw});
    v.push_back({"fp64-seq", seq(formats::fp64)});
    // Fasi, Higham, Mikaitis & Pranesh (2021)'s V100/A100 models: groups of g products and the running fp32 sum
    // aligned to the largest leading bit with no extra bits, truncated. Named tc-v100/tc-a100 until the measured
    // bits showed them wrong on 16 % / 47 % of those GPUs' outputs (docs/studies/tensorcore.md).
    for (const auto& [name, g] : {std::pair<const char*, int>{"fasi-v100", 4}, {"fasi-a100", 8}}) {
      Accumulation tc = seq(formats::fp32, Rounding::TowardZero);
      tc.adder = MultiTermAdder{g, 0, Rounding::TowardZero, Rounding::TowardZero, 2};
      v.push_back({name, tc});
    }
    // Tensor cores per GPU, fitted bit for bit to measured outputs (studies/tensorcore, docs/studies/tensorcore.md):
    // each step adds `group` exact products and the running sum, aligned on the largest exponent sum (input emin),
    // `extra` bits kept below the accumulator's last place, truncated; binary32 results are truncated (overflow
    // inf, zero +0), an fp16 accumulator is the binary32-wide register rounded once to nearest. A preset that is
    // the same model as an earlier one (tc-ada as tc-a100, tc-b200 as tc-h100) prints as the earlier name.
    struct Tc {
      const char* name;
      Format acc;
      int group, extra, emin;
      int promote = 0;  // fp8 mma.sync: the fp16 steps run from zero on k-pairs, C added last (promote=32)
    };
    const Format p14{14, -126, 127};  // the fp8 (QGMMA, Ada QMMA) accumulator: 14 bits, binary32's range
    const Tc tcs[] = {
        {"tc-v100", formats::fp32, 4, 0, -14},        {"tc-v100-f16acc", formats::fp16, 4, 13, -14},
        {"tc-a100", formats::fp32, 8, 1, -14},        {"tc-a100-bf16", formats::fp32, 8, 1, -126},
        {"tc-a100-tf32", formats::fp32, 4, 1, -126},  {"tc-a100-f16acc", formats::fp16, 8, 14, -14},
        {"tc-ada", formats::fp32, 8, 1, -14},         {"tc-ada-bf16", formats::fp32, 8, 1, -126},
        {"tc-ada-tf32", formats::fp32, 4, 1, -126},   {"tc-ada-f16acc", formats::fp16, 8, 14, -14},
        {"tc-ada-fp8", p14, 16, 0, -6},               {"tc-ada-fp8-e5m2", p14, 16, 0, -14},
        {"tc-ada-fp8-f16acc", formats::fp16, 16, 3, -6}, {"tc-ada-fp8-e5m2-f16acc", formats::fp16, 16, 3, -14},
        {"tc-h100", formats::fp32, 16, 2, -14},       {"tc-h100-bf16", formats::fp32, 16, 2, -126},
        {"tc-h100-tf32", formats::fp32, 8, 2, -126},  {"tc-h100-f16acc", formats::fp16, 16, 15, -14},
        {"tc-h100-fp8", p14, 32, 0, -6},              {"tc-h100-fp8-e5m2", p14, 32, 0, -14},
        {"tc-h100-fp8-mma", formats::fp32, 16, 2, -14, 32}, {"tc-h100-fp8-mma-f16acc", formats::fp16, 16, 15, -14, 32},
        {"tc-b200", formats::fp32, 16, 2, -14},       {"tc-b200-bf16", formats::fp32, 16, 2, -126},
        {"tc-b200-tf32", formats::fp32, 8, 2, -126},  {"tc-b200-f16acc", formats::fp16, 16, 15, -14},
        {"tc-b200-fp8-mma", formats::fp32, 16, 2, -14, 32}, {"tc-b200-fp8-mma-f16acc", formats::fp16, 16, 15, -14, 32},
    };
    for (const Tc& t : tcs) {
      const bool half = t.acc == formats::fp16, below32 = t.acc.precision < 24;  // fp16 or the fp8 register
      // The accumulator rounding is used only outside the adder: for promotion (C added last) to nearest.
      Accumulation tc = seq(t.acc, below32 || t.promote > 0 ? Rounding::NearestEven : Rounding::TowardZero);
      tc.adder = MultiTermAdder{t.group, t.extra, Rounding::TowardZero,
                                half ? Rounding::NearestEven : Rounding::TowardZero, 6, AdderAnchor::ExponentSum,
                                t.emin, below32 ? AdderEdges::Ieee : AdderEdges::InfPositiveZero};
      if (t.promote > 0) {
        tc.promote_every = t.promote;
        tc.promote_format = t.acc;
        tc.adder.feed = AdderFeed::EvenPairsFirst;
      }
      v.push_back({t.name, tc});
    }
    // The ANE accumulator as the reverse-engineered ane-guide describes it (docs/numerics.md): exact tiles of 4
    // terms rounded to fp16 (toward zero: the mode that reproduces its 4096 + 1024·1 = 5116 example) feeding an
    // fp32 accumulator.
    Accumulation ane = seq(formats::fp32);
    ane.tile = TileStage{4, formats::fp16, Rounding::TowardZero};
    v.push_back({"ane-tile4", ane});
    // The M1 ANE flushes subnormals inside the multiply-accumulate (ane-guide part 1 ch. 3: two fp16 denormals
    // summed in a matmul give +0): subnormal fp16 tile values become zeros of their sign.
    Accumulation ftz = ane;
    ftz.flush.tile = true;
    v.push_back({"ane-tile4-ftz", ftz});
    return v;
  }();
  return list;
}

std::string preset_list() {
  std::string s;
  for (const auto& p : presets()) s += (s.empty() ? "" : ", ") + p.name;
  return s;
}

constexpr const char* kKeysHelp =
    "keys: acc=FORMAT[:ROUNDING], order=seq|reverse|pairwise|kahan|blocked:B, outer=FORMAT, fused, unfused, "
    "product=FORMAT, promote=N[:FORMAT], group=G, extra=E, align=ROUNDING, normalize=ROUNDING, carry=C, "
    "anchor=lead|exp-sum:EMIN, edges=ieee|inf-pos-zero, feed=in-order|even-pairs-first, "
    "tile=G[:FORMAT][:ROUNDING], splitk=S[:G[:ROUNDING]], flush=none|tile|step[:FORMAT]|tile+step[:FORMAT]";

[[noreturn]] void fail(std::string_view text, const std::string& why) {
  throw std::invalid_argument("bad accumulation '" + std::string(text) + "': " + why + " (presets: " +
                              preset_list() + "; or comma-separated " + kKeysHelp + ")");
}

bool is_rounding_name(std::string_view s) {
  for (Rounding r : kAllRoundings)
    if (name_of(r) == s) return true;
  return false;
}

int parse_count(std::string_view text, std::string_view token, std::string_view what) {
  int v = 0;
  bool ok = !what.empty() && !token.empty();
  for (char c : token) {
    if (c < '0' || c > '9' || v > 100000000) {
      ok = false;
      break;
    }
    v = v * 10 + (c - '0');
  }
  if (!ok) fail(text, "'" + std::string(token) + "' is not a non-negative integer for " + std::string(what));
  return v;
}

int parse_signed(std::string_view text, std::string_view token, std::string_view what) {
  const bool neg = token.starts_with('-');
  const std::string_view digits = neg ? token.substr(1) : token;
  if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string_view::npos)
    fail(text, "'" + std::string(token) + "' is not an integer for " + std::string(what));
  const int v = parse_count(text, digits, what);
  return neg ? -v : v;
}

Format parse_format_in(std::string_view text, std::string_view token) {
  try {
    return parse_format(token);
  } catch (const std::invalid_argument& e) {
    fail(text, e.what());
  }
}

Rounding parse_rounding_in(std::string_view text, std::string_view token) {
  try {
    return parse_rounding(token);
  } catch (const std::invalid_argument& e) {
    fail(text, e.what());
  }
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

const std::vector<std::string>& preset_accumulation_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& p : presets()) v.push_back(p.name);
    return v;
  }();
  return names;
}

namespace {
constexpr int kMaxSplitK = 1 << 20;  ///< largest splitk count and granule
}  // namespace

std::optional<std::string> validate(const Accumulation& a) {
  for (const Format* f : {&a.format, &a.product_format, &a.outer_format, &a.promote_format, &a.tile.format})
    if (auto why = validate(*f)) return "format " + name_of(*f) + ": " + *why;
  if (a.order == Order::Blocked && a.block <= 0) return std::string("order=blocked needs a block size >= 1");
  if (a.order != Order::Blocked && a.block != 0) return std::string("a block size is only meaningful with order=blocked");
  if (a.promote_every < 0) return std::string("promote_every must be >= 0");
  if (a.promote_every > 0 && a.order != Order::Sequential && a.order != Order::Reverse)
    return std::string("promotion applies to order=seq or order=reverse only (blocked is split-K already)");
  const MultiTermAdder& m = a.adder;
  if (m.group < 0 || m.group > 256) return std::string("adder group must be in 0..256");
  if (m.group > 0) {
    if (a.order != Order::Sequential && a.order != Order::Reverse)
      return std::string("a multi-term adder runs in order=seq or order=reverse only");
    if (m.extra_bits < 0 || m.extra_bits > 64) return std::string("adder extra bits must be in 0..64");
    if (m.carry_bits < 0 || m.carry_bits > 8) return std::string("adder carry bits must be in 0..8");
    if (m.align != Rounding::TowardZero && m.align != Rounding::NearestEven)
      return std::string("adder alignment rounding must be toward-zero or nearest-even");
    if (m.normalize == Rounding::Stochastic) return std::string("adder normalisation cannot be stochastic");
    if (m.anchor == AdderAnchor::ExponentSum && (m.input_emin < -1074 || m.input_emin > -1))
      return std::string("anchor=exp-sum needs the input format's emin in -1074..-1");
    if (m.anchor == AdderAnchor::LeadingBit && m.input_emin != 0)
      return std::string("an input emin is only meaningful with anchor=exp-sum");
    if (m.feed == AdderFeed::EvenPairsFirst && m.group % 2 != 0)
      return std::string("feed=even-pairs-first needs an even group (each step takes g of a block's 2g terms)");
    if (m.edges == AdderEdges::InfPositiveZero && (a.format.specials != Specials::Ieee || a.format.saturate))
      return std::string("edges=inf-pos-zero needs an accumulator format with infinities that does not saturate");
  } else if (!(m == MultiTermAdder{})) {
    return std::string("adder parameters are set but group is 0");
  }
  const TileStage& t = a.tile;
  if (t.size < 0 || t.size > 256) return std::string("tile size must be in 0..256");
  if (t.size > 0) {
    if (a.order != Order::Sequential && a.order != Order::Reverse)
      return std::string("a tile stage runs in order=seq or order=reverse only");
    if (m.group > 0) return std::string("a tile stage and a multi-term adder cannot be combined");
    if (a.promote_every > 0) return std::string("a tile stage and promotion cannot be combined");
    if (t.rounding == Rounding::Stochastic) return std::string("tile rounding cannot be stochastic");
  } else if (!(t == TileStage{})) {
    return std::string("tile parameters are set but the tile size is 0");
  }
  const SplitK& sk = a.splitk;
  if (sk.count < 0 || sk.count > kMaxSplitK) return "splitk count must be in 0.." + std::to_string(kMaxSplitK);
  if (sk.count > 0) {
    if (a.order == Order::Blocked)
      return std::string("splitk and order=blocked cannot be combined (blocked is a split-K with a fixed chunk length)");
    if (sk.granule < 1 || sk.granule > kMaxSplitK)
      return "splitk granule must be in 1.." + std::to_string(kMaxSplitK);
  } else if (!(sk == SplitK{})) {
    return std::string("splitk parameters are set but its count is 0");
  }
  const AccumFlush& fl = a.flush;
  if (fl.step_format) {
    if (!fl.step) return std::string("a flush step format is set but the step flush is off");
    if (auto why = validate(*fl.step_format)) return "format " + name_of(*fl.step_format) + ": " + *why;
  }
  if (fl.tile && t.size == 0) return std::string("flush=tile needs a tile stage (tile=G)");
  if (fl.step) {
    if (a.order != Order::Sequential && a.order != Order::Reverse)
      return "flush=step applies to order=seq or order=reverse only, not order=" + std::string(name_of(a.order));
    if (m.group > 0) return std::string("flush=step and a multi-term adder cannot be combined");
    if (a.promote_every > 0) return std::string("flush=step and promotion cannot be combined");
    if (sk.count > 0) return std::string("flush=step and splitk cannot be combined");
  }
  return std::nullopt;
}

std::size_t splitk_chunk(const SplitK& s, std::size_t n) {
  if (s.count <= 0 || n == 0) return n;
  const auto g = static_cast<std::size_t>(std::max(s.granule, 1));
  const std::size_t span = g * static_cast<std::size_t>(s.count);
  return g * ((n + span - 1) / span);
}

void check_valid(const Accumulation& a) {
  if (auto why = validate(a)) throw std::invalid_argument("invalid accumulation: " + *why);
}

Format result_format(const Accumulation& a) {
  if (a.order == Order::Blocked || a.splitk.count > 0) return a.outer_format;
  if (a.promote_every > 0) return a.promote_format;
  return a.format;
}

std::string canonical(const Accumulation& a) {
  for (const auto& p : presets())
    if (p.acc == a) return p.name;
  return spec_text(a);
}

std::string spec_text(const Accumulation& a) {
  const Accumulation d{};
  std::string s = "acc=" + name_of(a.format) + ":" + std::string(name_of(a.rounding));
  s += ",order=" + std::string(name_of(a.order));
  if (a.order == Order::Blocked || a.block != 0) s += ":" + std::to_string(a.block);
  if (a.order == Order::Blocked || a.splitk.count > 0 || !(a.outer_format == d.outer_format))
    s += ",outer=" + name_of(a.outer_format);
  s += a.fused ? ",fused" : ",unfused";
  if (!a.fused || !(a.product_format == d.product_format)) s += ",product=" + name_of(a.product_format);
  if (a.promote_every != 0 || !(a.promote_format == d.promote_format))
    s += ",promote=" + std::to_string(a.promote_every) + ":" + name_of(a.promote_format);
  if (!(a.adder == MultiTermAdder{})) {
    s += ",group=" + std::to_string(a.adder.group) + ",extra=" + std::to_string(a.adder.extra_bits) +
         ",align=" + std::string(name_of(a.adder.align)) + ",normalize=" + std::string(name_of(a.adder.normalize)) +
         ",carry=" + std::to_string(a.adder.carry_bits);
    if (a.adder.anchor != AdderAnchor::LeadingBit || a.adder.input_emin != 0)
      s += ",anchor=" + std::string(name_of(a.adder.anchor)) + ":" + std::to_string(a.adder.input_emin);
    if (a.adder.edges != AdderEdges::Ieee) s += ",edges=" + std::string(name_of(a.adder.edges));
    if (a.adder.feed != AdderFeed::InOrder) s += ",feed=" + std::string(name_of(a.adder.feed));
  }
  if (!(a.tile == TileStage{}))
    s += ",tile=" + std::to_string(a.tile.size) + ":" + name_of(a.tile.format) + ":" +
         std::string(name_of(a.tile.rounding));
  if (!(a.splitk == SplitK{}))
    s += ",splitk=" + std::to_string(a.splitk.count) + ":" + std::to_string(a.splitk.granule) + ":" +
         std::string(name_of(a.splitk.rounding));
  if (!(a.flush == AccumFlush{})) {
    // flush.step_format without flush.step is invalid; printed anyway, parse_accumulation refuses it.
    s += ",flush=";
    if (a.flush.tile) s += "tile";
    if (a.flush.step || a.flush.step_format) s += a.flush.tile ? "+step" : "step";
    if (a.flush.step_format) s += ":" + name_of(*a.flush.step_format);
  }
  return s;
}

Accumulation parse_accumulation(std::string_view text) {
  const std::string_view whole = trim(text);
  for (const auto& p : presets())
    if (p.name == whole) return p.acc;
  if (whole.empty()) fail(text, "empty text");
  Accumulation a;
  std::size_t pos = 0;
  bool first = true;
  std::vector<std::string> seen;  // each key (and fused/unfused) once: acc=fp16,acc=fp32 used to keep the last
  while (pos <= whole.size()) {
    std::size_t next = whole.find(',', pos);
    if (next == std::string_view::npos) next = whole.size();
    const std::string_view tok = trim(whole.substr(pos, next - pos));
    pos = next + 1;
    if (tok.empty()) fail(text, "empty token");
    const std::size_t eq = tok.find('=');
    {
      const std::string kind = eq != std::string_view::npos ? std::string(tok.substr(0, eq))
                               : (tok == "fused" || tok == "unfused") ? std::string("fused/unfused")
                                                                     : std::string();
      if (!kind.empty()) {
        if (std::find(seen.begin(), seen.end(), kind) != seen.end())
          fail(text, "'" + std::string(tok) + "' repeats or contradicts an earlier " + kind +
                         " token (give each key once, and at most one of fused, unfused)");
        seen.push_back(kind);
      }
    }
    if (eq == std::string_view::npos) {
      if (tok == "fused") {
        a.fused = true;
      } else if (tok == "unfused") {
        a.fused = false;
      } else {
        bool found = false;
        if (first)
          for (const auto& p : presets())
            if (p.name == tok) {
              a = p.acc;
              found = true;
            }
        if (!found) fail(text, "unknown token '" + std::string(tok) + "'");
      }
      first = false;
      continue;
    }
    first = false;
    const std::string_view key = tok.substr(0, eq), val = tok.substr(eq + 1);
    if (key == "acc") {
      const std::size_t colon = val.rfind(':');
      if (colon != std::string_view::npos && is_rounding_name(val.substr(colon + 1))) {
        a.format = parse_format_in(text, val.substr(0, colon));
        a.rounding = parse_rounding_in(text, val.substr(colon + 1));
      } else {
        a.format = parse_format_in(text, val);
      }
    } else if (key == "order") {
      a.block = 0;
      if (val == "seq" || val == "sequential") a.order = Order::Sequential;
      else if (val == "reverse") a.order = Order::Reverse;
      else if (val == "pairwise") a.order = Order::Pairwise;
      else if (val == "kahan") a.order = Order::Kahan;
      else if (val.starts_with("blocked:")) {
        a.order = Order::Blocked;
        a.block = parse_count(text, val.substr(8), "the block size");
      } else {
        fail(text, "unknown order '" + std::string(val) + "' (valid: seq, reverse, pairwise, kahan, blocked:B)");
      }
    } else if (key == "outer") {
      a.outer_format = parse_format_in(text, val);
    } else if (key == "product") {
      a.product_format = parse_format_in(text, val);
    } else if (key == "promote") {
      const std::size_t colon = val.find(':');
      a.promote_every = parse_count(text, val.substr(0, colon), "promote");
      if (colon != std::string_view::npos) a.promote_format = parse_format_in(text, val.substr(colon + 1));
    } else if (key == "group") {
      a.adder.group = parse_count(text, val, "group");
    } else if (key == "extra") {
      a.adder.extra_bits = parse_count(text, val, "extra");
    } else if (key == "carry") {
      a.adder.carry_bits = parse_count(text, val, "carry");
    } else if (key == "align") {
      a.adder.align = parse_rounding_in(text, val);
    } else if (key == "normalize") {
      a.adder.normalize = parse_rounding_in(text, val);
    } else if (key == "edges") {
      if (val == "ieee") a.adder.edges = AdderEdges::Ieee;
      else if (val == "inf-pos-zero") a.adder.edges = AdderEdges::InfPositiveZero;
      else fail(text, "unknown edges '" + std::string(val) + "' (valid: ieee, inf-pos-zero)");
    } else if (key == "feed") {
      if (val == "in-order") a.adder.feed = AdderFeed::InOrder;
      else if (val == "even-pairs-first") a.adder.feed = AdderFeed::EvenPairsFirst;
      else fail(text, "unknown feed '" + std::string(val) + "' (valid: in-order, even-pairs-first)");
    } else if (key == "anchor") {
      if (val == "lead") {
        a.adder.anchor = AdderAnchor::LeadingBit;
        a.adder.input_emin = 0;
      } else if (val.starts_with("exp-sum:")) {
        a.adder.anchor = AdderAnchor::ExponentSum;
        a.adder.input_emin = parse_signed(text, val.substr(8), "the anchor's input emin");
      } else {
        fail(text, "unknown anchor '" + std::string(val) +
                       "' (valid: lead, exp-sum:EMIN, e.g. exp-sum:-14 for fp16 inputs)");
      }
    } else if (key == "tile") {
      // G[:FORMAT][:ROUNDING]; a custom FORMAT has colons of its own, so the rounding is split off the end.
      const std::size_t colon = val.find(':');
      a.tile = TileStage{};
      a.tile.size = parse_count(text, val.substr(0, colon), "tile");
      if (colon != std::string_view::npos) {
        std::string_view rest = val.substr(colon + 1);
        const std::size_t last = rest.rfind(':');
        const std::string_view tail = last == std::string_view::npos ? rest : rest.substr(last + 1);
        if (is_rounding_name(tail)) {
          a.tile.rounding = parse_rounding_in(text, tail);
          rest = last == std::string_view::npos ? std::string_view{} : rest.substr(0, last);
        }
        if (!rest.empty()) a.tile.format = parse_format_in(text, rest);
      }
    } else if (key == "splitk") {
      // S[:G[:ROUNDING]]
      const std::size_t c1 = val.find(':');
      a.splitk = SplitK{};
      a.splitk.count = parse_count(text, val.substr(0, c1), "the splitk count");
      if (c1 != std::string_view::npos) {
        const std::string_view rest = val.substr(c1 + 1);
        const std::size_t c2 = rest.find(':');
        a.splitk.granule = parse_count(text, rest.substr(0, c2), "the splitk granule");
        if (c2 != std::string_view::npos) a.splitk.rounding = parse_rounding_in(text, rest.substr(c2 + 1));
      }
    } else if (key == "flush") {
      // none | tile | step[:FORMAT] | tile+step[:FORMAT]
      a.flush = AccumFlush{};
      const std::size_t colon = val.find(':');
      const std::string_view what = val.substr(0, colon);
      if (what == "tile" || what == "tile+step") a.flush.tile = true;
      if (what == "step" || what == "tile+step") a.flush.step = true;
      const bool known = what == "none" || what == "tile" || what == "step" || what == "tile+step";
      if (!known || (colon != std::string_view::npos && !a.flush.step))
        fail(text, "unknown flush '" + std::string(val) +
                       "' (valid: none, tile, step, step:FORMAT, tile+step, tile+step:FORMAT)");
      if (colon != std::string_view::npos) a.flush.step_format = parse_format_in(text, val.substr(colon + 1));
    } else {
      fail(text, "unknown key '" + std::string(key) + "'");
    }
  }
  if (auto why = validate(a)) fail(text, *why);
  return a;
}

// ---------------------------------------------------------------------------------------------------------------
// The reduction engine
// ---------------------------------------------------------------------------------------------------------------

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();


int bit_length(u128 m) {
  const auto hi = static_cast<std::uint64_t>(m >> 64);
  if (hi) return 128 - std::countl_zero(hi);
  return 64 - std::countl_zero(static_cast<std::uint64_t>(m));
}

/// m / 2^k rounded toward zero or to nearest-even (k >= 0).
u128 shift_round(u128 m, int k, Rounding mode) {
  if (k == 0) return m;
  if (k >= 128) return 0;  // m < 2^127 here, so strictly below half of 2^k in the nearest case too
  u128 q = m >> k;
  if (mode == Rounding::NearestEven) {
    const u128 r = m & ((u128{1} << k) - 1), half = u128{1} << (k - 1);
    if (r > half || (r == half && (q & 1) != 0)) ++q;
  }
  return q;
}

/// An addend of the multi-term adder: (-1)^neg·m·2^exp, m != 0; top = exponent of the leading bit; anchor = the
/// exponent it is aligned by (top, or a fused product's exponent sum under AdderAnchor::ExponentSum).
struct Addend {
  bool neg;
  u128 m;
  int exp;
  int top;
  int anchor;
};

struct SumSource {
  const double* x;
  std::ptrdiff_t incx;
  static constexpr bool kDot = false;
  double xv(std::size_t i) const { return x[static_cast<std::ptrdiff_t>(i) * incx]; }
  double yv(std::size_t) const { return 1.0; }
  /// The terms from position `k` on.
  SumSource from(std::size_t k) const { return {x + static_cast<std::ptrdiff_t>(k) * incx, incx}; }
};

struct DotSource {
  const double* x;
  std::ptrdiff_t incx;
  const double* y;
  std::ptrdiff_t incy;
  static constexpr bool kDot = true;
  double xv(std::size_t i) const { return x[static_cast<std::ptrdiff_t>(i) * incx]; }
  double yv(std::size_t i) const { return y[static_cast<std::ptrdiff_t>(i) * incy]; }
  /// The terms from position `k` on.
  DotSource from(std::size_t k) const {
    const auto o = static_cast<std::ptrdiff_t>(k);
    return {x + o * incx, incx, y + o * incy, incy};
  }
};

/// The format with one more binade and IEEE overflow: rounding there tells whether a result "would have exceeded
/// max_finite were the exponent range unbounded" (IEEE 754 §7.4). Absent for formats already at binary64's top.
std::optional<RoundingPlan> probe_plan(const Format& f) {
  if (f.emax >= 1023) return std::nullopt;
  Format g = f;
  g.emax = f.emax + 1;
  g.saturate = false;
  g.specials = Specials::Ieee;
  return RoundingPlan(g);
}

/// Plans built once per sum/dot/gemm call.
struct Plans {
  explicit Plans(const Accumulation& spec)
      : a(spec), acc(spec.format), product(spec.product_format), outer(spec.outer_format),
        promote(spec.promote_format), tile(spec.tile.format), acc_probe(probe_plan(spec.format)),
        product_probe(probe_plan(spec.product_format)), outer_probe(probe_plan(spec.outer_format)),
        promote_probe(probe_plan(spec.promote_format)), tile_probe(probe_plan(spec.tile.format)),
        tile_flush_below(std::ldexp(1.0, spec.tile.format.emin)),
        step_flush_below(std::ldexp(1.0, spec.flush.step_format.value_or(spec.format).emin)) {}
  Accumulation a;
  RoundingPlan acc, product, outer, promote, tile;
  std::optional<RoundingPlan> acc_probe, product_probe, outer_probe, promote_probe, tile_probe;
  double tile_flush_below, step_flush_below;  ///< 2^emin of the tile format and of the step flush's format
  const std::optional<RoundingPlan>& probe(const RoundingPlan& pl) const {
    if (&pl == &acc) return acc_probe;
    if (&pl == &product) return product_probe;
    if (&pl == &outer) return outer_probe;
    if (&pl == &tile) return tile_probe;
    return promote_probe;
  }
};

/// One reduction: every rounding draws index `step` (then step + 1), in the order the algorithm defines.
template <class Src>
class Run {
 public:
  Run(const Plans& p, const Src& src, std::size_t n, StochasticBits bits)
      : p_(p), a_(p.a), src_(src), n_(n), bits_(bits),
        stochastic_(p.a.rounding == Rounding::Stochastic || p.a.splitk.rounding == Rounding::Stochastic) {}

  double reduce(bool has_init, double init) {
    if (a_.splitk.count > 0) return split(has_init, init);
    return reduce_whole(has_init, init);
  }
  std::int64_t overflows() const { return overflows_; }

 private:
  /// The reduction without split-K (a whole reduction, or one split-K chunk).
  double reduce_whole(bool has_init, double init) {
    if (a_.adder.group > 0) return adder_reduce(has_init, init);
    if (a_.tile.size > 0) return tiled(has_init, init);
    switch (a_.order) {
      case Order::Sequential:
      case Order::Reverse:
        return a_.promote_every > 0 ? promoted(has_init, init) : sequential(0, n_, has_init, init);
      case Order::Pairwise: {
        if (n_ == 0) return has_init ? init : 0.0;
        const double t = tree(0, n_);
        return has_init ? add(p_.acc, init, t) : t;
      }
      case Order::Blocked: return blocked(has_init, init);
      case Order::Kahan: return kahan(has_init, init);
    }
    return 0.0;
  }

  /// Split-K: each chunk reduced alone by a Run over its terms (its roundings continue this run's draw
  /// indices), the chunk results summed in chunk order in the outer format with splitk.rounding.
  double split(bool has_init, double init) {
    const Rounding mode = a_.splitk.rounding;
    const std::size_t len = splitk_chunk(a_.splitk, n_);
    double total = init;
    bool have = has_init;
    for (std::size_t c = 0; c < n_; c += len) {
      const Src chunk = src_.from(c);
      Run inner(p_, chunk, std::min(n_, c + len) - c, bits_);
      inner.step_ = step_;
      const double part = inner.reduce_whole(false, 0.0);
      step_ = inner.step_;
      overflows_ += inner.overflows_;
      total = have ? add(p_.outer, mode, total, part) : round(p_.outer, mode, part);
      have = true;
    }
    return have ? total : 0.0;
  }

  std::uint64_t draw() {
    const std::uint64_t k = step_++;
    return stochastic_ ? bits_.draw(k) : 0;
  }
  std::size_t index(std::size_t k) const { return a_.order == Order::Reverse ? n_ - 1 - k : k; }

  // Rounded operations that count overflows (IEEE 754 §7.4): the operands are finite and the result rounded as
  // if the exponent range were unbounded exceeds max_finite (so the result is inf, NaN for NaN-only formats, or
  // ±max_finite when saturating or rounding toward zero). Only results that are not finite or are ±max_finite
  // need the probe: the same rounding (same mode and draw) in the format with one more binade.
  template <class Op>
  void count(const RoundingPlan& pl, double r, bool finite_operands, Op&& op) {
    if (!finite_operands) return;
    if (!std::isfinite(r)) {
      ++overflows_;
      return;
    }
    if (std::fabs(r) != pl.max_finite) return;
    const auto& probe = p_.probe(pl);
    if (probe && std::fabs(op(*probe)) > pl.max_finite) ++overflows_;
  }
  /// Fast round-to-nearest-even of the exact value hi + lo (a TwoSum/TwoProduct pair, |lo| <= ulp(hi)/2) for the
  /// common case: |hi| in [min_normal, max_finite) of a format with p <= 50 and a moderate exponent range. hi is
  /// rounded to a multiple of its quantum q = 2^(⌊log2|hi|⌋−p+1) by (hi + C) − C, C = 1.5·2^52·q (the sum's ulp is
  /// q, so binary64's ties-to-even is the format's); p-bit midpoints are binary64 values, so hi + lo and hi round
  /// alike unless hi is a midpoint and lo != 0, when lo's sign picks the neighbour. Returns false otherwise (the
  /// caller uses the general path); the twin tests cover both.
  bool fast_nearest(const RoundingPlan& pl, Rounding mode, double hi, double lo, double& r) const {
    if (mode != Rounding::NearestEven) return false;
    const Format& f = pl.format;
    if (f.precision > 50 || f.emax > 900 || f.emin - f.precision + 1 < -1000) return false;
    const double mag = std::fabs(hi);
    if (!(mag >= pl.min_normal && mag < pl.max_finite)) return false;
    const int e = static_cast<int>((std::bit_cast<std::uint64_t>(hi) >> 52) & 0x7FF) - 1023;
    const double q = std::bit_cast<double>(static_cast<std::uint64_t>(e - f.precision + 1 + 1023) << 52);
    const double c = q * 0x1.8p52;
    double v = (hi + c) - c;
    const double d = hi - v;  // exact: both are multiples of 2^(e−52) within q/2
    if (lo != 0 && std::fabs(d) == 0.5 * q && (d > 0) == (lo > 0)) v += 2 * d;
    r = v;
    return true;
  }

  double round(const RoundingPlan& pl, double v) { return round(pl, a_.rounding, v); }
  double round(const RoundingPlan& pl, Rounding mode, double v) {
    const std::uint64_t d = draw();
    double r;
    if (fast_nearest(pl, mode, v, 0.0, r)) return r;
    r = round_to(pl, mode, v, d);
    count(pl, r, std::isfinite(v), [&](const RoundingPlan& q) { return round_to(q, mode, v, d); });
    return r;
  }
  double add(const RoundingPlan& pl, double x, double y) { return add(pl, a_.rounding, x, y); }
  double add(const RoundingPlan& pl, Rounding mode, double x, double y) {
    const std::uint64_t d = draw();
    double r, hi, lo;
    two_sum(x, y, hi, lo);
    if (std::isfinite(hi) && fast_nearest(pl, mode, hi, lo, r)) return r;
    r = numerics::add(pl, mode, x, y, d);
    count(pl, r, std::isfinite(x) && std::isfinite(y),
          [&](const RoundingPlan& q) { return numerics::add(q, mode, x, y, d); });
    return r;
  }
  double sub(const RoundingPlan& pl, double x, double y) { return add(pl, x, -y); }
  double mul(const RoundingPlan& pl, double x, double y) {
    const std::uint64_t d = draw();
    double r, hi, lo;
    two_prod(x, y, hi, lo);
    if (lo == 0 && std::isfinite(hi) && std::fabs(hi) >= 0x1p-960 && fast_nearest(pl, a_.rounding, hi, 0.0, r))
      return r;
    r = numerics::mul(pl, a_.rounding, x, y, d);
    count(pl, r, std::isfinite(x) && std::isfinite(y),
          [&](const RoundingPlan& q) { return numerics::mul(q, a_.rounding, x, y, d); });
    return r;
  }
  double fma(const RoundingPlan& pl, double x, double y, double z) {
    const std::uint64_t d = draw();
    double r, p, pe;
    two_prod(x, y, p, pe);
    if (pe == 0 && std::isfinite(p) && std::fabs(p) >= 0x1p-960 && std::isfinite(z)) {
      double hi, lo;
      two_sum(p, z, hi, lo);
      if (std::isfinite(hi) && fast_nearest(pl, a_.rounding, hi, lo, r)) return r;
    }
    r = numerics::fma(pl, a_.rounding, x, y, z, d);
    count(pl, r, std::isfinite(x) && std::isfinite(y) && std::isfinite(z),
          [&](const RoundingPlan& q) { return numerics::fma(q, a_.rounding, x, y, z, d); });
    return r;
  }

  /// Unfused product: x_i·y_i rounded to the product format.
  double product(std::size_t i) { return mul(p_.product, src_.xv(i), src_.yv(i)); }
  /// The first value of a partial sum: round(t_i) in the accumulator format.
  double first(std::size_t i) {
    if constexpr (!Src::kDot) return round(p_.acc, src_.xv(i));
    if (a_.fused) return mul(p_.acc, src_.xv(i), src_.yv(i));
    return round(p_.acc, product(i));
  }
  /// round(s + t_i) in the accumulator format.
  double mac(double s, std::size_t i) {
    if constexpr (!Src::kDot) return add(p_.acc, s, src_.xv(i));
    if (a_.fused) return fma(p_.acc, src_.xv(i), src_.yv(i), s);
    const double t = product(i);
    return add(p_.acc, s, t);
  }
  /// round(t_i - c) in the accumulator format (Kahan's corrected term).
  double minus(std::size_t i, double c) {
    if constexpr (!Src::kDot) return sub(p_.acc, src_.xv(i), c);
    if (a_.fused) return fma(p_.acc, src_.xv(i), src_.yv(i), -c);
    const double t = product(i);
    return sub(p_.acc, t, c);
  }

  /// The subnormal flush: v when |v| >= below (or v is 0 or NaN), else a zero with v's sign.
  static double flushed(double v, double below) { return std::fabs(v) < below ? std::copysign(0.0, v) : v; }

  /// Processing positions [k0, k1) summed one after another, starting from init when given.
  double sequential(std::size_t k0, std::size_t k1, bool has_init, double init) {
    double s = init;
    bool have = has_init;
    for (std::size_t k = k0; k < k1; ++k) {
      const std::size_t i = index(k);
      s = have ? mac(s, i) : first(i);
      if (a_.flush.step) s = flushed(s, p_.step_flush_below);
      have = true;
    }
    return have ? s : 0.0;
  }

  double promoted(bool has_init, double init) {
    double total = init;
    bool have = has_init;
    const auto every = static_cast<std::size_t>(a_.promote_every);
    for (std::size_t c = 0; c < n_; c += every) {
      const double part = sequential(c, std::min(n_, c + every), false, 0.0);
      total = have ? add(p_.promote, total, part) : round(p_.promote, part);
      have = true;
    }
    return have ? total : 0.0;
  }

  double tree(std::size_t lo, std::size_t count) {
    if (count == 1) return first(lo);
    const std::size_t half = count / 2;
    const double left = tree(lo, half);
    const double right = tree(lo + half, count - half);
    return add(p_.acc, left, right);
  }

  double blocked(bool has_init, double init) {
    double total = init;
    bool have = has_init;
    const auto b = static_cast<std::size_t>(a_.block);
    for (std::size_t c = 0; c < n_; c += b) {
      const double part = sequential(c, std::min(n_, c + b), false, 0.0);
      total = have ? add(p_.outer, total, part) : round(p_.outer, part);
      have = true;
    }
    return have ? total : 0.0;
  }

  double kahan(bool has_init, double init) {
    if (n_ == 0) return has_init ? init : 0.0;
    std::size_t k = 0;
    double s = init;
    if (!has_init) s = first(index(k++));
    double c = 0.0;
    for (; k < n_; ++k) {
      const double y = minus(index(k), c);
      const double t = add(p_.acc, s, y);
      const double d = sub(p_.acc, t, s);
      c = sub(p_.acc, d, y);
      s = t;
    }
    return s;
  }

  // ---- multi-term fused adder ----

  static void push(std::vector<Addend>& v, bool neg, u128 m, int exp) {
    if (m == 0) return;
    const int top = exp + bit_length(m) - 1;
    v.push_back(Addend{neg, m, exp, top, top});
  }
  static void push_value(std::vector<Addend>& v, double x) {
    if (x == 0) return;
    std::uint64_t m;
    int e;
    split_double(x, m, e);
    push(v, std::signbit(x), m, e);
  }

  /// Non-finite terms of a multi-term step, kept apart from the exact addends.
  struct Nonfinite {
    bool any = false;
    bool operands_finite = true;  ///< false when some operand was not finite (no overflow is counted then)
    double sum = 0.0;             ///< their IEEE sum
    void add(double t) {
      any = true;
      operands_finite = false;
      sum += t;
    }
  };

  /// Appends the exact terms at processing positions [k0, k1) to addends_ (fused dots: the exact products;
  /// sums and unfused dots: the values, the products rounded first); non-finite terms go to `nf`.
  void collect(std::size_t k0, std::size_t k1, Nonfinite& nf, int pairs = -1) {
    for (std::size_t k = k0; k < k1; ++k) {
      if (pairs >= 0 && static_cast<int>(((k - k0) / 2) % 2) != pairs) continue;  // feed=even-pairs-first
      const std::size_t i = index(k);
      const double x = src_.xv(i), y = src_.yv(i);
      double t = x;
      if constexpr (Src::kDot) {
        if (a_.fused) {
          if (!std::isfinite(x) || !std::isfinite(y)) {
            nf.add(x * y);
          } else if (x != 0 && y != 0) {
            std::uint64_t mx, my;
            int ex, ey;
            split_double(x, mx, ex);
            split_double(y, my, ey);
            push(addends_, std::signbit(x) != std::signbit(y), u128{mx} * my, ex + ey);
            if (a_.adder.anchor == AdderAnchor::ExponentSum) {
              const int lo = a_.adder.input_emin;
              addends_.back().anchor = std::max(std::ilogb(x), lo) + std::max(std::ilogb(y), lo);
            }
          }
          continue;
        }
        if (!std::isfinite(x) || !std::isfinite(y)) nf.operands_finite = false;
        t = product(i);
      }
      if (!std::isfinite(t)) nf.add(t);
      else push_value(addends_, t);
    }
  }

  /// s + Σ_{k in [k0,k1)} t_index(k) in one multi-term operation (see accumulate.hpp); pairs = 0 or 1 takes only
  /// the positions k with floor((k − k0)/2) of that parity.
  double adder_step(double s, std::size_t k0, std::size_t k1, int pairs = -1) {
    const MultiTermAdder& ad = a_.adder;
    addends_.clear();
    Nonfinite nf;
    if (std::isfinite(s)) push_value(addends_, s);
    else nf.add(s);
    collect(k0, k1, nf, pairs);
    const bool special = nf.any, operands_finite = nf.operands_finite;
    const double special_sum = nf.sum;
    if (special) return round_to(p_.acc, ad.normalize, special_sum);
    if (addends_.empty()) return 0.0;
    int top = addends_[0].anchor;
    for (const Addend& v : addends_) top = std::max(top, v.anchor);
    const int p = a_.format.precision;
    int q = top - (p - 1) - ad.extra_bits;  // weight of the last bit kept in alignment
    __extension__ typedef __int128 i128;
    i128 sum = 0;
    for (const Addend& v : addends_) {
      const int sh = q - v.exp;
      const u128 aligned = sh <= 0 ? v.m << (-sh) : shift_round(v.m, sh, ad.align);
      sum += v.neg ? -static_cast<i128>(aligned) : static_cast<i128>(aligned);
    }
    if (sum == 0) return 0.0;
    const bool neg = sum < 0;
    u128 mag = static_cast<u128>(neg ? -sum : sum);
    const int width = p + ad.extra_bits + ad.carry_bits;  // the register: carry bits above the leading position
    const int len = bit_length(mag);
    if (len > width) {
      mag = shift_round(mag, len - width, ad.align);
      q += len - width;
    }
    const ExactParts parts{neg, mag, q, false};
    double r = round_parts(p_.acc, ad.normalize, parts);
    count(p_.acc, r, operands_finite, [&](const RoundingPlan& pl) { return round_parts(pl, ad.normalize, parts); });
    if (ad.edges == AdderEdges::InfPositiveZero) {
      if (r == 0) return 0.0;
      if (q + bit_length(mag) - 1 > a_.format.emax) return neg ? -HUGE_VAL : HUGE_VAL;
    }
    return r;
  }

  // ---- exact tile stage ----

  /// The exact sum of the terms at processing positions [k0, k1), rounded once to the tile format.
  double tile_value(std::size_t k0, std::size_t k1) {
    const TileStage& ts = a_.tile;
    double fast = 0;
    if (fast_tile(k0, k1, fast)) return fast;
    addends_.clear();
    Nonfinite nf;
    collect(k0, k1, nf);
    const bool special = nf.any, operands_finite = nf.operands_finite;
    const double special_sum = nf.sum;
    if (special) return round_to(p_.tile, ts.rounding, special_sum);
    if (addends_.empty()) return 0.0;
    const ExactParts parts = exact_tile_sum();
    if (parts.m == 0 && !parts.sticky) return 0.0;
    const double r = round_parts(p_.tile, ts.rounding, parts);
    count(p_.tile, r, operands_finite, [&](const RoundingPlan& pl) { return round_parts(pl, ts.rounding, parts); });
    return r;
  }

  /// The common case without building addends: every term (fused: the exact product, when binary64 holds it)
  /// finite and normal-sized, and their running binary64 sum exact at every step (TwoSum error 0), so the double
  /// sum is the exact tile sum; its rounding to the tile format then goes through round_to. A nonzero sum of
  /// magnitude in [2^-960, 2^960] keeps every product and sum away from binary64's subnormals and overflow.
  /// Returns false (the caller takes the exact path) otherwise; the twin tests cover both.
  bool fast_tile(std::size_t k0, std::size_t k1, double& r) {
    if constexpr (Src::kDot) {
      if (!a_.fused) return false;
    }
    double sum = 0;
    for (std::size_t k = k0; k < k1; ++k) {
      const std::size_t i = index(k);
      double t = src_.xv(i);
      if constexpr (Src::kDot) {
        double lo;
        const double y = src_.yv(i);
        two_prod(t, y, t, lo);
        if (lo != 0 || (t == 0 && src_.xv(i) != 0 && y != 0)) return false;  // inexact or underflowed
      }
      if (!(std::fabs(t) <= 0x1p960) || (t != 0 && std::fabs(t) < 0x1p-960)) return false;
      double hi, err;
      two_sum(sum, t, hi, err);
      if (err != 0) return false;
      sum = hi;
    }
    if (sum == 0) {
      r = 0.0;
      return true;
    }
    r = round_to(p_.tile, a_.tile.rounding, sum);
    count(p_.tile, r, true, [&](const RoundingPlan& pl) { return round_to(pl, a_.tile.rounding, sum); });
    return true;
  }

  /// Σ addends_ exactly, as parts: in one 128-bit integer when the addends span at most 120 bits (the common
  /// case: tiles of narrow-format products), else through the Kulisch accumulator.
  ExactParts exact_tile_sum() const {
    int lo = addends_[0].exp, top = addends_[0].top;
    for (const Addend& v : addends_) {
      lo = std::min(lo, v.exp);
      top = std::max(top, v.top);
    }
    if (top - lo + 1 + 9 <= 126) {  // ≤ 256 addends add at most 8 bits; one more for the sign
      __extension__ typedef __int128 i128;
      i128 sum = 0;
      for (const Addend& v : addends_) {
        const i128 m = static_cast<i128>(v.m << (v.exp - lo));
        sum += v.neg ? -m : m;
      }
      const bool neg = sum < 0;
      return ExactParts{neg, static_cast<u128>(neg ? -sum : sum), lo, false};
    }
    ExactSum exact;
    for (const Addend& v : addends_) exact.add_parts(v.neg, v.m, v.exp);
    return exact.parts();
  }

  double tiled(bool has_init, double init) {
    const auto g = static_cast<std::size_t>(a_.tile.size);
    double s = init;
    bool have = has_init;
    for (std::size_t k = 0; k < n_; k += g) {
      double t = tile_value(k, std::min(n_, k + g));
      if (a_.flush.tile) t = flushed(t, p_.tile_flush_below);
      s = have ? add(p_.acc, s, t) : round(p_.acc, t);
      if (a_.flush.step) s = flushed(s, p_.step_flush_below);
      have = true;
    }
    return have ? s : 0.0;
  }

  double adder_reduce(bool has_init, double init) {
    const auto g = static_cast<std::size_t>(a_.adder.group);
    const bool promote = a_.promote_every > 0;
    const std::size_t chunk = promote ? static_cast<std::size_t>(a_.promote_every) : std::max<std::size_t>(n_, 1);
    double total = init;
    bool have_total = has_init;
    double s = 0.0;
    for (std::size_t c = 0; c < n_; c += chunk) {
      const std::size_t end = std::min(n_, c + chunk);
      s = (!promote && has_init) ? init : 0.0;
      if (a_.adder.feed == AdderFeed::EvenPairsFirst) {
        for (std::size_t k = c; k < end; k += 2 * g) {
          const std::size_t block_end = std::min(end, k + 2 * g);
          s = adder_step(s, k, block_end, 0);
          if (block_end - k > 2) s = adder_step(s, k, block_end, 1);
        }
      } else {
        for (std::size_t k = c; k < end; k += g) s = adder_step(s, k, std::min(end, k + g));
      }
      if (promote) {
        total = have_total ? add(p_.promote, total, s) : round(p_.promote, s);
        have_total = true;
      }
    }
    if (promote) return have_total ? total : 0.0;
    if (n_ == 0) return has_init ? init : 0.0;
    return s;
  }

  const Plans& p_;
  const Accumulation& a_;
  const Src& src_;
  std::size_t n_;
  StochasticBits bits_;
  bool stochastic_;
  std::uint64_t step_ = 0;
  std::int64_t overflows_ = 0;
  std::vector<Addend> addends_;
};

template <class Src>
double run(const Plans& plans, const Src& src, std::size_t n, bool has_init, double init, StochasticBits bits,
           AccumStats* stats) {
  Run<Src> r(plans, src, n, bits);
  const double v = r.reduce(has_init, init);
  if (stats) {
    stats->overflows += r.overflows();
    stats->terms += static_cast<std::int64_t>(n);
  }
  return v;
}

/// The Plans of the last Accumulation this thread reduced under: ops call dot/sum once per output element
/// with the same Accumulation, and validating it and building eight RoundingPlans per call dominated short
/// reductions. Throws std::invalid_argument for an invalid Accumulation (checked when it is first seen).
/// Nothing inside a reduction calls back into sum/dot, so the reference stays valid for the whole call.
const Plans& plans_for(const Accumulation& a) {
  thread_local std::optional<Plans> last;
  if (!last || !(last->a == a)) {
    check_valid(a);
    last.emplace(a);
  }
  return *last;
}

}  // namespace

double sum(const Accumulation& a, std::span<const double> x, StochasticBits bits, AccumStats* stats) {
  const Plans& plans = plans_for(a);
  return run(plans, SumSource{x.data(), 1}, x.size(), false, 0.0, bits, stats);
}

double dot(const Accumulation& a, const double* x, std::ptrdiff_t incx, const double* y, std::ptrdiff_t incy,
           std::size_t n, StochasticBits bits, AccumStats* stats) {
  if (n > 0 && (x == nullptr || y == nullptr)) throw std::invalid_argument("dot: null operand with n > 0");
  const Plans& plans = plans_for(a);
  return run(plans, DotSource{x, incx, y, incy}, n, false, 0.0, bits, stats);
}

void gemm(const Accumulation& a, std::size_t M, std::size_t N, std::size_t K, ConstMatrix A, ConstMatrix B, double* C,
          std::size_t ldc, bool accumulate, StochasticBits bits, AccumStats* stats, int threads,
          const KernelOptions& opts, kernels::PackCache* cache) {
  check_valid(a);
  auto bad = [&](const std::string& why) {
    throw std::invalid_argument("gemm (M=" + std::to_string(M) + ", N=" + std::to_string(N) +
                                ", K=" + std::to_string(K) + "): " + why);
  };
  if (M == 0 || N == 0) return;
  if (C == nullptr) bad("C is null");
  if (ldc < N) bad("ldc = " + std::to_string(ldc) + " < N");
  if (K > 0) {
    if (A.data == nullptr || B.data == nullptr) bad("A or B is null");
    const std::size_t a_need = A.transposed ? M : K, b_need = B.transposed ? K : N;
    if (A.ld < a_need)
      bad("A" + std::string(A.transposed ? " (transposed, stored K×M)" : "") + " has ld = " + std::to_string(A.ld) +
          " < " + std::to_string(a_need));
    if (B.ld < b_need)
      bad("B" + std::string(B.transposed ? " (transposed, stored N×K)" : "") + " has ld = " + std::to_string(B.ld) +
          " < " + std::to_string(b_need));
  }
  if (threads < 0) bad("threads must be >= 0");
  if (a.rounding != Rounding::Stochastic && K > 0 &&
      kernels::gemm_fast(a, M, N, K, A, B, C, ldc, accumulate, stats, threads, nullptr, nullptr, opts, cache))
    return;
  const Plans plans(a);
  const int nt = threads == 0 ? omp_get_max_threads() : threads;
  const auto aincr = static_cast<std::ptrdiff_t>(A.transposed ? A.ld : 1);
  const auto bincr = static_cast<std::ptrdiff_t>(B.transposed ? 1 : B.ld);
  std::int64_t overflows = 0;
  const auto rows = static_cast<std::ptrdiff_t>(M);
#pragma omp parallel for num_threads(nt) schedule(static) reduction(+ : overflows)
  for (std::ptrdiff_t ii = 0; ii < rows; ++ii) {
    const auto i = static_cast<std::size_t>(ii);
    const double* arow = A.transposed ? A.data + i : A.data + i * A.ld;
    for (std::size_t j = 0; j < N; ++j) {
      const double* bcol = B.transposed ? B.data + j * B.ld : B.data + j;
      double& c = C[i * ldc + j];
      const StochasticBits sb{bits.seed, bits.stream + i * N + j};
      AccumStats local;
      c = run(plans, DotSource{arow, aincr, bcol, bincr}, K, accumulate, accumulate ? c : 0.0, sb, &local);
      overflows += local.overflows;
    }
  }
  if (stats) {
    stats->overflows += overflows;
    stats->terms += static_cast<std::int64_t>(M * N * K);
  }
}

void gemm_ranged(const Accumulation& a, std::size_t M, std::size_t N, std::size_t K, ConstMatrix A, ConstMatrix B,
                 std::span<const KRange> rows, double* C, std::size_t ldc, StochasticBits bits,
                 const KernelOptions& opts) {
  check_valid(a);
  auto bad = [&](const std::string& why) {
    throw std::invalid_argument("gemm_ranged (M=" + std::to_string(M) + ", N=" + std::to_string(N) +
                                ", K=" + std::to_string(K) + "): " + why);
  };
  if (rows.size() != M) bad("rows holds " + std::to_string(rows.size()) + " ranges, expected M");
  if (M == 0 || N == 0) return;
  if (C == nullptr || A.data == nullptr || B.data == nullptr) bad("A, B or C is null");
  if (ldc < N) bad("ldc = " + std::to_string(ldc) + " < N");
  const std::size_t a_need = A.transposed ? M : K, b_need = B.transposed ? K : N;
  if (A.ld < a_need) bad("A has ld = " + std::to_string(A.ld) + " < " + std::to_string(a_need));
  if (B.ld < b_need) bad("B has ld = " + std::to_string(B.ld) + " < " + std::to_string(b_need));
  for (std::size_t i = 0; i < M; ++i)
    if (!(rows[i].lo < rows[i].hi && rows[i].hi <= K))
      bad("row " + std::to_string(i) + " has k-range [" + std::to_string(rows[i].lo) + ", " +
          std::to_string(rows[i].hi) + "); valid ranges are nonempty and end at most at K");
  if (a.rounding != Rounding::Stochastic && kernels::gemm_ranged_fast(a, M, N, K, A, B, rows.data(), C, ldc, opts)) return;
  const Plans& plans = plans_for(a);
  const auto aincr = static_cast<std::ptrdiff_t>(A.transposed ? A.ld : 1);
  const auto bincr = static_cast<std::ptrdiff_t>(B.transposed ? 1 : B.ld);
  for (std::size_t i = 0; i < M; ++i) {
    const std::size_t lo = rows[i].lo;
    const double* arow = A.transposed ? A.data + lo * A.ld + i : A.data + i * A.ld + lo;
    for (std::size_t j = 0; j < N; ++j) {
      const double* bcol = B.transposed ? B.data + j * B.ld + lo : B.data + lo * B.ld + j;
      const StochasticBits sb{bits.seed, bits.stream + i * N + j};
      C[i * ldc + j] = run(plans, DotSource{arow, aincr, bcol, bincr}, rows[i].hi - lo, false, 0.0, sb, nullptr);
    }
  }
}

}  // namespace roundoff::numerics
