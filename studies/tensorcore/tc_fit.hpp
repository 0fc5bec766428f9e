#pragma once
/// \file tc_fit.hpp
/// Fitting and checking Accumulation models of a GPU's matrix-multiply-accumulate against its measured output
/// bits. A probe dump (studies/tensorcore/mma_probe.cu) holds D = A·B + C for every tile that tc_cases.hpp
/// generates from (shape, seed); the operands are regenerated here and checked against the dump's hash.
///
/// A model is an Accumulation (numerics/accumulate.hpp) run as gemm with accumulate (C enters exactly, the K
/// products in k order 0..K-1), optionally followed by one more rounding to the shape's accumulator format (a
/// wider internal result converted on output). Its prediction matches an output when the encodings are equal
/// bit for bit, or both are NaN (NaN payloads and signs are not compared).
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "numerics/accumulate.hpp"
#include "numerics/format.hpp"
#include "numerics/rounding.hpp"
#include "studies/tensorcore/tc_cases.hpp"

namespace roundoff::tensorcore {

struct ProbeDump {
  Shape shape = Shape::F16F32;
  std::uint32_t tiles = 0;
  std::uint64_t seed = 0;
  std::uint64_t operand_hash = 0;
  std::vector<std::uint32_t> d;  ///< tiles × 16 × 8 raw encodings of D, row-major per tile
};

/// Reads a dump; throws std::runtime_error naming the file and what is wrong (missing, bad magic or version,
/// unknown shape, truncated). Does not check the hash (check_operands does).
ProbeDump read_probe(const std::string& path);
/// Writes the first `tiles` tiles of `dump` (the header's tile count and hash adjusted), atomically.
void write_probe(const std::string& path, const ProbeDump& dump, std::uint32_t tiles);
/// Throws std::runtime_error when the regenerated operands' hash differs from the dump's.
void check_operands(const ProbeDump& dump);

/// A warpgroup (wgmma) probe: tiles D(64×64) = A(64×K)·B(K×64) + C with explicit operands, written by
/// studies/tensorcore/wgmma_to_bin.py from wgmma_probe.py's output: "RTCWGMMA", u32 version 1, u32 input format
/// (0 f16, 1 bf16, 2 e4m3, 3 e5m2, 4 tf32), u32 K, u32 tiles, u32 max_num_imprecise_acc, u32 accumulator (0
/// binary32, 1 fp16), then A, B, C and D as u32 arrays (A, B raw input encodings, tf32 as binary32; C, D the
/// accumulator's encodings), each row-major per tile. Case class = tile mod 4 (narrow, cancel, all-finite,
/// zeros-tiny).
struct WgmmaDump {
  Field in = kFp16;
  Field acc = kFp32;
  int k = 0;
  std::uint32_t tiles = 0;
  int imprecise = 0;
  std::vector<std::uint32_t> a, b, c, d;
};
/// Reads a wgmma dump; throws std::runtime_error naming the file and what is wrong.
WgmmaDump read_wgmma(const std::string& path);

/// The numerics Format of a probe field.
numerics::Format format_of(const Field& f);

struct Model {
  numerics::Accumulation acc;
  std::optional<numerics::Rounding> output;  ///< a final rounding to the shape's accumulator format
  /// A composite (how nvcc 13 emulates fp8 mma.sync on sm_90): the products are taken in `k_order` (a
  /// permutation of 0..K-1) with the dot starting from zero, and C is added afterwards, rounded with *c_last:
  /// D = round(C + dot). Unset: C is the adder's starting value.
  std::optional<numerics::Rounding> c_last;
  std::vector<int> k_order;
  std::string label;  ///< a name for a composite; text() returns it when set
  std::string text() const;  ///< the label, or the canonical accumulation text [+ " then <rounding>"]
};

/// A plain model: `acc`, optionally followed by a rounding to the shape's accumulator format.
Model plain_model(const numerics::Accumulation& acc, std::optional<numerics::Rounding> output = std::nullopt);

/// The fp8 mma.sync emulation that nvcc 13.0 compiles for sm_90 (two HMMA.16816.F32 on operands converted to
/// fp16): tc-h100 over the k-pairs {0,1,4,5,...} then {2,3,6,7,...}, then + C in binary32 to nearest.
Model fp8_mma_sync_sm90_model(Shape s);
Model fp8_mma_sync_sm90_model(int k);

struct FitScore {
  std::int64_t outputs = 0;
  std::int64_t mismatches = 0;
  std::array<std::int64_t, 8> class_mismatches{};  ///< by case class (tc_cases.hpp)
  std::vector<std::string> examples;  ///< the first mismatches: tile, i, j, class, C, model and hardware values
};

/// Scores `m` on tiles [0, tiles) of `dump` (tiles = 0: all), describing up to `examples` mismatches.
FitScore score(const ProbeDump& dump, const Model& m, std::uint32_t tiles = 0, std::size_t examples = 1);
/// Scores `m` on every tile of a wgmma dump (class counts by tile mod 4).
FitScore score(const WgmmaDump& dump, const Model& m, std::size_t examples = 1);

/// Tensor-core bits measured by another project: north-numerical-computing/MATLAB-tensor-core (Khattak &
/// Mikaitis, BSD-2-Clause), converted by studies/tensorcore/peer_to_bin.py (the file layout is described there;
/// tests/fixtures/tensorcore-peer holds every line of their model_validation data). Each line is one output of
/// one instruction: D = C + Σ_k a_k·b_k over K products (the instruction's other k-values zero), C a binary32
/// value; for an fp16 output their probe rounds C to fp16 to nearest first. One operand set holds the GPUs that
/// were measured on the same A and B.
struct PeerGpu {
  std::string name;                  ///< as in their directory names: V100, A100, A2, Ada, L40S, H100, H200, B200
  std::vector<std::uint32_t> c;      ///< binary32 encodings, one per line
  std::vector<std::uint32_t> d32;    ///< binary32 outputs (empty when not measured)
  std::vector<std::uint32_t> d16;    ///< fp16 outputs (empty when not measured)
  bool zero_c32 = false;             ///< the binary32 outputs were measured with C = 0 (fp8 on H100, H200)
};
struct PeerSet {
  Field in = kFp16;
  int k = 0;
  std::uint32_t lines = 0;
  std::vector<std::uint32_t> a, b;  ///< lines × K input encodings (tf32 as binary32)
  std::vector<PeerGpu> gpus;
};
/// Reads an operand set; throws std::runtime_error naming the file and what is wrong.
PeerSet read_peer(const std::string& path);
/// The short name of a peer input format: fp16, bf16, e4m3, e5m2, tf32.
const char* peer_format_name(const Field& in);
/// Scores `m` on lines [0, lines) (0: all) of one GPU's outputs in `acc` (kFp32 or kFp16; the GPU must have them).
FitScore score(const PeerSet& set, const PeerGpu& gpu, const Field& acc, const Model& m, std::size_t examples = 1,
               std::uint32_t lines = 0);

/// The candidate grid for a shape: multi-term adders with group in {4, 8, 16, K}, anchored on the leading bit or
/// on the products' exponent sums, extra alignment bits 0..6 (and, for an fp16 accumulator, 13..17: binary32-wide
/// alignment), alignment and normalisation each toward-zero or nearest-even, carry bits 1, 2, 3 or 6, IEEE or
/// inf-pos-zero edges; for an fp16 accumulator also each binary32-register model followed by a nearest-even or
/// toward-zero conversion to fp16. Plus the sequential and pairwise fp32 / fp64 reference sums.
std::vector<Model> candidate_models(Shape s);
/// The same grid for an instruction of K products of `in` into `acc` (the peer data's lines).
std::vector<Model> candidate_models(const Field& in, const Field& acc, int k);

}  // namespace roundoff::tensorcore
