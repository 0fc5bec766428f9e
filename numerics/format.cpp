#include "numerics/format.hpp"

#include <bit>
#include <charconv>
#include <cmath>
#include <limits>
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace roundoff::numerics {

std::optional<std::string> validate(const Format& f) {
  if (f.precision < 2 || f.precision > 53)
    return "precision p=" + std::to_string(f.precision) + " must be in [2, 53]";
  if (f.emin >= f.emax)
    return "emin=" + std::to_string(f.emin) + " must be less than emax=" + std::to_string(f.emax);
  if (f.emin > 0) return "emin=" + std::to_string(f.emin) + " must be <= 0";
  if (f.emax < 0) return "emax=" + std::to_string(f.emax) + " must be >= 0";
  if (f.emin < -1022) return "emin=" + std::to_string(f.emin) + " must be >= -1022 (binary64 range)";
  if (f.emax > 1023) return "emax=" + std::to_string(f.emax) + " must be <= 1023 (binary64 range)";
  if (f.subnormals && f.emin - f.precision + 1 < -1074)
    return "smallest subnormal 2^" + std::to_string(f.emin - f.precision + 1) +
           " is below binary64's 2^-1074; reduce p or raise emin";
  if (f.specials == Specials::NanOnly && f.precision < 2)
    return "NaN-only formats need p >= 2";
  return std::nullopt;
}

void check_valid(const Format& f) {
  if (auto why = validate(f)) throw std::invalid_argument("invalid format: " + *why);
}

double ulp(const Format& f, double x) {
  const double a = std::fabs(x);
  int e = f.emin;
  if (a != 0 && std::isfinite(a)) e = std::max(std::ilogb(a), f.emin);
  if (!f.subnormals && e == f.emin && a < min_normal(f)) return min_normal(f);
  return std::ldexp(1.0, e - f.precision + 1);
}

std::optional<Encoding> encoding_of(const Format& f) {
  const int count = f.emax - f.emin + 1;  // number of normal binades
  int w = 0;
  if (f.specials == Specials::Ieee) {
    if (f.emin != 1 - f.emax) return std::nullopt;
    if (!std::has_single_bit(static_cast<unsigned>(count + 2))) return std::nullopt;
    w = std::countr_zero(static_cast<unsigned>(count + 2));
  } else {
    if (!std::has_single_bit(static_cast<unsigned>(count + 1))) return std::nullopt;
    w = std::countr_zero(static_cast<unsigned>(count + 1));
  }
  Encoding enc{w, f.precision - 1, 1 - f.emin};
  if (enc.total_bits() > 64) return std::nullopt;
  return enc;
}

namespace {
Encoding require_encoding(const Format& f) {
  auto enc = encoding_of(f);
  if (!enc) throw std::invalid_argument("format " + name_of(f) + " has no bit encoding");
  return *enc;
}
}  // namespace

std::uint64_t to_bits(const Format& f, double x) {
  const Encoding enc = require_encoding(f);
  const std::uint64_t sign = std::signbit(x) ? std::uint64_t{1} << (enc.total_bits() - 1) : 0;
  const std::uint64_t all_exp = (std::uint64_t{1} << enc.exponent_bits) - 1;
  const std::uint64_t frac_mask = (std::uint64_t{1} << enc.fraction_bits) - 1;
  if (std::isnan(x)) {
    if (f.specials == Specials::None) throw std::invalid_argument("format " + name_of(f) + " has no NaN");
    // Quiet NaN: IEEE sets the top fraction bit; NaN-only formats use all ones.
    const std::uint64_t frac = f.specials == Specials::Ieee ? (std::uint64_t{1} << (enc.fraction_bits - 1)) : frac_mask;
    return sign | (all_exp << enc.fraction_bits) | frac;
  }
  if (std::isinf(x)) {
    if (f.specials != Specials::Ieee) throw std::invalid_argument("format " + name_of(f) + " has no infinity");
    return sign | (all_exp << enc.fraction_bits);
  }
  const double a = std::fabs(x);
  if (a == 0) return sign;
  int e = std::ilogb(a);
  if (e < f.emin) {  // subnormal: m·2^(emin-p+1)
    const auto m = static_cast<std::uint64_t>(std::ldexp(a, f.precision - 1 - f.emin));
    return sign | m;
  }
  const auto m = static_cast<std::uint64_t>(std::ldexp(a, f.precision - 1 - e));
  return sign | (static_cast<std::uint64_t>(e + enc.bias) << enc.fraction_bits) | (m & frac_mask);
}

double from_bits(const Format& f, std::uint64_t bits) {
  const Encoding enc = require_encoding(f);
  const int total = enc.total_bits();
  const bool neg = (bits >> (total - 1)) & 1;
  const std::uint64_t all_exp = (std::uint64_t{1} << enc.exponent_bits) - 1;
  const std::uint64_t frac_mask = (std::uint64_t{1} << enc.fraction_bits) - 1;
  const std::uint64_t ef = (bits >> enc.fraction_bits) & all_exp;
  const std::uint64_t frac = bits & frac_mask;
  double v = 0;
  if (ef == all_exp && f.specials == Specials::Ieee) {
    v = frac ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (ef == all_exp && frac == frac_mask && f.specials == Specials::NanOnly) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (ef == 0) {
    v = std::ldexp(static_cast<double>(frac), f.emin - f.precision + 1);
  } else {
    v = std::ldexp(static_cast<double>(frac | (std::uint64_t{1} << enc.fraction_bits)),
                   static_cast<int>(ef) - enc.bias - enc.fraction_bits);
  }
  return neg ? -v : v;
}

namespace {
struct Preset { const char* name; Format format; };
constexpr Preset kPresets[] = {
    {"fp64", formats::fp64}, {"fp32", formats::fp32}, {"tf32", formats::tf32}, {"bf16", formats::bf16},
    {"fp16", formats::fp16}, {"e4m3", formats::e4m3}, {"e5m2", formats::e5m2},
    {"e3m2", formats::e3m2}, {"e2m3", formats::e2m3}, {"e2m1", formats::e2m1},
};

std::string valid_names_text() {
  std::string s;
  for (const auto& p : kPresets) s += std::string(s.empty() ? "" : ", ") + p.name;
  return s + ", or custom p<P>:emin<A>:emax<B>[:nosub][:nanonly|:nospecials][:sat]";
}

bool parse_int(std::string_view s, int& out) {
  if (s.empty()) return false;
  const char* b = s.data();
  const char* e = s.data() + s.size();
  if (*b == '+') ++b;
  auto [ptr, ec] = std::from_chars(b, e, out);
  return ec == std::errc{} && ptr == e;
}
}  // namespace

const std::vector<std::string>& preset_format_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& p : kPresets) v.emplace_back(p.name);
    return v;
  }();
  return names;
}

