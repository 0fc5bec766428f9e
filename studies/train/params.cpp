// Parameter layout and seeded initialisation.
#include "studies/train/params.hpp"

#include <cmath>
#include <numbers>

#include "numerics/format.hpp"
#include "numerics/round.hpp"
#include "numerics/rounding.hpp"

namespace roundoff::studies::train {

std::string_view name_of(ParamTensor t) {
  switch (t) {
    case ParamTensor::Embedding: return "wte";
    case ParamTensor::AttnNorm: return "ln1w";
    case ParamTensor::Wq: return "wq";
    case ParamTensor::Wk: return "wk";
    case ParamTensor::Wv: return "wv";
    case ParamTensor::Wo: return "wo";
    case ParamTensor::FfnNorm: return "ln2w";
    case ParamTensor::W1: return "w1";
    case ParamTensor::W3: return "w3";
    case ParamTensor::W2: return "w2";
    case ParamTensor::FinalNorm: return "lnfw";
    case ParamTensor::Classifier: return "wcls";
  }
  return "?";
}

bool is_decayed(ParamTensor t, bool decay_embedding) {
  switch (t) {
    case ParamTensor::Embedding: return decay_embedding;
    case ParamTensor::AttnNorm:
    case ParamTensor::FfnNorm:
    case ParamTensor::FinalNorm: return false;
    case ParamTensor::Wq:
    case ParamTensor::Wk:
    case ParamTensor::Wv:
    case ParamTensor::Wo:
    case ParamTensor::W1:
    case ParamTensor::W3:
    case ParamTensor::W2:
    case ParamTensor::Classifier: return true;
  }
  return false;
}

ParamLayout param_layout(const ModelConfig& c) {
  const auto V = static_cast<std::size_t>(c.vocab), C = static_cast<std::size_t>(c.d),
             L = static_cast<std::size_t>(c.layers), H = static_cast<std::size_t>(c.hidden),
             KVD = static_cast<std::size_t>(c.kv_count() * c.head_size());
  ParamLayout lay;
  auto set = [&](ParamTensor t, std::size_t n, int layers) {
    const auto i = static_cast<std::size_t>(t);
    lay.size[i] = n;
    lay.layers[i] = layers;
  };
  set(ParamTensor::Embedding, V * C, 1);
  set(ParamTensor::AttnNorm, L * C, c.layers);
  set(ParamTensor::Wq, L * C * C, c.layers);
  set(ParamTensor::Wk, L * KVD * C, c.layers);
  set(ParamTensor::Wv, L * KVD * C, c.layers);
  set(ParamTensor::Wo, L * C * C, c.layers);
  set(ParamTensor::FfnNorm, L * C, c.layers);
  set(ParamTensor::W1, L * H * C, c.layers);
  set(ParamTensor::W3, c.ffn == Ffn::SwiGlu ? L * H * C : 0, c.layers);  // the GELU FFN has no W3
  set(ParamTensor::W2, L * C * H, c.layers);
  set(ParamTensor::FinalNorm, C, 1);
  set(ParamTensor::Classifier, c.tie_embeddings ? 0 : V * C, 1);
  for (std::size_t i = 0; i < kParamTensorCount; ++i) {
    lay.offset[i] = lay.total;
    lay.total += lay.size[i];
  }
  return lay;
}

namespace {

/// Standard normal for element i of a stream (Box–Muller, cosine branch).
double normal_draw(const numerics::StochasticBits& bits, std::uint64_t i) {
  constexpr double k2m53 = 0x1p-53;
  const double u1 = static_cast<double>((bits.draw(2 * i) >> 11) + 1) * k2m53;  // (0, 1]
  const double u2 = static_cast<double>(bits.draw(2 * i + 1) >> 11) * k2m53;     // [0, 1)
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

/// Uniform on (−1, 1) for element i of a stream: 2u − 1, u = 53 bits of draw i.
double uniform_draw(const numerics::StochasticBits& bits, std::uint64_t i) {
  return 2.0 * static_cast<double>(bits.draw(i) >> 11) * 0x1p-53 - 1.0;
}

/// AutoANE's uniform half-width of tensor t (params.hpp).
double autoane_bound(const ModelConfig& c, ParamTensor t) {
  const double alpha = 1.0 / std::sqrt(2.0 * c.layers), C = c.d, H = c.hidden,
               QD = static_cast<double>(c.heads) * c.head_size();
  switch (t) {
    case ParamTensor::Embedding:
    case ParamTensor::Classifier: return 0.02;
    case ParamTensor::Wq:
    case ParamTensor::Wk:
    case ParamTensor::Wv: return 1.0 / std::sqrt(C);
    case ParamTensor::Wo: return alpha / std::sqrt(QD);
    case ParamTensor::W1:
    case ParamTensor::W3: return 1.0 / std::sqrt(H);
    case ParamTensor::W2: return alpha / std::sqrt(C);
    case ParamTensor::AttnNorm:
    case ParamTensor::FfnNorm:
    case ParamTensor::FinalNorm: return 0.0;
  }
  return 0.0;
}

}  // namespace

std::vector<double> init_params(const ModelConfig& c, const Recipe& r, const ResidualRule& rule,
                                std::uint64_t seed) {
  const ParamLayout lay = param_layout(c);
  std::vector<double> w(lay.total, 0.0);
  const numerics::RoundingPlan fp32(numerics::formats::fp32);
  const double two_l = 2.0 * c.layers;
  for (const ParamTensor t : kAllParamTensors) {
    const auto off = lay.offset_of(t), n = lay.size_of(t);
    double std_dev = r.init_std;
    bool gain_one = false;
    switch (t) {
      case ParamTensor::AttnNorm:
      case ParamTensor::FfnNorm:
      case ParamTensor::FinalNorm: gain_one = true; break;
      case ParamTensor::Embedding:
      case ParamTensor::Classifier: break;
      case ParamTensor::Wq:
      case ParamTensor::Wk:
      case ParamTensor::Wv:
      case ParamTensor::Wo:
      case ParamTensor::W1:
      case ParamTensor::W3:
      case ParamTensor::W2: {
        const bool residual_out = t == ParamTensor::Wo || t == ParamTensor::W2;
        if (rule.post_norm) {
          const double fan_in = t == ParamTensor::W2 ? c.hidden : c.d;
          const double fan_out = (t == ParamTensor::W1 || t == ParamTensor::W3) ? c.hidden : c.d;
          const double gain = (t == ParamTensor::Wq || t == ParamTensor::Wk) ? 1.0 : rule.init_gain;
          std_dev = gain * std::sqrt(2.0 / (fan_in + fan_out));
        } else if (r.init == InitRule::Gpt2Scaled && residual_out) {
          std_dev = r.init_std / std::sqrt(two_l);
        }
        break;
      }
    }
    if (gain_one) {
      for (std::size_t i = 0; i < n; ++i) w[off + i] = 1.0;
      continue;
    }
    const numerics::StochasticBits bits{seed, 0x1417u + static_cast<std::uint64_t>(t)};
    if (r.init == InitRule::AutoAne) {
      const double a = autoane_bound(c, t);
      for (std::size_t i = 0; i < n; ++i)
        w[off + i] = numerics::round_to(fp32, numerics::Rounding::NearestEven, a * uniform_draw(bits, i));
      continue;
    }
    for (std::size_t i = 0; i < n; ++i)
      w[off + i] = numerics::round_to(fp32, numerics::Rounding::NearestEven, std_dev * normal_draw(bits, i));
  }
  return w;
}

}  // namespace roundoff::studies::train
