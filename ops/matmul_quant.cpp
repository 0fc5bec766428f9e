#include "ops/matmul_quant.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "numerics/pack_cache_derived.hpp"
#include "ops/weight_cast.hpp"

namespace roundoff::ops {

namespace {

struct OperandSpec {
  GemmRole role;
  Tensor tensor;
  std::size_t rows, cols;
  bool k_is_cols;
  const char* rows_name;
  const char* cols_name;
};

/// The block length along the contraction axis of a blocked fp8 operand (1×B blocks or B×B tiles: B).
std::size_t k_block(const Fp8Operand& f) { return static_cast<std::size_t>(f.block_cols); }

/// Whether pass `pass` of entry `e` runs the exact fp8 model (matmul_quant.hpp): both operands scaled fp8 and no RHT;
/// both per tensor, or both blocked with the promotion interval (into fp32) as their block length along K. The
/// accumulation must be deterministic and its result fit binary32 (the hardware's fp32 registers).
bool exact_fp8(const OpPrecision& e, GemmRole ra, GemmRole rb) {
  const GemmQuant& q = e.quant;
  const Fp8Operand &fa = q.fp8_of(ra), &fb = q.fp8_of(rb);
  if (!fa.on() || !fb.on() || q.rht) return false;
  const numerics::Accumulation& acc = e.accumulate;
  if (acc.rounding == numerics::Rounding::Stochastic || numerics::result_format(acc).precision > 24 ||
      numerics::result_format(acc).emax > 127)
    return false;
  if (fa.per_tensor() && fb.per_tensor()) return true;
  if (fa.per_tensor() || fb.per_tensor()) return false;
  const auto n = static_cast<std::size_t>(acc.promote_every);
  return n > 0 && acc.promote_format == numerics::formats::fp32 && k_block(fa) == n && k_block(fb) == n;
}

/// Step 3 for a scaled fp8 role (ops/fp8_scaling.hpp): per tensor in any layout, 1×B blocks along K, B×B tiles in
/// the storage layout. With `sc`, out ← the codes and sc ← their scales (OperandScales, outer × blocks along K).
void fp8_operand(const Fp8Operand& f, std::span<double> out, const OperandSpec& o, const Fp8Slots* fp8,
                 const std::string& where, OperandScales* sc) {
  const Fp8Scaling cfg = fp8 != nullptr ? fp8->cfg : Fp8Scaling{};
  Fp8TensorState* state = fp8 != nullptr ? fp8->tensor[index_of(o.role)] : nullptr;
  const bool record = fp8 != nullptr && fp8->record;
  Fp8CastCounts* counts = fp8 != nullptr ? fp8->counts[index_of(o.role)] : nullptr;
  Fp8Codes codes;
  Fp8Codes* c = sc != nullptr ? &codes : nullptr;
  const std::size_t K = o.k_is_cols ? o.cols : o.rows, outer = o.k_is_cols ? o.rows : o.cols;
  if (f.per_tensor() || f.block_rows > 1 || o.k_is_cols) {
    quantize_fp8_operand(f, out, o.rows, o.cols, cfg, state, record, where, c, counts);
  } else {
    std::vector<double> t(out.size());  // K along the rows: quantize the transpose (cols × rows, K last)
    for (std::size_t r = 0; r < o.rows; ++r)
      for (std::size_t col = 0; col < o.cols; ++col) t[col * o.rows + r] = out[r * o.cols + col];
    quantize_fp8_operand(f, t, o.cols, o.rows, cfg, state, record, where, c, counts);
    for (std::size_t r = 0; r < o.rows; ++r)
      for (std::size_t col = 0; col < o.cols; ++col) out[r * o.cols + col] = t[col * o.rows + r];
  }
  if (sc == nullptr) return;
  sc->per_tensor = f.per_tensor();
  sc->inv = codes.tensor_inv;
  if (f.per_tensor()) return;
  const std::size_t B = k_block(f), nb = (K + B - 1) / B;
  sc->nb = nb;
  sc->s.assign(outer * nb, 0.0f);
  for (std::size_t u = 0; u < outer; ++u)
    for (std::size_t b = 0; b < nb; ++b) {
      std::size_t idx = 0;
      if (f.block_rows == 1) idx = u * nb + b;                                // K-last grid: outer × nb
      else if (o.k_is_cols) idx = (u / B) * codes.block_grid_cols + b;        // tiles: (row block, col block)
      else idx = b * codes.block_grid_cols + u / B;
      sc->s[u * nb + b] = codes.block[idx];
    }
}

std::span<const double> one_operand(const Ctx<Emulated>& ctx, Pass pass, const OperandSpec& o,
                                    std::span<const double> v, std::size_t slot, const Fp8Slots* fp8,
                                    OperandScales* sc) {
  const GemmQuant& q = ctx.precision().quant;
  // A scaled fp8 weight is quantized afresh on every call (its scales are state, weight_cache_key), but its entry
  // cast is kept (ops/weight_cast.hpp); the block formats keep the whole quantized result instead.
  std::shared_ptr<const std::vector<double>> kept;
  const std::span<const double> cast = q.fp8_of(o.role).on() ? weight_entry_cast(ctx, v, o.tensor, slot - 2, kept)
                                                             : entry_cast(ctx, v, o.tensor, slot - 2);
  const std::span<double> out = scratch_buffer<double>(v.size(), slot);
  const std::string where =
      std::string(name_of(pass)) + " operand " + std::string(name_of(o.role)) + " (" + o.rows_name + " " +
      std::to_string(o.rows) + " × " + o.cols_name + " " + std::to_string(o.cols) + ", contraction axis " +
      (o.k_is_cols ? o.cols_name : o.rows_name) + ")";
  if (const Fp8Operand& f = q.fp8_of(o.role); f.on()) {
    if (q.rht)  // the transform alone (no block format), then the fp8 quantization; the decoded model (exact_fp8)
      quantize_operand(std::nullopt, cast, o.rows, o.cols, o.k_is_cols, true, q.rht_seed, nullptr, out, where);
    else
      std::copy(cast.begin(), cast.end(), out.begin());
    fp8_operand(f, out, o, fp8, where, sc);
    return out;
  }
  const QuantDraws draws{ctx.bits(), nullptr, static_cast<std::uint8_t>(o.tensor)};
  quantize_operand(q.of(o.role), cast, o.rows, o.cols, o.k_is_cols, q.rht, q.rht_seed,
                   q.stochastic[index_of(o.role)] ? &draws : nullptr, out, where);
  return out;
}

/// The key of a weight operand's cast and quantization in the pack cache's derived operands (numerics/pack_cache_derived.hpp),
/// or "" when it cannot be kept: the result must be a function of W's values and of what the key names alone, so
/// not with stochastic draws (the entry cast's or the elements'), scaled fp8 (its scales are state), or the fast
/// paths off (the oracle runs everything afresh). It names the entry cast (storage format, mode, daz, NaN rule), the
/// block quantization (format, RHT and its seed) and the layout: the shape and the contraction axis, except for a
/// format quantized in the storage layout without the RHT, which ignores the axis (fwd and bwd-data share it).
std::string weight_cache_key(const Ctx<Emulated>& ctx, const OperandSpec& o) {
  const OpPrecision& p = ctx.precision();
  const GemmQuant& q = p.quant;
  if (o.role != GemmRole::W || !ctx.fast_paths() || ctx.exec().pack_cache == nullptr ||
      p.rounding == numerics::Rounding::Stochastic || q.stochastic[index_of(o.role)] || q.fp8_of(o.role).on())
    return "";
  const std::optional<numerics::BlockFormat>& f = q.of(o.role);
  const bool any_axis = f && !q.rht && quantized_in_storage_layout(*f);
  return "quant-w " + std::to_string(o.rows) + "x" + std::to_string(o.cols) +
         (any_axis ? " storage" : o.k_is_cols ? " k=cols" : " k=rows") + " " + (f ? f->name : "-") +
         (q.rht ? " rht " + std::to_string(q.rht_seed) : "") + " cast " + numerics::name_of(p.storage) + " " +
         std::to_string(static_cast<int>(p.rounding)) + " daz " + std::to_string(static_cast<int>(p.daz)) + " nan " +
         std::to_string(static_cast<int>(p.nan));
}

/// one_operand, with a weight's result kept in the pack cache while the model's promise that W does not change
/// holds (a registered immutable range, numerics/gemm_kernels.hpp): the micro-steps of an update and the
/// evaluations then cast and quantize each weight once per key. The kept values are those one_operand computed,
/// so the bits are the same.
std::span<const double> one_operand_cached(const Ctx<Emulated>& ctx, Pass pass, const OperandSpec& o,
                                           std::span<const double> v, std::size_t slot, const Fp8Slots* fp8,
                                           OperandScales* sc) {
  const std::string tag = weight_cache_key(ctx, o);
  if (tag.empty()) return one_operand(ctx, pass, o, v, slot, fp8, sc);
  numerics::kernels::PackCache& cache = *ctx.exec().pack_cache;
  const std::span<double> out = scratch_buffer<double>(v.size(), slot);
  if (const auto kept = numerics::kernels::find_derived(cache, v.data(), v.size(), tag); kept && kept->size() == v.size()) {
    std::copy(kept->begin(), kept->end(), out.begin());
    return out;
  }
  const std::span<const double> r = one_operand(ctx, pass, o, v, slot, fp8, sc);
  numerics::kernels::store_derived(cache, v.data(), v.size(), tag, std::vector<double>(r.begin(), r.end()));
  return r;
}

}  // namespace

QuantOperands quantized_operands(const Ctx<Emulated>& ctx, Pass pass, MatmulShape s, std::span<const double> a,
                                 std::span<const double> b, const Fp8Slots* fp8) {
  const auto N = static_cast<std::size_t>(s.n), I = static_cast<std::size_t>(s.in), O = static_cast<std::size_t>(s.out);
  OperandSpec oa{}, ob{};
  switch (pass) {
    case Pass::Forward:
      oa = {GemmRole::X, Tensor::X, N, I, true, "tokens", "in-features"};
      ob = {GemmRole::W, Tensor::W, O, I, true, "out-features", "in-features"};
      break;
    case Pass::BackwardData:
      oa = {GemmRole::Dy, Tensor::Dy, N, O, true, "tokens", "out-features"};
      ob = {GemmRole::W, Tensor::W, O, I, false, "out-features", "in-features"};
      break;
    case Pass::BackwardWeight:
      oa = {GemmRole::Dy, Tensor::Dy, N, O, false, "tokens", "out-features"};
      ob = {GemmRole::X, Tensor::X, N, I, false, "tokens", "in-features"};
      break;
  }
  QuantOperands r;
  r.exact = exact_fp8(ctx.precision(), oa.role, ob.role);
  if (r.exact) r.kb = static_cast<std::size_t>(ctx.precision().accumulate.promote_every);
  else r.rescale = ctx.precision().quant.rescale;
  // The entry casts take slots 0 and 1 and are consumed before the next cast reuses them.
  r.a = one_operand_cached(ctx, pass, oa, a, 2, fp8, r.exact ? &r.sa : nullptr);
  r.b = one_operand_cached(ctx, pass, ob, b, 3, fp8, r.exact ? &r.sb : nullptr);
  return r;
}

void quant_gemm(const Ctx<Emulated>& ctx, const QuantOperands& q, std::size_t M, std::size_t N, std::size_t K,
                numerics::ConstMatrix A, numerics::ConstMatrix B, double* C, std::size_t ldc, bool accumulate, Key r,
                std::size_t a_outer0) {
  if (!q.exact && q.rescale != Fp8Elem::Off) return rescaled_gemm(ctx, q.rescale, M, N, K, A, B, C, ldc, accumulate, r);
  if (!q.exact) return ctx.gemm(M, N, K, A, B, C, ldc, accumulate, r);
  const numerics::Accumulation& acc = ctx.precision().accumulate;
  std::vector<double> P(M * N);
  const auto part = [&](const numerics::Accumulation& a, std::size_t k0, std::size_t kl) {
    const numerics::ConstMatrix Ab{A.data + (A.transposed ? k0 * A.ld : k0), A.ld, A.transposed};
    const numerics::ConstMatrix Bb{B.data + (B.transposed ? k0 : k0 * B.ld), B.ld, B.transposed};
    numerics::gemm(a, M, N, kl, Ab, Bb, P.data(), N, false, {}, nullptr, omp_in_parallel() ? 1 : 0, ctx.exec().kernels,
                   nullptr);
  };
  std::vector<float> D(M * N, 0.0f);
  if (q.sa.per_tensor) {
    part(acc, 0, K);
    const float ab = q.sa.inv * q.sb.inv;
    for (std::size_t i = 0; i < M * N; ++i) D[i] = static_cast<float>(P[i]) * ab;
  } else {
    numerics::Accumulation chunk = acc;
    chunk.promote_every = 0;
    for (std::size_t b = 0, k0 = 0; k0 < K; ++b, k0 += q.kb) {
      part(chunk, k0, std::min(q.kb, K - k0));
      for (std::size_t i = 0; i < M; ++i)
        for (std::size_t j = 0; j < N; ++j) {
          const float s = q.sa.at(a_outer0 + i, b) * q.sb.at(j, b);
          D[i * N + j] = std::fma(static_cast<float>(P[i * N + j]), s, D[i * N + j]);
        }
    }
  }
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t j = 0; j < N; ++j) {
      double& c = C[i * ldc + j];
      const double d = D[i * N + j];
      c = accumulate ? static_cast<double>(static_cast<float>(c + d)) : d;
    }
}

