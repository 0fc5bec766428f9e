// Results directories: one writer at a time, stale temporaries removed, the demo never deletes what it did
// not write (issue 11).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "studies/common/out_dir.hpp"
#include "studies/common/provenance.hpp"
#include "studies/train/demo.hpp"
#include "tests/studies/train_test_util.hpp"

namespace roundoff::studies {
namespace {

namespace fs = std::filesystem;

fs::path empty_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("roundoff_out_dir_test_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

/// The pid of a child that has already exited (so no process has it, barring reuse).
pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

TEST(OutDir, SecondWriterIsRefusedUntilTheFirstReleases) {
  const fs::path d = empty_dir("lock");
  {
    const OutDirLock first(d);
    try {
      const OutDirLock second(d);
      ADD_FAILURE() << "two locks on one directory";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("another roundoff run is writing into " + d.string()), std::string::npos)
          << e.what();
    }
  }
  EXPECT_NO_THROW(OutDirLock again(d));
}

TEST(OutDir, TrainingIntoALockedDirectoryFails) {
  using namespace train::testing;
  const fs::path d = empty_dir("locked_run");
  const OutDirLock held(d);
  EXPECT_THROW(train_run(small_config(16, 16, 2), "fp32", d, 1), std::runtime_error);
  EXPECT_FALSE(fs::exists(d / "summary.json"));
}

TEST(OutDir, StaleTemporariesOfDeadWritersAreRemoved) {
  const fs::path d = empty_dir("stale");
  const std::string dead = std::to_string(dead_pid());
  const fs::path stale = d / ("checkpoint.bin.roundoff-tmp." + dead);
  const fs::path live = d / ("summary.json.roundoff-tmp." + std::to_string(::getppid()));
  const fs::path other = d / "notes.tmp.txt";
  // Issue 43 item 9: user files that merely look like NAME.tmp.<digits> are not ours to remove.
  const fs::path thesis = d / "thesis.tmp.20240101";
  const fs::path backup = d / ("backup.tmp." + dead);
  for (const fs::path& p : {stale, live, other, thesis, backup}) std::ofstream(p) << "x";
  const OutDirLock lock(d);
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(other));
  EXPECT_TRUE(fs::exists(thesis));
  EXPECT_TRUE(fs::exists(backup));
  ASSERT_EQ(lock.removed().size(), 1u);
  EXPECT_EQ(lock.removed()[0], stale);
}

TEST(OutDir, AtomicWritesUseTheMarkedTemporaryAndLeaveNothingWhenTheRenameFails) {
  const fs::path d = empty_dir("atomic");
  EXPECT_EQ(temp_path_for(d / "a.json"), d / ("a.json.roundoff-tmp." + std::to_string(::getpid())));
  fs::create_directories(d / "table");  // a directory where a file is to be written: the rename fails
  EXPECT_THROW(write_file_atomic(d / "table", "x"), std::runtime_error);
  EXPECT_FALSE(fs::exists(temp_path_for(d / "table")));
}

TEST(OutDir, DemoNeverDeletesWhatItDidNotWrite) {
  const fs::path d = empty_dir("demo");
  std::ofstream(d / "summary.json") << "{}";
  std::ofstream(d / "thesis.tex") << "precious";
  EXPECT_THROW(train::clear_previous_run(d), std::runtime_error);
  EXPECT_TRUE(fs::exists(d / "thesis.tex"));
  EXPECT_TRUE(fs::exists(d / "summary.json"));
  fs::remove(d / "thesis.tex");
  std::ofstream(d / "curves.csv") << "step,metric,value\n";
  EXPECT_NO_THROW(train::clear_previous_run(d));
  EXPECT_TRUE(fs::is_empty(d));
}

}  // namespace
}  // namespace roundoff::studies
