#pragma once
/// \file params.hpp
/// Parameter layout (llm.c style): every tensor of the model lives in one flat buffer, in the order of
/// ParamTensor, and ParamViews names each slice with its shape. Matrices are (out, in): y = x·Wᵀ.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "studies/train/config.hpp"

namespace roundoff::studies::train {

/// The model's tensors, in buffer order. Per-layer tensors hold all L layers back to back.
enum class ParamTensor : std::uint8_t {
  Embedding,   ///< wte  (V, C)
  AttnNorm,    ///< ln1w (L, C)      RMSNorm gain before attention (after it, under DeepNorm)
  Wq,          ///< wq   (L, C, C)
  Wk,          ///< wk   (L, KVD, C)  KVD = kv_heads·hs (= C without GQA)
  Wv,          ///< wv   (L, KVD, C)
  Wo,          ///< wo   (L, C, C)
  FfnNorm,     ///< ln2w (L, C)
  W1,          ///< w1   (L, H, C)   gate projection (SiLU side)
  W3,          ///< w3   (L, H, C)   up projection (linear side)
  W2,          ///< w2   (L, C, H)   down projection
  FinalNorm,   ///< lnfw (C)
  Classifier,  ///< wcls (V, C)      untied; 0 elements when the embeddings are tied
};
inline constexpr std::size_t kParamTensorCount = 12;
inline constexpr std::array kAllParamTensors{
    ParamTensor::Embedding, ParamTensor::AttnNorm, ParamTensor::Wq, ParamTensor::Wk,
    ParamTensor::Wv,        ParamTensor::Wo,       ParamTensor::FfnNorm, ParamTensor::W1,
    ParamTensor::W3,        ParamTensor::W2,       ParamTensor::FinalNorm, ParamTensor::Classifier};
static_assert(kAllParamTensors.size() == kParamTensorCount);

/// Short name used in telemetry and CSV ("wte", "ln1w", "wq", …).
std::string_view name_of(ParamTensor t);
/// Matrices get weight decay; embedding and norm gains do not (STUDY_PROTOCOL.md §4.3) unless
/// `decay_embedding` (AutoANE's recipe decays the embedding too).
bool is_decayed(ParamTensor t, bool decay_embedding = false);

/// Where each tensor sits in the flat buffer.
struct ParamLayout {
  std::array<std::size_t, kParamTensorCount> offset{};
  std::array<std::size_t, kParamTensorCount> size{};  ///< all layers together
  std::array<int, kParamTensorCount> layers{};        ///< L for per-layer tensors, 1 otherwise
  std::size_t total = 0;

  std::size_t offset_of(ParamTensor t) const { return offset[static_cast<std::size_t>(t)]; }
  std::size_t size_of(ParamTensor t) const { return size[static_cast<std::size_t>(t)]; }
  /// Elements of one layer's slice of t.
  std::size_t layer_size(ParamTensor t) const {
    return size_of(t) / static_cast<std::size_t>(layers[static_cast<std::size_t>(t)]);
  }
};
ParamLayout param_layout(const ModelConfig& c);

/// Named slices of a flat buffer laid out by param_layout (ParameterTensors of llm.c).
template <class T>
struct ParamViews {
  std::span<T> wte, ln1w, wq, wk, wv, wo, ln2w, w1, w3, w2, lnfw, wcls;

  ParamViews(std::span<T> flat, const ParamLayout& lay)
      : wte(slice(flat, lay, ParamTensor::Embedding)), ln1w(slice(flat, lay, ParamTensor::AttnNorm)),
        wq(slice(flat, lay, ParamTensor::Wq)), wk(slice(flat, lay, ParamTensor::Wk)),
        wv(slice(flat, lay, ParamTensor::Wv)), wo(slice(flat, lay, ParamTensor::Wo)),
        ln2w(slice(flat, lay, ParamTensor::FfnNorm)), w1(slice(flat, lay, ParamTensor::W1)),
        w3(slice(flat, lay, ParamTensor::W3)), w2(slice(flat, lay, ParamTensor::W2)),
        lnfw(slice(flat, lay, ParamTensor::FinalNorm)), wcls(slice(flat, lay, ParamTensor::Classifier)) {}

  /// Layer l's part of a per-layer tensor.
  static std::span<T> layer(std::span<T> all, int layers, int l) {
    const std::size_t n = all.size() / static_cast<std::size_t>(layers);
    return all.subspan(n * static_cast<std::size_t>(l), n);
  }

 private:
  static std::span<T> slice(std::span<T> flat, const ParamLayout& lay, ParamTensor t) {
    return flat.subspan(lay.offset_of(t), lay.size_of(t));
  }
};

/// Initial parameters, a pure function of (config, recipe, residual rule, seed); values are rounded to
/// fp32 so every policy starts from the same weights.
///  - norm gains 1;
///  - Normal: embedding, classifier and every matrix N(0, std²) (std = recipe.init_std);
///  - Gpt2Scaled: as Normal with std/√(2L) on Wo and W2;
///  - DeepNorm rule: block matrices Xavier-normal, std = gain·√(2/(fan_in+fan_out)), gain β on Wv, Wo,
///    W1, W3, W2 and 1 on Wq, Wk; embedding and classifier N(0, std²);
///  - AutoAne (its train.m, whatever the residual rule): uniform on (−a, a) with a = 1/√C for Wq, Wk, Wv;
///    α/√(NH·hs) for Wo; 1/√H for W1 and W3; α/√C for W2 (as its code has it, not W2's fan-in H); 0.02 for
///    the embedding and an untied classifier; α = 1/√(2L).
/// Normal draws come from Box–Muller on StochasticBits{seed, stream = 0x1417 + tensor}, element i using
/// draws 2i and 2i+1; uniform draws use draw i of the same stream (53 bits); so any element can be
/// regenerated independently.
std::vector<double> init_params(const ModelConfig& c, const Recipe& r, const ResidualRule& rule,
                                std::uint64_t seed);

}  // namespace roundoff::studies::train
