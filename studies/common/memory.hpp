#pragma once
/// \file memory.hpp
/// Refusing work that cannot fit in memory with one line naming the size, instead of a bare std::bad_alloc.
#include <cstdint>
#include <string>

namespace roundoff::studies {

/// Physical memory of this machine in bytes (0 when unknown).
std::uint64_t physical_memory_bytes();

/// "12.3 GiB" style text of a byte count.
std::string bytes_text(double bytes);

/// Throws std::invalid_argument("<what> needs at least <bytes> of memory (<how>); this machine has <physical>;
/// <valid>") when `bytes` — a lower bound of what the work allocates — exceeds the physical memory.
void require_memory(double bytes, const std::string& what, const std::string& how, const std::string& valid);

}  // namespace roundoff::studies