void rescaled_gemm(const Ctx<Emulated>& ctx, Fp8Elem e, std::size_t M, std::size_t N, std::size_t K,
                   numerics::ConstMatrix A, numerics::ConstMatrix B, double* C, std::size_t ldc, bool accumulate,
                   Key r) {
  const auto finite_amax = [](double m, double v) { return std::isfinite(v) ? std::max(m, std::fabs(v)) : m; };
  std::vector<int> ea(M), eb(N);
  for (std::size_t i = 0; i < M; ++i) {
    double m = 0;
    for (std::size_t k = 0; k < K; ++k) m = finite_amax(m, A(i, k));
    ea[i] = rescale_exponent(m, e);
  }
  for (std::size_t j = 0; j < N; ++j) {
    double m = 0;
    for (std::size_t k = 0; k < K; ++k) m = finite_amax(m, B(k, j));
    eb[j] = rescale_exponent(m, e);
  }
  std::vector<double> As(M * K), Bs(K * N), Cs(M * N, 0.0);  // A' (M × K), B' (K × N), C' (M × N), row-major
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t k = 0; k < K; ++k) As[i * K + k] = std::ldexp(A(i, k), ea[i]);
  for (std::size_t k = 0; k < K; ++k)
    for (std::size_t j = 0; j < N; ++j) Bs[k * N + j] = std::ldexp(B(k, j), eb[j]);
  if (accumulate)
    for (std::size_t i = 0; i < M; ++i)
      for (std::size_t j = 0; j < N; ++j) Cs[i * N + j] = std::ldexp(C[i * ldc + j], ea[i] + eb[j]);
  ctx.gemm(M, N, K, numerics::ConstMatrix{As.data(), K}, numerics::ConstMatrix{Bs.data(), N}, Cs.data(), N, accumulate,
           r);
  for (std::size_t i = 0; i < M; ++i)
    for (std::size_t j = 0; j < N; ++j) C[i * ldc + j] = std::ldexp(Cs[i * N + j], -(ea[i] + eb[j]));
}

}  // namespace roundoff::ops
