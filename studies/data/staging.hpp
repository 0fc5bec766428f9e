#pragma once
/// \file staging.hpp
/// Writing a prepared-data directory all at once: build it in a temporary sibling `<out>.tmp`, then rename it
/// into place, so `out` is always either the old complete result or the new complete one (used by the
/// Brown and KJV preparations and the excerpt).
#include <filesystem>
#include <string>

namespace roundoff::studies::data {

/// The temporary sibling directory `<out>.tmp` (emptied and created; parents created as needed). Removed by
/// its destructor unless commit() renamed it into place.
class StagedDir {
 public:
  explicit StagedDir(const std::filesystem::path& out);
  ~StagedDir();
  StagedDir(const StagedDir&) = delete;
  StagedDir& operator=(const StagedDir&) = delete;

  const std::filesystem::path& path() const { return tmp_; }
  /// Replaces `out` by the staged directory (the old `out`, if any, is moved aside and removed).
  void commit();

 private:
  std::filesystem::path out_, tmp_;
  bool committed_ = false;
};

/// The whole contents of a file; throws std::runtime_error("cannot read PATH") when it cannot be read.
std::string read_whole_file(const std::filesystem::path& p);

}  // namespace roundoff::studies::data
