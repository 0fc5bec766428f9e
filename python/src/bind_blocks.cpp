// Block-scaled quantization (numerics/block_format.hpp): quantize to codes + scales, dequantize to values.
#include <algorithm>
#include <span>
#include <vector>

#include "numerics/block_format.hpp"
#include "numerics/block_gemm.hpp"
#include "numerics/palette.hpp"
#include "python/src/bind.hpp"

namespace roundoff::python {

using namespace numerics;

namespace {
/// x: C-contiguous, flattened, whose last axis has axis_len elements. Returns (codes uint8 of x's size, scales
/// uint32 with one per block, tensor scale, biases uint32 with one per block or empty). float32 input goes to the
/// float overload (the kernels read it directly; the same codes as its widening).
template <class T>
py::tuple quantize_array(const py::array_t<T, py::array::c_style>& x, const std::string& name, std::int64_t axis_len) {
  using U8 = py::array_t<std::uint8_t, py::array::c_style>;
  using U32 = py::array_t<std::uint32_t, py::array::c_style>;
  const BlockFormat b = parse_block_format(name);
  if (axis_len <= 0) throw std::invalid_argument(b.name + ": the quantized axis is empty");
  BlockCodes q;
  {
    py::gil_scoped_release release;
    q = quantize(b, std::span<const T>(x.data(), static_cast<std::size_t>(x.size())), static_cast<std::size_t>(axis_len));
  }
  U8 codes(static_cast<py::ssize_t>(q.codes.size()));
  std::copy(q.codes.begin(), q.codes.end(), codes.mutable_data());
  U32 scales(static_cast<py::ssize_t>(q.scales.size()));
  std::copy(q.scales.begin(), q.scales.end(), scales.mutable_data());
  U32 biases(static_cast<py::ssize_t>(q.biases.size()));
  std::copy(q.biases.begin(), q.biases.end(), biases.mutable_data());
  return py::make_tuple(codes, scales, q.tensor_scale, biases);
}
}  // namespace

void bind_blocks(py::module_& m) {
  using U8 = py::array_t<std::uint8_t, py::array::c_style>;
  using U32 = py::array_t<std::uint32_t, py::array::c_style>;
  m.def("block_format_names", [] { return block_format_names(); });
  m.def("block_format_info", [](const std::string& name) {
    const BlockFormat b = parse_block_format(name);
    return py::make_tuple(b.name, b.block_size, element_bits(b.element), scale_bits(b.scale),
                          std::string(name_of(b.rule)), std::string(name_of(b.scale)), b.block_rows);
  });
  m.def("quantize_blocks_f32", [](const F32& x, const std::string& name, std::int64_t axis_len) {
    return quantize_array<float>(x, name, axis_len);
  });
  m.def("quantize_blocks", [](const F64& x, const std::string& name, std::int64_t axis_len) {
    return quantize_array<double>(x, name, axis_len);
  });
  m.def("dequantize_blocks", [](const U8& codes, const U32& scales, const std::string& name, float tensor_scale,
                                bool f32, const U32& biases, std::size_t axis_len) {
    const BlockFormat b = parse_block_format(name);
    need_size(codes, scales.size() * b.block_size * b.block_rows, "codes", "(block size times the number of scales)");
    F64 out(codes.size());
    {
      py::gil_scoped_release release;
      dequantize_into(b, std::span<const std::uint8_t>(codes.data(), static_cast<std::size_t>(codes.size())),
                      std::span<const std::uint32_t>(scales.data(), static_cast<std::size_t>(scales.size())),
                      tensor_scale, f32 ? formats::fp32 : formats::fp64,
                      std::span<double>(out.mutable_data(), static_cast<std::size_t>(codes.size())),
                      std::span<const std::uint32_t>(biases.data(), static_cast<std::size_t>(biases.size())), axis_len);
    }
    return out;
  });
  // nf4-dq: (codes, 8-bit scale codes as uint32, group scales' fp32 bits, offset).
  m.def("quantize_blocks_dq", [](const F64& x, const std::string& name, std::int64_t axis_len) {
    const BlockFormat b = parse_block_format(name);
    if (axis_len <= 0) throw std::invalid_argument(b.name + ": the quantized axis is empty");
    BlockCodes q;
    {
      py::gil_scoped_release release;
      q = quantize(b, std::span<const double>(x.data(), static_cast<std::size_t>(x.size())),
                   static_cast<std::size_t>(axis_len));
    }
    U8 codes(static_cast<py::ssize_t>(q.codes.size()));
    std::copy(q.codes.begin(), q.codes.end(), codes.mutable_data());
    U32 scales(static_cast<py::ssize_t>(q.scales.size()));
    std::copy(q.scales.begin(), q.scales.end(), scales.mutable_data());
    U32 ss(static_cast<py::ssize_t>(q.scale_scales.size()));
    std::copy(q.scale_scales.begin(), q.scale_scales.end(), ss.mutable_data());
    return py::make_tuple(codes, scales, ss, q.scale_offset);
  });
  m.def("dequantize_blocks_dq", [](const U8& codes, const U32& scales, const U32& scale_scales, float offset,
                                   const std::string& name, bool f32, std::size_t axis_len) {
    const BlockFormat b = parse_block_format(name);
    BlockCodes q;
    q.codes.assign(codes.data(), codes.data() + codes.size());
    q.scales.assign(scales.data(), scales.data() + scales.size());
    q.scale_scales.assign(scale_scales.data(), scale_scales.data() + scale_scales.size());
    q.scale_offset = offset;
    std::vector<double> v;
    {
      py::gil_scoped_release release;
      v = dequantize(b, q, f32 ? formats::fp32 : formats::fp64, axis_len);
    }
    F64 out(static_cast<py::ssize_t>(v.size()));
    std::copy(v.begin(), v.end(), out.mutable_data());
    return out;
  });
  // Palettes: x flat (rows rows), lut flat (groups × k).
  m.def("palettize", [](const F64& x, const F32& lut, std::size_t k, std::size_t groups, std::size_t rows) {
    const Palette p{std::vector<float>(lut.data(), lut.data() + lut.size()), k, groups};
    std::vector<std::uint8_t> idx;
    {
      py::gil_scoped_release release;
      idx = palettize(p, std::span<const double>(x.data(), static_cast<std::size_t>(x.size())), rows);
    }
    U8 out(static_cast<py::ssize_t>(idx.size()));
    std::copy(idx.begin(), idx.end(), out.mutable_data());
    return out;
  });
  m.def("depalettize", [](const U8& codes, const F32& lut, std::size_t k, std::size_t groups, std::size_t rows) {
    const Palette p{std::vector<float>(lut.data(), lut.data() + lut.size()), k, groups};
    const std::vector<double> v =
        depalettize(p, std::span<const std::uint8_t>(codes.data(), static_cast<std::size_t>(codes.size())), rows);
    F64 out(static_cast<py::ssize_t>(v.size()));
    std::copy(v.begin(), v.end(), out.mutable_data());
    return out;
  });
  // A: rows×K codes (C order) with its scales/tensor scale/biases under format name_a; B likewise as N×K.
  m.def("block_gemm", [](const Accumulation& acc, const U8& codes_a, const U32& scales_a, float ts_a, const U32& biases_a,
                         const std::string& name_a, std::size_t rows_a, const U8& codes_b, const U32& scales_b,
                         float ts_b, const U32& biases_b, const std::string& name_b, std::size_t rows_b, std::size_t K,
                         std::uint64_t seed, std::uint64_t stream, int threads) {
    const BlockFormat fa = parse_block_format(name_a), fb = parse_block_format(name_b);
    const auto span8 = [](const U8& x) { return std::span<const std::uint8_t>(x.data(), static_cast<std::size_t>(x.size())); };
    const auto span32 = [](const U32& x) { return std::span<const std::uint32_t>(x.data(), static_cast<std::size_t>(x.size())); };
    const BlockMatrix a{fa, rows_a, K, span8(codes_a), span32(scales_a), ts_a, span32(biases_a)};
    const BlockMatrix bt{fb, rows_b, K, span8(codes_b), span32(scales_b), ts_b, span32(biases_b)};
    F64 out({static_cast<py::ssize_t>(rows_a), static_cast<py::ssize_t>(rows_b)});
    double* c = out.mutable_data();
    {
      py::gil_scoped_release release;
      block_gemm(acc, a, bt, c, rows_b, StochasticBits{seed, stream}, threads);
    }
    return out;
  });
}

}  // namespace roundoff::python
