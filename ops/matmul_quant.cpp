#include "ops/matmul_quant.hpp"

#include <algorithm>
#include <string>
#include <vector>

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

/// Step 3 for a scaled fp8 role (ops/fp8_scaling.hpp): per tensor in any layout, 1×B blocks along K, B×B tiles in
/// the storage layout.
void fp8_operand(const Fp8Operand& f, std::span<double> out, const OperandSpec& o, const Fp8Slots* fp8,
                 const std::string& where) {
  const Fp8Scaling cfg = fp8 != nullptr ? fp8->cfg : Fp8Scaling{};
  Fp8TensorState* state = fp8 != nullptr ? fp8->tensor[index_of(o.role)] : nullptr;
  const bool record = fp8 != nullptr && fp8->record;
  if (f.per_tensor() || f.block_rows > 1 || o.k_is_cols)
    return quantize_fp8_operand(f, out, o.rows, o.cols, cfg, state, record, where);
  std::vector<double> t(out.size());  // K along the rows: quantize the transpose (cols × rows, K last)
  for (std::size_t r = 0; r < o.rows; ++r)
    for (std::size_t c = 0; c < o.cols; ++c) t[c * o.rows + r] = out[r * o.cols + c];
  quantize_fp8_operand(f, t, o.cols, o.rows, cfg, state, record, where);
  for (std::size_t r = 0; r < o.rows; ++r)
    for (std::size_t c = 0; c < o.cols; ++c) out[r * o.cols + c] = t[c * o.rows + r];
}

std::span<const double> one_operand(const Ctx<Emulated>& ctx, Pass pass, const OperandSpec& o,
                                    std::span<const double> v, std::size_t slot, const Fp8Slots* fp8) {
  const GemmQuant& q = ctx.precision().quant;
  const std::span<const double> cast = entry_cast(ctx, v, o.tensor, slot - 2);
  const std::span<double> out = scratch_buffer<double>(v.size(), slot);
  const std::string where =
      std::string(name_of(pass)) + " operand " + std::string(name_of(o.role)) + " (" + o.rows_name + " " +
      std::to_string(o.rows) + " × " + o.cols_name + " " + std::to_string(o.cols) + ", contraction axis " +
      (o.k_is_cols ? o.cols_name : o.rows_name) + ")";
  if (const Fp8Operand& f = q.fp8_of(o.role); f.on()) {
    std::copy(cast.begin(), cast.end(), out.begin());
    fp8_operand(f, out, o, fp8, where);
    return out;
  }
  const QuantDraws draws{ctx.bits(), nullptr, static_cast<std::uint8_t>(o.tensor)};
  quantize_operand(q.of(o.role), cast, o.rows, o.cols, o.k_is_cols, q.rht, q.rht_seed,
                   q.stochastic[index_of(o.role)] ? &draws : nullptr, out, where);
  return out;
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
  // The entry casts take slots 0 and 1 and are consumed before the next cast reuses them.
  const std::span<const double> qa = one_operand(ctx, pass, oa, a, 2, fp8);
  const std::span<const double> qb = one_operand(ctx, pass, ob, b, 3, fp8);
  return {qa, qb};
}

}  // namespace roundoff::ops
