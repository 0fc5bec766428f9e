#include "studies/common/provenance.hpp"

#include "studies/common/out_dir.hpp"

#include "git_revision.inc"  // ROUNDOFF_GIT_REVISION, generated at every build

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <stdexcept>

namespace roundoff::studies {

std::string_view git_revision() { return ROUNDOFF_GIT_REVISION; }
std::string_view build_flags() { return ROUNDOFF_BUILD_FLAGS; }
std::string_view source_dir() { return ROUNDOFF_SOURCE_DIR; }

namespace {
std::string& command_line() {
  static std::string line;
  return line;
}

/// `arg` as one shell word: unchanged when it holds only safe characters, else in single quotes.
std::string shell_word(std::string_view arg) {
  const bool safe = !arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                          "0123456789@%+=:,./_-") == std::string_view::npos;
  if (safe) return std::string(arg);
  std::string q = "'";
  for (const char c : arg) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}
}  // namespace

void record_command_line(int argc, const char* const* argv) {
  std::string line;
  for (int i = 0; i < argc; ++i) line += (i ? " " : "") + shell_word(argv[i]);
  command_line() = line;
}

const std::string& recorded_command_line() { return command_line(); }

nlohmann::json provenance(std::string_view command) {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  nlohmann::json j;
  j["git_revision"] = std::string(git_revision());
  j["build_flags"] = std::string(build_flags());
  j["created_utc"] = buf;
  if (!command_line().empty()) j["command"] = command_line();
  else if (!command.empty()) j["command"] = std::string(command);
  return j;
}

void write_file_atomic(const std::filesystem::path& path, std::string_view contents) {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  const std::filesystem::path tmp = temp_path_for(path);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw std::runtime_error("cannot write " + tmp.string() + ": " + std::strerror(errno));
  std::size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string why = std::strerror(errno);
      ::close(fd);
      std::filesystem::remove(tmp);
      throw std::runtime_error("cannot write " + tmp.string() + ": " + why);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    std::filesystem::remove(tmp);
    throw std::runtime_error("cannot flush " + tmp.string());
  }
  std::error_code renamed;
  std::filesystem::rename(tmp, path, renamed);
  if (renamed) {  // e.g. `path` is a directory: leave nothing behind
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw std::runtime_error("cannot write " + path.string() + ": " + renamed.message());
  }
}

void write_json_atomic(const std::filesystem::path& path, const nlohmann::json& j) {
  write_file_atomic(path, j.dump(2) + "\n");
}

}  // namespace roundoff::studies