std::string name_of(const Format& f) {
  for (const auto& p : kPresets)
    if (p.format == f) return p.name;
  std::string s = "p" + std::to_string(f.precision) + ":emin" + std::to_string(f.emin) + ":emax" +
                  std::to_string(f.emax);
  if (!f.subnormals) s += ":nosub";
  if (f.specials == Specials::NanOnly) s += ":nanonly";
  if (f.specials == Specials::None) s += ":nospecials";
  if (f.saturate) s += ":sat";
  return s;
}

Format parse_format(std::string_view text) {
  for (const auto& p : kPresets)
    if (text == p.name) return p.format;
  auto fail = [&](const std::string& why) -> Format {
    throw std::invalid_argument("unknown format '" + std::string(text) + "'" + (why.empty() ? "" : " (" + why + ")") +
                                "; valid: " + valid_names_text());
  };
  // A preset may carry modifiers too: "fp16:nosub", "e5m2:sat".
  Format f{};
  bool have_p = false, have_min = false, have_max = false;
  std::vector<std::string> seen;
  std::size_t pos = 0;
  bool first = true;
  while (pos <= text.size()) {
    std::size_t next = text.find(':', pos);
    if (next == std::string_view::npos) next = text.size();
    const std::string_view tok = text.substr(pos, next - pos);
    pos = next + 1;
    bool matched_preset = false;
    if (first) {
      for (const auto& pr : kPresets)
        if (tok == pr.name) { f = pr.format; have_p = have_min = have_max = matched_preset = true; }
    }
    first = false;
    if (matched_preset) continue;
    // Each explicit token kind once: p11:emin-14:emax15:emax16 or fp16:nanonly:nospecials used to be accepted
    // with the last one winning.
    const std::string kind = tok.starts_with("emin") ? "emin" : tok.starts_with("emax") ? "emax"
                             : tok.starts_with("p")  ? "p"
                             : (tok == "nanonly" || tok == "nospecials") ? "nanonly/nospecials"
                                                                          : std::string(tok);
    if (std::find(seen.begin(), seen.end(), kind) != seen.end())
      return fail("'" + std::string(tok) + "' repeats or contradicts an earlier " + kind +
                  " token; give each of p, emin, emax, nosub, sat once and at most one of nanonly, nospecials");
    seen.push_back(kind);
    if (tok.starts_with("emin")) { if (!parse_int(tok.substr(4), f.emin)) return fail("bad token '" + std::string(tok) + "'"); have_min = true; }
    else if (tok.starts_with("emax")) { if (!parse_int(tok.substr(4), f.emax)) return fail("bad token '" + std::string(tok) + "'"); have_max = true; }
    else if (tok.starts_with("p")) { if (!parse_int(tok.substr(1), f.precision)) return fail("bad token '" + std::string(tok) + "'"); have_p = true; }
    else if (tok == "nosub") f.subnormals = false;
    else if (tok == "nanonly") f.specials = Specials::NanOnly;
    else if (tok == "nospecials") f.specials = Specials::None;
    else if (tok == "sat") f.saturate = true;
    else return fail("bad token '" + std::string(tok) + "'");
    if (next == text.size()) break;
  }
  if (!have_p || !have_min || !have_max) return fail("need p, emin and emax");
  if (auto why = validate(f)) return fail(*why);
  return f;
}

}  // namespace roundoff::numerics
