// Checkpoint serialisation with a sha256 over the payload.
#include "studies/train/checkpoint.hpp"

#include <bit>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "studies/common/provenance.hpp"
#include "studies/data/sha256.hpp"

namespace roundoff::studies::train {
namespace {

static_assert(std::endian::native == std::endian::little, "checkpoints are little-endian");

constexpr std::string_view kMagic = "roundoff-checkpoint 1\n";

void put_u64(std::string& s, std::uint64_t v) { s.append(reinterpret_cast<const char*>(&v), sizeof v); }

void put_array(std::string& s, const std::vector<double>& a) {
  put_u64(s, a.size());
  s.append(reinterpret_cast<const char*>(a.data()), a.size() * sizeof(double));
}

struct Reader {
  std::string_view data;
  std::size_t pos = 0;
  const std::filesystem::path& path;
  [[noreturn]] void fail(const std::string& why) const {
    throw std::runtime_error("checkpoint " + path.string() + " is corrupt: " + why +
                             "; refusing to use it (delete it or choose another --out)");
  }
  std::uint64_t u64() {
    if (data.size() - pos < 8) fail("truncated");
    std::uint64_t v;
    std::memcpy(&v, data.data() + pos, 8);
    pos += 8;
    return v;
  }
  std::vector<double> array() {
    const std::uint64_t n = u64();
    if (n > (data.size() - pos) / sizeof(double)) fail("truncated array");
    std::vector<double> a(n);
    std::memcpy(a.data(), data.data() + pos, n * sizeof(double));
    pos += n * sizeof(double);
    return a;
  }
};

}  // namespace

void save_checkpoint(const std::filesystem::path& path, const Checkpoint& ck) {
  std::string payload;
  const std::string meta = ck.meta.dump();
  put_u64(payload, meta.size());
  payload += meta;
  put_array(payload, ck.master);
  put_array(payload, ck.m);
  put_array(payload, ck.v);
  std::string file(kMagic);
  file += "sha256 " + data::sha256_hex(payload) + "\n";
  file += payload;
  write_file_atomic(path, file);
}

Checkpoint load_checkpoint(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open checkpoint " + path.string());
  std::ostringstream buf;
  buf << in.rdbuf();
  const std::string file = buf.str();
  Reader header{file, 0, path};
  if (file.compare(0, kMagic.size(), kMagic) != 0) header.fail("not a roundoff checkpoint (bad first line)");
  const std::size_t line2 = kMagic.size();
  const std::string_view tag = "sha256 ";
  const std::size_t payload_at = line2 + tag.size() + 64 + 1;
  if (file.size() < payload_at || file.compare(line2, tag.size(), tag) != 0 || file[payload_at - 1] != '\n')
    header.fail("missing sha256 line");
  const std::string expected = file.substr(line2 + tag.size(), 64);
  const std::string_view payload = std::string_view(file).substr(payload_at);
  const std::string actual = data::sha256_hex(payload);
  if (actual != expected) header.fail("sha256 mismatch (file says " + expected + ", content is " + actual + ")");
  Reader r{payload, 0, path};
  const std::uint64_t n = r.u64();
  if (n > payload.size() - r.pos) r.fail("truncated meta");
  Checkpoint ck;
  try {
    ck.meta = nlohmann::json::parse(payload.substr(r.pos, n));
  } catch (const nlohmann::json::exception& e) {
    r.fail(std::string("bad meta JSON: ") + e.what());
  }
  r.pos += n;
  ck.master = r.array();
  ck.m = r.array();
  ck.v = r.array();
  if (r.pos != payload.size()) r.fail("trailing bytes");
  if (ck.m.size() != ck.master.size() || ck.v.size() != ck.master.size()) r.fail("array sizes disagree");
  return ck;
}

}  // namespace roundoff::studies::train
