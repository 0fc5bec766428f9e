#include "studies/common/npy.hpp"

#include <array>
#include <cstring>
#include <cctype>
#include <cmath>
#include <fstream>
#include <limits>
#include <stdexcept>

namespace roundoff::studies {

namespace {

constexpr std::string_view kMagic = "\x93NUMPY";
const std::string kValid = "valid: a C-order float32 or float64 .npy (numpy.save of np.ascontiguousarray(x, np.float32))";
const std::string kValid16 =
    "valid: a C-order float16, float32 or float64 .npy (numpy.save of np.ascontiguousarray(x, np.float32))";

[[noreturn]] void fail(bool f16, const std::filesystem::path& p, const std::string& what) {
  throw std::invalid_argument(p.string() + ": " + what + "; " + (f16 ? kValid16 : kValid));
}

/// The value of IEEE binary16 bits h (exact in double).
double half_value(std::uint32_t h) {
  const std::uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 0x1F) return m ? std::numeric_limits<double>::quiet_NaN() : sign * std::numeric_limits<double>::infinity();
  if (e == 0) return sign * std::ldexp(static_cast<double>(m), -24);
  return sign * std::ldexp(static_cast<double>(m | 0x400), static_cast<int>(e) - 25);
}

std::uint32_t le(std::string_view b, std::size_t at, int n) {
  std::uint32_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + static_cast<std::size_t>(i)]);
  return v;
}

/// The value text of 'key' in a Python dict literal header ("" when absent).
std::string dict_value(const std::string& h, const std::string& key) {
  const auto k = h.find("'" + key + "'");
  if (k == std::string::npos) return "";
  auto i = h.find(':', k);
  if (i == std::string::npos) return "";
  ++i;
  while (i < h.size() && h[i] == ' ') ++i;
  if (i >= h.size()) return "";
  std::size_t end = i;
  if (h[i] == '\'') end = h.find('\'', i + 1) + 1;
  else if (h[i] == '(') end = h.find(')', i) + 1;
  else
    while (end < h.size() && h[end] != ',' && h[end] != '}') ++end;
  if (end == 0 || end > h.size()) return "";
  return h.substr(i, end - i);
}

