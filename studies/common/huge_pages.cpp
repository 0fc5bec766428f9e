#include "studies/common/huge_pages.hpp"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace roundoff::studies {

namespace {

constexpr const char* kTunable = "glibc.malloc.hugetlb";

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

/// The kernel's transparent-huge-page mode ("always", "madvise", "never"; empty when unknown).
std::string thp_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(in, line);
  const auto open = line.find('['), close = line.find(']');
  return open == std::string::npos || close == std::string::npos ? std::string()
                                                                  : line.substr(open + 1, close - open - 1);
}

}  // namespace

void reexec_with_huge_pages(char** argv) {
  const std::string tunables = env("GLIBC_TUNABLES");
  if (env("ROUNDOFF_HUGE_PAGES") == "0" || tunables.find(kTunable) != std::string::npos) return;
  if (thp_mode() != "madvise") return;  // "always" gives them without asking; "never" not at all
  const std::string set = tunables.empty() ? std::string(kTunable) + "=1" : tunables + ":" + kTunable + "=1";
  if (::setenv("GLIBC_TUNABLES", set.c_str(), 1) != 0) return;
  ::execv("/proc/self/exe", argv);
  // The exec failed: go on as we are, with the environment we started with (malloc_huge_pages reads it).
  if (tunables.empty()) ::unsetenv("GLIBC_TUNABLES");
  else ::setenv("GLIBC_TUNABLES", tunables.c_str(), 1);
}

bool malloc_huge_pages() { return env("GLIBC_TUNABLES").find(std::string(kTunable) + "=1") != std::string::npos; }

}  // namespace roundoff::studies
