#pragma once
/// \file out_dir.hpp
/// Results directories: one writer at a time, and no leftovers from a killed writer.
///
/// A run takes an exclusive lock on DIR/.roundoff.lock (flock, released by the kernel when the process ends,
/// however it ends) before it writes anything into DIR, so a second run into the same directory fails at once
/// with one line instead of racing the first (the last writer would otherwise win silently). Under the lock
/// it removes the temporary files NAME.roundoff-tmp.PID (studies::write_file_atomic, checkpoints) whose process
/// is gone. Only names with that marker are ever removed: a user's `thesis.tmp.20240101` is not ours to judge.
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

/// The marker of this program's temporary files: `path` is written as `path` + kTempMarker + PID, then renamed.
inline constexpr const char* kTempMarker = ".roundoff-tmp.";

/// `path`.roundoff-tmp.<this process's pid>: where a file is written before it is renamed onto `path`.
std::filesystem::path temp_path_for(const std::filesystem::path& path);

/// Removes the files NAME.roundoff-tmp.PID directly in `dir` whose process PID no longer exists (a writer killed
/// between writing and renaming); returns their paths. Files of live processes are kept, and so is every file
/// without the marker (NAME.tmp.PID included: it may be the user's).
std::vector<std::filesystem::path> remove_stale_temps(const std::filesystem::path& dir);

/// Throws std::invalid_argument("<flag> must name a directory (got an empty string)") when `dir` is empty.
void require_out_dir(const std::string& dir, const std::string& flag);

}  // namespace roundoff::studies
