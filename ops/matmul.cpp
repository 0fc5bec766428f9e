// Explicit instantiations: each op compiles once per backend.
#include "ops/matmul.hpp"

namespace roundoff::ops {
ROUNDOFF_MATMUL_DECL(, Emulated)
ROUNDOFF_MATMUL_DECL(, Reference)

// Binary32 forms: the precondition checked before the GEMM runs (the outputs are narrowed exactly only when the
// storage format fits binary32). A binary64 dW needs none.
void matmul_forward(std::span<float> y, std::span<const float> x, std::span<const double> w, MatmulShape s,
                    const Ctx<Emulated>& ctx, Select sel, const Fp8Slots* fp8) {
  ctx.require_binary32_storage();
  matmul_forward_io<Emulated, float>(y, x, w, s, ctx, sel, fp8);
}
void matmul_backward_data(std::span<float> dx, std::span<const float> dy, std::span<const double> w, MatmulShape s,
                          const Ctx<Emulated>& ctx, Select sel, const Fp8Slots* fp8) {
  ctx.require_binary32_storage();
  matmul_backward_data_io<Emulated, float>(dx, dy, w, s, ctx, sel, fp8);
}
void matmul_forward(std::span<float> y, std::span<const float> x, std::span<const float> w, MatmulShape s,
                    const Ctx<Emulated>& ctx, Select sel, const Fp8Slots* fp8) {
  ctx.require_binary32_storage();
  matmul_forward_io<Emulated, float, float>(y, x, w, s, ctx, sel, fp8);
}
void matmul_forward(std::span<double> y, std::span<const double> x, std::span<const float> w, MatmulShape s,
                    const Ctx<Emulated>& ctx, Select sel, const Fp8Slots* fp8) {
  matmul_forward_io<Emulated, double, float>(y, x, w, s, ctx, sel, fp8);
}
void matmul_backward_data(std::span<float> dx, std::span<const float> dy, std::span<const float> w, MatmulShape s,
                          const Ctx<Emulated>& ctx, Select sel, const Fp8Slots* fp8) {
  ctx.require_binary32_storage();
  matmul_backward_data_io<Emulated, float, float>(dx, dy, w, s, ctx, sel, fp8);
}
void matmul_backward_data(std::span<double> dx, std::span<const double> dy, std::span<const float> w, MatmulShape s,
                          const Ctx<Emulated>& ctx, Select sel, const Fp8Slots* fp8) {
  matmul_backward_data_io<Emulated, double, float>(dx, dy, w, s, ctx, sel, fp8);
}
void matmul_backward_weight(std::span<double> dw, std::span<const float> dy, std::span<const float> x, MatmulShape s,
                            const Ctx<Emulated>& ctx, Select sel, const Fp8Slots* fp8) {
  matmul_backward_weight_io<Emulated, float>(dw, dy, x, s, ctx, sel, fp8);
}
void matmul_backward_weight(std::span<float> dw, std::span<const float> dy, std::span<const float> x, MatmulShape s,
                            const Ctx<Emulated>& ctx, Select sel, const Fp8Slots* fp8) {
  ctx.require_binary32_storage();
  matmul_backward_weight_io<Emulated, float, float>(dw, dy, x, s, ctx, sel, fp8);
}
void matmul_backward_weight(std::span<float> dw, std::span<const double> dy, std::span<const double> x, MatmulShape s,
                            const Ctx<Emulated>& ctx, Select sel, const Fp8Slots* fp8) {
  ctx.require_binary32_storage();
  matmul_backward_weight_io<Emulated, double, float>(dw, dy, x, s, ctx, sel, fp8);
}
}  // namespace roundoff::ops
