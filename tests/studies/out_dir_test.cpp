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
  const fs::path stale = d / ("checkpoint.bin.tmp." + std::to_string(dead_pid()));
  const fs::path live = d / ("summary.json.tmp." + std::to_string(::getppid()));
  const fs::path other = d / "notes.tmp.txt";
  for (const fs::path& p : {stale, live, other}) std::ofstream(p) << "x";
  const OutDirLock lock(d);
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(other));
  ASSERT_EQ(lock.removed().size(), 1u);
  EXPECT_EQ(lock.removed()[0], stale);
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