std::string shape_text(const std::vector<std::size_t>& shape) {
  if (shape.empty()) return "()";
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

void put(std::string& out, std::uint32_t v, int n) {
  for (int i = 0; i < n; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
}

}  // namespace

std::uint32_t crc32(std::string_view bytes) {
  static const std::array<std::uint32_t, 256> table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  std::uint32_t c = 0xFFFFFFFFu;
  for (const char ch : bytes) c = table[(c ^ static_cast<unsigned char>(ch)) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

NpyArray read_npy(const std::filesystem::path& path, std::uintmax_t max_bytes, bool allow_float16) {
  const bool f16 = allow_float16;
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) fail(f16, path, "no such file");
  if (st.type() != std::filesystem::file_type::regular) fail(f16, path, "not a regular file (a directory, FIFO or device)");
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) fail(f16, path, "cannot read its size");
  if (size > max_bytes)
    fail(f16, path, std::to_string(size) + " bytes is over the limit of " + std::to_string(max_bytes) + " bytes");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(f16, path, "cannot be opened");
  std::string b(static_cast<std::size_t>(size), '\0');
  in.read(b.data(), static_cast<std::streamsize>(size));
  if (static_cast<std::uintmax_t>(in.gcount()) != size) fail(f16, path, "could not be read in full");
  if (b.size() < 10 || b.compare(0, kMagic.size(), kMagic) != 0) fail(f16, path, "not an .npy file (no \\x93NUMPY magic)");
  const int major = static_cast<unsigned char>(b[6]);
  if (major < 1 || major > 3) fail(f16, path, ".npy format version " + std::to_string(major) + " is not 1, 2 or 3");
  const int len_bytes = major == 1 ? 2 : 4;
  const std::size_t hstart = 8 + static_cast<std::size_t>(len_bytes);
  if (b.size() < hstart) fail(f16, path, "truncated header");
  const std::size_t hlen = le(b, 8, len_bytes);
  if (hlen > b.size() - hstart) fail(f16, path, "header length " + std::to_string(hlen) + " runs past the end of the file");
  const std::string h = b.substr(hstart, hlen);
  for (const char c : h)
    if (c != '\n' && !std::isprint(static_cast<unsigned char>(c))) fail(f16, path, "header is not a dict literal");
  const std::string descr = dict_value(h, "descr"), fortran = dict_value(h, "fortran_order"),
                    shape = dict_value(h, "shape");
  if (descr.empty() || fortran.empty() || shape.empty()) fail(f16, path, "header lacks descr, fortran_order or shape");
  if (fortran == "True") fail(f16, path, "Fortran-order array");
  if (fortran != "False") fail(f16, path, "fortran_order is " + fortran);
  NpyArray a;
  std::size_t item = 8;
  if (descr == "'<f4'") {
    a.float32 = true;
    a.dtype = "float32";
    item = 4;
  } else if (descr == "'<f8'") {
    a.dtype = "float64";
  } else if (allow_float16 && descr == "'<f2'") {
    a.dtype = "float16";
    item = 2;
  } else {
    fail(f16, path, "dtype " + descr + " is not supported");
  }
  // shape: "(d0, d1, ...)"
  std::size_t count = 1;
  for (std::size_t i = 1; i + 1 < shape.size();) {
    while (i + 1 < shape.size() && (shape[i] == ' ' || shape[i] == ',')) ++i;
    if (i + 1 >= shape.size()) break;
    if (!std::isdigit(static_cast<unsigned char>(shape[i]))) fail(f16, path, "shape " + shape + " is not a tuple of sizes");
    std::size_t d = 0;
    while (i + 1 < shape.size() && std::isdigit(static_cast<unsigned char>(shape[i]))) {
      if (d > (std::numeric_limits<std::size_t>::max() - 9) / 10) fail(f16, path, "shape " + shape + " is too large");
      d = d * 10 + static_cast<std::size_t>(shape[i] - '0');
      ++i;
    }
    if (d != 0 && count > std::numeric_limits<std::size_t>::max() / d) fail(f16, path, "shape " + shape + " is too large");
    count *= d;
    a.shape.push_back(d);
  }
  if (a.shape.empty()) fail(f16, path, "a 0-d array (blocks need at least one dimension)");
  const std::size_t data_at = hstart + hlen;
  if (count > (b.size() - data_at) / item || (b.size() - data_at) != count * item)
    fail(f16, path, "shape " + shape + " needs " + std::to_string(count) + " values of " + std::to_string(item) +
                  " bytes but the file holds " + std::to_string(b.size() - data_at) + " bytes of data");
  a.values.resize(count);
  for (std::size_t i = 0; i < count; ++i) {
    if (item == 2) {
      a.values[i] = half_value(le(b, data_at + 2 * i, 2));
    } else if (a.float32) {
      const std::uint32_t u = le(b, data_at + 4 * i, 4);
      float f;
      static_assert(sizeof f == 4);
      std::memcpy(&f, &u, 4);
      a.values[i] = static_cast<double>(f);
    } else {
      const std::uint64_t u = static_cast<std::uint64_t>(le(b, data_at + 8 * i, 4)) |
                              (static_cast<std::uint64_t>(le(b, data_at + 8 * i + 4, 4)) << 32);
      double d;
      std::memcpy(&d, &u, 8);
      a.values[i] = d;
    }
  }
  return a;
}

std::string npy_bytes(const NpyMember& m) {
  std::string h = "{'descr': '" + m.descr + "', 'fortran_order': False, 'shape': " + shape_text(m.shape) + ", }";
  const std::size_t total = 10 + h.size() + 1;
  h.append((64 - total % 64) % 64, ' ');
  h += '\n';
  std::string out(kMagic);
  out += '\x01';
  out += '\x00';
  put(out, static_cast<std::uint32_t>(h.size()), 2);
  out += h;
  out += m.data;
  return out;
}

std::string npz_bytes(const std::vector<NpyMember>& members, std::string_view comment) {
  constexpr std::uint32_t kDosTime = 0, kDosDate = (0u << 9) | (1u << 5) | 1u;  // 1980-01-01 00:00
  std::string out, central;
  for (const NpyMember& m : members) {
    const std::string name = m.name + ".npy";
    const std::string body = npy_bytes(m);
    if (body.size() > 0xFFFFFFFEu || out.size() > 0xFFFFFFFEu - body.size())
      throw std::invalid_argument("the .npz would exceed 4 GiB (zip64 is not written)");
    const std::uint32_t crc = crc32(body), sz = static_cast<std::uint32_t>(body.size());
    const auto offset = static_cast<std::uint32_t>(out.size());
    put(out, 0x04034b50u, 4);
    put(out, 20, 2), put(out, 0, 2), put(out, 0, 2), put(out, kDosTime, 2), put(out, kDosDate, 2);
    put(out, crc, 4), put(out, sz, 4), put(out, sz, 4);
    put(out, static_cast<std::uint32_t>(name.size()), 2), put(out, 0, 2);
    out += name;
    out += body;
    put(central, 0x02014b50u, 4);
    put(central, 20, 2), put(central, 20, 2), put(central, 0, 2), put(central, 0, 2);
    put(central, kDosTime, 2), put(central, kDosDate, 2);
    put(central, crc, 4), put(central, sz, 4), put(central, sz, 4);
    put(central, static_cast<std::uint32_t>(name.size()), 2), put(central, 0, 2), put(central, 0, 2);
    put(central, 0, 2), put(central, 0, 2), put(central, 0, 4), put(central, offset, 4);
    central += name;
  }
  const auto cd_at = static_cast<std::uint32_t>(out.size());
  out += central;
  put(out, 0x06054b50u, 4);
  put(out, 0, 2), put(out, 0, 2);
  put(out, static_cast<std::uint32_t>(members.size()), 2), put(out, static_cast<std::uint32_t>(members.size()), 2);
  put(out, static_cast<std::uint32_t>(central.size()), 4), put(out, cd_at, 4);
  put(out, static_cast<std::uint32_t>(comment.size()), 2);
  out += comment;
  return out;
}

bool npz_written_by(const std::filesystem::path& path, std::string_view comment) {
  std::error_code ec;
  if (std::filesystem::status(path, ec).type() != std::filesystem::file_type::regular) return false;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  const std::size_t tail = 22 + comment.size();
  if (ec || size < tail) return false;
  std::ifstream in(path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(size - tail));
  std::string t(tail, '\0');
  in.read(t.data(), static_cast<std::streamsize>(tail));
  if (static_cast<std::size_t>(in.gcount()) != tail) return false;
  return le(t, 0, 4) == 0x06054b50u && le(t, 20, 2) == comment.size() && t.compare(22, comment.size(), comment) == 0;
}

}  // namespace roundoff::studies
