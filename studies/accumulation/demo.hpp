#pragma once
/// \file demo.hpp
/// A short accumulation comparison for `roundoff demo` (well under 2 s).
#include <ostream>

namespace roundoff::studies {

/// Prints, for length-1024 dot products of N(0,1) data rounded to fp16 (a fixed seed, 20 draws), the median
/// and worst error in fp16 ulps at the exact value for fp16-seq, fp16-pairwise, fp16-splitk32-fp32, fp32-seq
/// and fp16-sr; then the sequential sums of 4096 ones in fp16, bf16 and fp32.
void print_accumulation_demo(std::ostream& os);

}  // namespace roundoff::studies
