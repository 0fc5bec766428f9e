#include "studies/common/out_dir.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace roundoff::studies {

OutDirLock::OutDirLock(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  const std::filesystem::path lock = dir / ".roundoff.lock";
  fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw std::runtime_error("cannot open lock file " + lock.string() + ": " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK)
      throw std::runtime_error("another roundoff run is writing into " + dir.string() +
                               " (it holds " + lock.string() + "); wait for it or choose another --out");
    throw std::runtime_error("cannot lock " + lock.string() + ": " + std::strerror(err));
  }
  removed_ = remove_stale_temps(dir);
}

OutDirLock::~OutDirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the descriptor releases the flock
}

std::filesystem::path temp_path_for(const std::filesystem::path& path) {
  return path.string() + kTempMarker + std::to_string(::getpid());
}

std::vector<std::filesystem::path> remove_stale_temps(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> removed;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const std::string marker = kTempMarker;
    const std::size_t at = name.rfind(marker);
    if (at == std::string::npos || at == 0) continue;
    const std::string digits = name.substr(at + marker.size());
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto pid = static_cast<pid_t>(std::stol(digits));
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge): keep
    if (entry.is_regular_file(ec) && std::filesystem::remove(entry.path(), ec)) removed.push_back(entry.path());
  }
  return removed;
}

void require_out_dir(const std::string& dir, const std::string& flag) {
  if (dir.empty()) throw std::invalid_argument(flag + " must name a directory (got an empty string)");
}

}  // namespace roundoff::studies
