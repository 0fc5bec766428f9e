#include "studies/common/memory.hpp"

#include <unistd.h>

#include <cstdio>
#include <stdexcept>

namespace roundoff::studies {

std::uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return 0;
  return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
}

std::string bytes_text(double bytes) {
  static const char* const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024 && u < 6) {
    bytes /= 1024;
    ++u;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

void require_memory(double bytes, const std::string& what, const std::string& how, const std::string& valid) {
  const std::uint64_t have = physical_memory_bytes();
  if (have == 0 || !(bytes > static_cast<double>(have))) return;
  throw std::invalid_argument(what + " needs at least " + bytes_text(bytes) + " of memory (" + how +
                              "); this machine has " + bytes_text(static_cast<double>(have)) + "; " + valid);
}

}  // namespace roundoff::studies
