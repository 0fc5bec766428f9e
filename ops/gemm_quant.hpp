#pragma once
/// \file gemm_quant.hpp
/// Block-scaled quantization of a GEMM's operands (issue 41 item 3): the policy field that says, per (op, pass),
/// which operands are quantized to which numerics::BlockFormat along the GEMM's contraction axis, which of them
/// round their elements stochastically, and whether both operands first go through a random Hadamard transform
/// (RHT); and the functions that apply it. docs/policy.md ("Block-scaled GEMMs") gives the grammar, the presets
/// and the source of every choice.
///
/// Operand roles. A GEMM op of the trainer (ops/matmul.hpp: OpKind::Matmul and OpKind::Classifier) reads two of
/// three tensors in each pass; the role names the tensor, not its side of the product:
///   pass        product               contraction axis K     operands (roles)
///   fwd         y  = x · Wᵀ           in-features            x (X), W (W)
///   bwd-data    dx = dy · W           out-features           dy (Dy), W (W)
///   bwd-weight  dW = dyᵀ · x          tokens                 dy (Dy), x (X)
/// so a role setting in an entry that does not read that tensor has no effect (NVIDIA's recipe: weights, activations
/// and gradients differ in their block shape and rounding, not in which pass reads them).
///
/// What happens to an operand v of role r when format[r] is set (emulated backend only; the Reference twin ignores
/// the whole field as it ignores ftz, so the MPFR shadow attributes the quantization error to the op):
///   1. v is cast on entry to the entry's storage format, as without quantization (the bf16 tensor a Transformer
///      Engine layer reads);
///   2. with rht on, every run of 16 consecutive values along K is multiplied by Q = D·H₁₆/4 (H₁₆ the Sylvester
///      Hadamard matrix, D = diag of 16 random signs drawn from rht_seed): v'_j = Σ_i v_i·Q_ij, evaluated in binary64
///      in i order and rounded once to fp32 (nearest-even; the fp32 output of the transform kernel). Q is orthogonal
///      (QQᵀ = I exactly), and both operands get the same Q on the same K indices, so A'·B' = A·Q·Qᵀ·B = A·B in exact
///      arithmetic: only the quantization sees the transform. K must be a multiple of 16;
///   3. v' is quantized along K in blocks of format[r] (numerics::quantize, its scale rule and nearest-even elements)
///      and replaced by the decoded values rounded once to fp32 (numerics::dequantize to fp32: exact for MX and the
///      integer grids in every realistic range; nf4's c_P·S and NVFP4's P·S_dec/S_enc rounded to fp32, as a
///      dequantize-to-fp32 emulation (bitsandbytes' fp32 nf4 decode, torchao's) computes them; fp32 values keep the
///      GEMM kernels' fast path). Two layouts ignore K: a 2-D format (nvfp4-16x16) is quantized in the
///      tensor's storage layout in tiles, so W and Wᵀ share one quantization; nf4 runs its blocks of 64 over the
///      flattened tensor in storage order (bitsandbytes' quantize_4bit). K (or the flattened size) must be a multiple
///      of the block size: otherwise a one-line refusal naming the op, pass and shape;
///      A NaN or ±inf in the operand: the MX rules give its block the NaN scale (NaN values); the rules that refuse
///      non-finite input (nvfp4's tensor scale, the integer and codebook rules) make the whole operand NaN, so a
///      diverging run is reported by the trainer's non-finite scan instead of stopping on an exception;
///   4. with stochastic[r], the elements are rounded stochastically instead of to nearest-even: the block scales are
///      those of the nearest-even quantization (the scale rules read only amax), and element i of the tensor (its index
///      in the tensor as the op receives it, whatever the layout used along K) draws bits.draw(key(tensor, i,
///      kQuantSlot)) from the op call's stream — a counter-based draw, so the result does not depend on the thread
///      count. Supported for the MX floating-point formats and nvfp4 (1-D); refused for the others.
/// The product is then the entry's ordinary GEMM (numerics::gemm under its Accumulation) of the decoded operands, and
/// the result is rounded to compute and storage as always. This is the emulation microxcaling and torchao run
/// (dequantize, then a high-precision GEMM); numerics::block_gemm instead sums each block's products exactly and adds
/// the block terms in the Accumulation, as an MX/NVFP4 tensor core does (docs/policy.md states the difference).
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "numerics/block_format.hpp"
#include "ops/fp8_scaling.hpp"
#include "numerics/rounding.hpp"

