// Checkpoint serialisation with a sha256 over the payload, streamed in both directions.
#include "studies/train/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>

#include "studies/common/out_dir.hpp"
#include "studies/data/sha256.hpp"

namespace roundoff::studies::train {
namespace {

static_assert(std::endian::native == std::endian::little, "checkpoints are little-endian");

constexpr std::string_view kMagicPrefix = "roundoff-checkpoint ";
constexpr std::string_view kMagic = "roundoff-checkpoint 1\n";
constexpr std::string_view kShaTag = "sha256 ";
constexpr std::size_t kHexDigits = 64;
/// Bytes per write / read of an array: the stream's piece size, not a buffer of the file.
constexpr std::size_t kChunk = std::size_t{8} << 20;

/// A file written at `path`.roundoff-tmp.<pid> and renamed onto `path` by commit(); removed if never committed.
class AtomicFile {
 public:
  explicit AtomicFile(const std::filesystem::path& path)
      : path_(path), tmp_(temp_path_for(path)) {
    if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd_ < 0) throw std::runtime_error("cannot write " + tmp_.string() + ": " + std::strerror(errno));
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile() {
    if (fd_ >= 0) {
      ::close(fd_);
      std::error_code ignored;
      std::filesystem::remove(tmp_, ignored);
    }
  }
  /// Appends `bytes`.
  void write(std::string_view bytes) {
    for (std::size_t done = 0; done < bytes.size();) {
      const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw std::runtime_error("cannot write " + tmp_.string() + ": " + std::strerror(errno));
      done += static_cast<std::size_t>(n);
    }
  }
  /// Overwrites bytes already written, at `offset`.
  void write_at(std::size_t offset, std::string_view bytes) {
    for (std::size_t done = 0; done < bytes.size();) {
      const ssize_t n = ::pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw std::runtime_error("cannot write " + tmp_.string() + ": " + std::strerror(errno));
      done += static_cast<std::size_t>(n);
    }
  }
  /// Flushes to disk and renames onto the target.
  void commit() {
    const bool synced = ::fsync(fd_) == 0;
    const bool closed = ::close(fd_) == 0;
    fd_ = -1;
    std::error_code error;
    if (!synced || !closed) {
      std::filesystem::remove(tmp_, error);
      throw std::runtime_error("cannot flush " + tmp_.string());
    }
    std::filesystem::rename(tmp_, path_, error);
    if (error) {
      std::error_code ignored;
      std::filesystem::remove(tmp_, ignored);
      throw std::runtime_error("cannot rename " + tmp_.string() + " to " + path_.string() + ": " + error.message());
    }
  }

