#pragma once
/// \file out_dir.hpp
/// Results directories: one writer at a time, and no leftovers from a killed writer.
///
/// A run takes an exclusive lock on DIR/.roundoff.lock (flock, released by the kernel when the process ends,
/// however it ends) before it writes anything into DIR, so a second run into the same directory fails at once
/// with one line instead of racing the first (the last writer would otherwise win silently). Under the lock
/// it removes the temporary files NAME.tmp.PID (studies::write_file_atomic) whose process is gone.
#include <filesystem>
#include <string>
#include <vector>

namespace roundoff::studies {

class OutDirLock {
 public:
  /// Creates `dir` (with parents), takes the lock, then removes stale temporaries. Throws
  /// std::runtime_error naming the directory when another process (or another OutDirLock) holds it.
  explicit OutDirLock(const std::filesystem::path& dir);
  ~OutDirLock();
  OutDirLock(const OutDirLock&) = delete;
  OutDirLock& operator=(const OutDirLock&) = delete;

  /// The temporaries removed when the lock was taken.
  const std::vector<std::filesystem::path>& removed() const { return removed_; }

 private:
  int fd_ = -1;
  std::vector<std::filesystem::path> removed_;
};

/// Removes the files NAME.tmp.PID directly in `dir` whose process PID no longer exists (a writer killed
/// between writing and renaming); returns their paths. Files of live processes are kept.
std::vector<std::filesystem::path> remove_stale_temps(const std::filesystem::path& dir);

/// Throws std::invalid_argument("<flag> must name a directory (got an empty string)") when `dir` is empty.
void require_out_dir(const std::string& dir, const std::string& flag);

}  // namespace roundoff::studies
