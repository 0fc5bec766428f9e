// GradScaler-style loss scaling.
#include "studies/train/loss_scaler.hpp"

#include <charconv>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace roundoff::studies::train {
namespace {

constexpr std::string_view kSyntax = "none | static:S | dynamic[:init,growth,backoff,interval]";

[[noreturn]] void bad(std::string_view text, const std::string& why) {
  throw std::invalid_argument("invalid --loss-scale '" + std::string(text) + "': " + why + " (valid: " +
                              std::string(kSyntax) + ")");
}

double positive_number(std::string_view text, std::string_view part, const char* what) {
  double v = 0;
  const auto [ptr, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
  if (ec != std::errc{} || ptr != part.data() + part.size() || !std::isfinite(v) || v <= 0)
    bad(text, std::string(what) + " must be a positive number, got '" + std::string(part) + "'");
  return v;
}

std::string shortest(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

}  // namespace

LossScaleSpec LossScaleSpec::parse(std::string_view text) {
  LossScaleSpec s;
  const auto colon = text.find(':');
  const std::string_view head = text.substr(0, colon);
  const std::string_view args = colon == std::string_view::npos ? std::string_view{} : text.substr(colon + 1);
  if (head == "none") {
    if (colon != std::string_view::npos) bad(text, "'none' takes no arguments");
    return s;
  }
  if (head == "static") {
    s.kind = LossScaleKind::Static;
    if (colon == std::string_view::npos) bad(text, "static needs a scale, e.g. static:256");
    s.init = positive_number(text, args, "the static scale");
    return s;
  }
  if (head == "dynamic") {
    s.kind = LossScaleKind::Dynamic;
    if (colon == std::string_view::npos) return s;
    std::vector<std::string_view> parts;
    std::size_t start = 0;
    while (true) {
      const auto comma = args.find(',', start);
      parts.push_back(args.substr(start, comma - start));
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    if (parts.size() != 4) bad(text, "dynamic takes exactly 4 arguments init,growth,backoff,interval");
    s.init = positive_number(text, parts[0], "init");
    s.growth = positive_number(text, parts[1], "growth");
    s.backoff = positive_number(text, parts[2], "backoff");
    const double interval = positive_number(text, parts[3], "interval");
    if (s.growth <= 1) bad(text, "growth must be > 1");
    if (s.backoff >= 1) bad(text, "backoff must be < 1");
    if (interval != std::floor(interval)) bad(text, "interval must be a whole number of steps");
    s.interval = static_cast<std::int64_t>(interval);
    return s;
  }
  bad(text, "unknown kind '" + std::string(head) + "'");
}

std::string LossScaleSpec::canonical() const {
  switch (kind) {
    case LossScaleKind::None: return "none";
    case LossScaleKind::Static: return "static:" + shortest(init);
    case LossScaleKind::Dynamic:
      return "dynamic:" + shortest(init) + "," + shortest(growth) + "," + shortest(backoff) + "," +
             std::to_string(interval);
  }
  return "?";
}

LossScaler::LossScaler(const LossScaleSpec& spec) : spec_(spec) {
  switch (spec.kind) {
    case LossScaleKind::None: scale_ = 1.0; break;
    case LossScaleKind::Static:
    case LossScaleKind::Dynamic: scale_ = spec.init; break;
  }
}

void LossScaler::restore(double scale, std::int64_t clean_steps) {
  scale_ = scale;
  clean_steps_ = clean_steps;
}

bool LossScaler::skips(bool grads_finite) const {
  switch (spec_.kind) {
    case LossScaleKind::None: return false;
    case LossScaleKind::Static:
    case LossScaleKind::Dynamic: return !grads_finite;
  }
  return false;
}

std::optional<ScaleChange> LossScaler::update(std::int64_t step, bool grads_finite) {
  switch (spec_.kind) {
    case LossScaleKind::None:
    case LossScaleKind::Static: return std::nullopt;
    case LossScaleKind::Dynamic: break;
  }
  const double before = scale_;
  if (!grads_finite) {
    scale_ *= spec_.backoff;
    clean_steps_ = 0;
    return ScaleChange{step, before, scale_, "backoff"};
  }
  if (++clean_steps_ == spec_.interval) {
    scale_ *= spec_.growth;
    clean_steps_ = 0;
    return ScaleChange{step, before, scale_, "growth"};
  }
  return std::nullopt;
}

}  // namespace roundoff::studies::train
