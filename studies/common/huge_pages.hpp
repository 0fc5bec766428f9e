#pragma once
/// \file huge_pages.hpp
/// Large buffers on transparent huge pages. On kernels that lend 2 MiB pages on request (transparent_hugepage
/// "madvise", Debian's default), glibc's malloc asks for them for its heap and its mmap'd chunks when the tunable
/// glibc.malloc.hugetlb=1 is set, and it reads that tunable only when a process starts. An E11 run faults its
/// ≈ 2 GiB in 4 KiB pages otherwise (678,000 minor faults; the VMs' page-fault path is slow): with the tunable
/// 15,000, ≈ 0.8 s less per E11 update and ≈ 20 % less wall time per run (docs/performance-log.md, "huge pages").
/// Speed only: no value depends on page sizes.
namespace roundoff::studies {

/// Re-executes this program (/proc/self/exe, the same arguments and environment) once with glibc.malloc.hugetlb=1
/// added to GLIBC_TUNABLES, when the kernel lends huge pages on request, GLIBC_TUNABLES does not set that tunable
/// yet and ROUNDOFF_HUGE_PAGES is not "0". Returns without doing anything otherwise, and when the exec fails.
void reexec_with_huge_pages(char** argv);

/// True when this process started with glibc.malloc.hugetlb=1 in GLIBC_TUNABLES (recorded beside timings).
bool malloc_huge_pages();

}  // namespace roundoff::studies
