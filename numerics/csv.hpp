#pragma once
/// \file csv.hpp
/// The project's one CSV writer (every results CSV: run logs, op error, accumulation, tapes, the demo).
///
/// Records are fields joined by ',' (the caller ends them with '\n'). Quoting follows RFC 4180: a field that
/// holds a comma, a double quote, CR or LF is enclosed in double quotes, with each quote inside doubled;
/// any other field is written as it is. Numbers are written in one way everywhere: the shortest decimal
/// that reads back to the same binary64 (at most 17 significant digits, so nothing is lost and nothing is
/// padded), and "nan", "inf", "-inf" for the specials (pandas and Python's float() read all of them).
#include <concepts>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace roundoff::numerics {

/// `text` as one RFC 4180 field.
inline std::string csv_field(std::string_view text) {
  if (text.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(text);
  std::string q = "\"";
  for (const char c : text) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

/// The shortest decimal that reads back to x; "nan", "inf", "-inf" for the specials.
inline std::string shortest_decimal(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  char buf[40];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  return buf;
}

/// One record under construction: `CsvRow() << "fp16" << 3 << 0.25` gives "fp16,3,0.25".
class CsvRow {
 public:
  CsvRow& operator<<(std::string_view text) { return put(csv_field(text)); }
  CsvRow& operator<<(const char* text) { return put(csv_field(text)); }
  CsvRow& operator<<(const std::string& text) { return put(csv_field(text)); }
  CsvRow& operator<<(double x) { return put(shortest_decimal(x)); }
  template <std::integral I>
    requires(!std::same_as<I, bool> && !std::same_as<I, char>)
  CsvRow& operator<<(I v) {
    return put(std::to_string(v));
  }
  /// The record, without a line ending.
  const std::string& str() const { return s_; }

 private:
  CsvRow& put(const std::string& field) {
    if (!first_) s_ += ',';
    s_ += field;
    first_ = false;
    return *this;
  }
  std::string s_;
  bool first_ = true;
};

}  // namespace roundoff::numerics