 private:
  std::filesystem::path path_, tmp_;
  int fd_ = -1;
};

std::string_view bytes_of(const void* p, std::size_t n) { return {static_cast<const char*>(p), n}; }

/// The payload's bytes, hashed as they go to the file.
struct PayloadWriter {
  AtomicFile& file;
  data::Sha256 sha;
  void put(std::string_view bytes) {
    sha.update(bytes);
    file.write(bytes);
  }
  void put_u64(std::uint64_t v) { put(bytes_of(&v, sizeof v)); }
  void put_array(std::span<const double> a) {
    put_u64(a.size());
    for (std::size_t at = 0; at < a.size(); at += kChunk / sizeof(double)) {
      const std::size_t n = std::min(kChunk / sizeof(double), a.size() - at);
      put(bytes_of(a.data() + at, n * sizeof(double)));
    }
  }
  /// A store as binary64, whatever its kind (binary32 widened chunk by chunk).
  void put_array(const ParamStore& a) {
    if (a.kind() == StorageKind::Binary64) return put_array(a.binary64());
    put_u64(a.size());
    std::vector<double> chunk(std::min(kChunk / sizeof(double), a.size()));
    for (std::size_t at = 0; at < a.size(); at += chunk.size()) {
      const std::size_t n = std::min(chunk.size(), a.size() - at);
      a.read(at, std::span(chunk).first(n));
      put(bytes_of(chunk.data(), n * sizeof(double)));
    }
  }
};

/// The payload's bytes, read from the file and hashed; `left` bounds every length read from the file.
struct PayloadReader {
  std::ifstream& in;
  const std::filesystem::path& path;
  std::uint64_t left;
  data::Sha256 sha;
  /// The first value store() could not hold (reported after the digest check, so a damaged file is named as such).
  std::string unfit;
  [[noreturn]] void fail(const std::string& why) const {
    throw std::runtime_error("checkpoint " + path.string() + " is corrupt: " + why +
                             "; refusing to use it (delete it or choose another --out)");
  }
  void get(char* out, std::size_t n, const char* what) {
    if (n > left) fail(std::string("truncated ") + what);
    if (!in.read(out, static_cast<std::streamsize>(n))) fail(std::string("cannot read ") + what);
    sha.update({out, n});
    left -= n;
  }
  std::uint64_t u64(const char* what) {
    std::uint64_t v;
    get(reinterpret_cast<char*>(&v), sizeof v, what);
    return v;
  }
  std::vector<double> array() {
    const std::uint64_t n = u64("array");
    if (n > left / sizeof(double)) fail("truncated array");
    std::vector<double> a(n);
    for (std::size_t at = 0; at < a.size(); at += kChunk / sizeof(double)) {
      const std::size_t k = std::min(kChunk / sizeof(double), a.size() - at);
      get(reinterpret_cast<char*>(a.data() + at), k * sizeof(double), "array");
    }
    return a;
  }
  /// An array into a store of kind `kind`, chunk by chunk; a value the store cannot hold exactly is refused.
  ParamStore store(StorageKind kind, const char* what) {
    if (kind == StorageKind::Binary64) return ParamStore(array());
    const std::uint64_t n = u64("array");
    if (n > left / sizeof(double)) fail("truncated array");
    ParamStore a(kind, n);
    std::vector<double> chunk(std::min<std::size_t>(kChunk / sizeof(double), n));
    for (std::size_t at = 0; at < n; at += chunk.size()) {
      const std::size_t k = std::min<std::size_t>(chunk.size(), n - at);
      get(reinterpret_cast<char*>(chunk.data()), k * sizeof(double), "array");
      if (!unfit.empty()) continue;  // refused already: read on for the digest
      try {
        a.write(at, std::span<const double>(chunk).first(k));
      } catch (const std::invalid_argument& e) {
        unfit = "checkpoint " + path.string() + " does not fit this run's storage: AdamW " + what + " " + e.what() +
                " (the run's policy stores its moments so); refusing to use it";
      }
    }
    return a;
  }
};

}  // namespace

namespace {

template <class Master>
void write_checkpoint(const std::filesystem::path& path, const nlohmann::json& meta, const Master& master,
                      const ParamStore& m, const ParamStore& v) {
  AtomicFile file(path);
  file.write(kMagic);
  // Line 2 holds the payload's digest: a placeholder now, the digest once the payload is written.
  file.write(std::string(kShaTag) + std::string(kHexDigits, '0') + "\n");
  PayloadWriter out{file, {}};
  const std::string text = meta.dump();
  out.put_u64(text.size());
  out.put(text);
  out.put_array(master);
  out.put_array(m);
  out.put_array(v);
  file.write_at(kMagic.size() + kShaTag.size(), out.sha.hex());
  file.commit();
}

}  // namespace

void save_checkpoint(const std::filesystem::path& path, const nlohmann::json& meta, std::span<const double> master,
                     const ParamStore& m, const ParamStore& v) {
  write_checkpoint(path, meta, master, m, v);
}

void save_checkpoint(const std::filesystem::path& path, const nlohmann::json& meta, const ParamStore& master,
                     const ParamStore& m, const ParamStore& v) {
  write_checkpoint(path, meta, master, m, v);
}

void save_checkpoint(const std::filesystem::path& path, const Checkpoint& ck) {
  save_checkpoint(path, ck.meta, ck.master, ck.m, ck.v);
}

Checkpoint load_checkpoint(const std::filesystem::path& path, StorageKind moments) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open checkpoint " + path.string());
  std::error_code size_error;
  const std::uintmax_t size = std::filesystem::file_size(path, size_error);
  if (size_error) throw std::runtime_error("cannot open checkpoint " + path.string() + ": " + size_error.message());
  const std::size_t header_size = kMagic.size() + kShaTag.size() + kHexDigits + 1;
  std::string header(std::min<std::uintmax_t>(size, header_size), '\0');
  in.read(header.data(), static_cast<std::streamsize>(header.size()));
  PayloadReader r{in, path, size - header.size(), {}, {}};
  if (header.compare(0, kMagic.size(), kMagic) != 0) {
    // Another version of this format is named as such; anything else is not a checkpoint.
    if (header.compare(0, kMagicPrefix.size(), kMagicPrefix) == 0) {
      const std::string rest = header.substr(kMagicPrefix.size());
      throw std::runtime_error("checkpoint " + path.string() + " is format version " +
                               rest.substr(0, rest.find('\n')) + "; this build reads version 1");
    }
    r.fail("not a roundoff checkpoint (bad first line)");
  }
  if (header.size() < header_size || header.compare(kMagic.size(), kShaTag.size(), kShaTag) != 0 ||
      header.back() != '\n')
    r.fail("missing sha256 line");
  const std::string expected = header.substr(kMagic.size() + kShaTag.size(), kHexDigits);
  const std::uint64_t n = r.u64("meta");
  if (n > r.left) r.fail("truncated meta");
  std::string text(n, '\0');
  r.get(text.data(), n, "meta");
  Checkpoint ck;
  ck.master = r.array();
  ck.m = r.store(moments, "m");
  ck.v = r.store(moments, "v");
  if (r.left != 0) r.fail("trailing bytes");
  const std::string actual = r.sha.hex();
  if (actual != expected) r.fail("sha256 mismatch (file says " + expected + ", content is " + actual + ")");
  if (!r.unfit.empty()) throw std::runtime_error(r.unfit);
  try {
    ck.meta = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    r.fail(std::string("bad meta JSON: ") + e.what());
  }
  if (ck.m.size() != ck.master.size() || ck.v.size() != ck.master.size()) r.fail("array sizes disagree");
  return ck;
}

}  // namespace roundoff::studies::train