namespace roundoff::ops {

/// The tensor an operand of a GEMM op is: activation x, weight W, output gradient dy.
enum class GemmRole : std::uint8_t { X, W, Dy };
inline constexpr std::size_t kGemmRoleCount = 3;
inline constexpr std::array<GemmRole, kGemmRoleCount> kAllGemmRoles{GemmRole::X, GemmRole::W, GemmRole::Dy};
/// "x", "w", "dy".
std::string_view name_of(GemmRole r);
constexpr std::size_t index_of(GemmRole r) { return static_cast<std::size_t>(r); }

/// The RHT's default sign seed (any fixed value: NVIDIA's recipe uses one fixed random sign vector for all layers).
inline constexpr std::uint64_t kDefaultRhtSeed = 0x5248540000000001ull;  // "RHT" · 2^40 + 1
/// The RHT's size: 16×16 (NVIDIA's recipe, arXiv 2509.25149 §4).
inline constexpr std::size_t kRhtSize = 16;
/// The key slot of the stochastic element draws (slots 0..2 are the ops' own entry casts and results).
inline constexpr unsigned kQuantSlot = 8;

/// The per-(op, pass) block quantization of a GEMM's operands (see the file comment). The default quantizes nothing.
struct GemmQuant {
  std::array<std::optional<numerics::BlockFormat>, kGemmRoleCount> format{};  ///< nullopt: that role unquantized
  std::array<bool, kGemmRoleCount> stochastic{};                             ///< SR of that role's elements
  bool rht = false;
  std::uint64_t rht_seed = kDefaultRhtSeed;
  /// Scaled fp8 of each role (issue 44, ops/fp8_scaling.hpp): per-tensor (Transformer Engine) or block (DeepSeek-V3)
  /// scales; a role has either a block format or a scaled fp8, never both (the parser lets the later item replace the
  /// other). Their GEMM is ops/matmul_quant.hpp's exact model (codes, scales applied as the hardware does) or the
  /// decoded model below.
  std::array<Fp8Operand, kGemmRoleCount> fp8{};
  /// fp8-rescale (issue 44, docs/studies/fp8-recipes.md amendment 2): Off, or the fp8 element into whose range the
  /// decoded model (ops/matmul_quant.hpp) scales its operands by powers of two before the GEMM: each row i of A by
  /// 2^a_i and each column j of B by 2^b_j (rescale_exponent of the row's / column's finite amax), C_ij by
  /// 2^(a_i + b_j) when the GEMM adds into C, and the result C_ij by 2^−(a_i + b_j) after it. No effect in the exact
  /// model (its codes are in range) nor on a pass without quantized operands.
  Fp8Elem rescale = Fp8Elem::Off;

  /// Anything to do for an operand (a format, or the RHT)?
  bool active() const;
  const std::optional<numerics::BlockFormat>& of(GemmRole r) const { return format[index_of(r)]; }
  const Fp8Operand& fp8_of(GemmRole r) const { return fp8[index_of(r)]; }
  /// Any role with a per-tensor scaled fp8 (the state of ops/fp8_scaling.hpp)?
  bool per_tensor_fp8() const;
  /// Formats compare by canonical name (parse_block_format(name) is the format).
  friend bool operator==(const GemmQuant& a, const GemmQuant& b);
};

/// The sign vector of the RHT for `seed`: bit i of mix64(seed) set gives −1 (16 values ±1).
std::array<double, kRhtSize> rht_signs(std::uint64_t seed);
/// The RHT matrix Q = D·H₁₆/4, row-major 16×16 (Q_ij = s_i·H_ij/4, H_ij = (−1)^popcount(i & j)).
std::array<double, kRhtSize * kRhtSize> rht_matrix(std::uint64_t seed);
/// v (rows × K, row-major) ← every 16-run of each row times Q (step 2 of the file comment), in place. K % 16 == 0.
void rht_rows(std::span<double> v, std::size_t K, std::uint64_t seed);

/// Stochastic-rounding draws of a quantization: draw(i) gives the bits of element i (in the caller's index space).
struct QuantDraws {
  numerics::StochasticBits bits{};
  /// Maps a position in the rows × K layout being quantized to the caller's element index (identity when null).
  const std::size_t* element_of = nullptr;
  std::uint8_t tensor = 0;  ///< ops::Tensor of the keys
};

/// Step 3 (and 4 when `draws` is given) on v (rows × K row-major, blocks along K): v ← the decoded values.
/// Throws std::invalid_argument (one line, prefixed by `where`) when the block size does not divide K, or for a
/// stochastic format that does not support it.
void quantize_rows(const numerics::BlockFormat& f, std::span<double> v, std::size_t K, const QuantDraws* draws,
                   const std::string& where);

/// Whether quantization in format f ignores the contraction axis (2-D tiles in storage layout; nf4's flat blocks).
bool quantized_in_storage_layout(const numerics::BlockFormat& f);
/// Whether stochastic element rounding is supported for f (1-D MX floating-point formats and nvfp4).
bool supports_stochastic(const numerics::BlockFormat& f);

/// One operand of a GEMM pass as the op holds it: `data` is rows × cols row-major (after the entry cast), and the
/// contraction axis K is its columns (k_is_cols) or its rows. Writes the operand after steps 2–4 into `out`, in the
/// same rows × cols layout. `rht` applies step 2 (the caller applies it to both operands or to neither); `sr` the
/// stochastic draws (nullptr: nearest-even), keyed by the element's index in `data`. `where` prefixes errors.
void quantize_operand(const std::optional<numerics::BlockFormat>& f, std::span<const double> data, std::size_t rows,
                      std::size_t cols, bool k_is_cols, bool rht, std::uint64_t rht_seed, const QuantDraws* sr,
                      std::span<double> out, const std::string& where);

}  // namespace roundoff::ops
