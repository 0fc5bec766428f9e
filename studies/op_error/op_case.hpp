#pragma once
/// \file op_case.hpp
/// One op of the per-op error study: its shape at the published (AutoANE) sizes, the subsampled tensors the
/// study actually computes, controlled-scale inputs, and the forward and backward calls through an
/// ops::Runner with the MPFR shadow on.
///
/// Subsampling keeps every reduction length of the published shape and computes fewer independent outputs:
///   matmul / classifier   forward  y (rows, min(out, 256)) = x (rows, in) W^T       reduction over in
///                         bwd-data dx (rows, in') = dy (rows, out) W (out, in')    reduction over out, in'·out ≤ 2^18
///                         bwd-weight dW (min(out, rows), in) over all `tokens`     reduction over tokens
///   attention ops         B = 1, max(1, min(heads, rows/16)) heads of T × hs        reductions over hs and T
///   row ops               rows token rows of the full width (RMSNorm and the embedding use all tokens, since
///                         their weight gradients reduce over tokens)
///   cross-entropy         max(1, rows/4) rows of the full vocabulary; adamw rows·256 parameters
/// The shadow (Reference backend) then runs on evenly spaced units of each call, as many as keep one call near
/// `ref_budget` multiply-adds.
///
/// Inputs (binary64 draws, then rounded to the storage format of the pass that reads them, so the local error
/// excludes the input cast): activations N(0, scale²) (ScaleKind::Activation); for attention ops the logits
/// have standard deviation `scale` (ScaleKind::Logit: q, k ~ N(0, scale)); weights N(0, 1/in); RMSNorm gains
/// 1 + N(0, 0.01); upstream gradients N(0, 1) (gradients after loss scaling).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ops/op_kind.hpp"
#include "ops/policy.hpp"
#include "ops/probe.hpp"

namespace roundoff::studies::op_error {

/// Named dimensions of one op ("tokens=256,in=1024,out=1024"), with the published defaults.
struct OpShape {
  std::map<std::string, std::int64_t> dims;
  std::int64_t at(const std::string& key) const { return dims.at(key); }
  /// "key=value,..." in key order.
  std::string text() const;
};

/// The AutoANE shape of an op (d = 1024, hidden 2816, 16 heads of 64, T = 256, vocabulary 16,893).
OpShape default_shape(ops::OpKind op);
/// The op's shape in a model of width d (bench/block_bench.cpp): 64 tokens, 4 heads of d/4, hidden d·11/4;
/// ops outside a block (embedding, RoPE angles, the attention residual, classifier, loss, AdamW) at their
/// default_shape.
OpShape block_shape(ops::OpKind op, std::int64_t d);
/// The defaults overridden by "k=v,k=v"; throws std::invalid_argument naming a bad token and the valid keys.
OpShape parse_shape(ops::OpKind op, const std::string& spec);
/// Parses an op name; throws std::invalid_argument listing the valid names.
ops::OpKind parse_op(const std::string& name);

/// What `scale` scales.
enum class ScaleKind : std::uint8_t { Activation, Logit };
ScaleKind scale_kind_of(ops::OpKind op);
std::string_view name_of(ScaleKind k);

struct CaseConfig {
  ops::OpKind op = ops::OpKind::Matmul;
  OpShape shape;
  std::string tensor;          ///< tape name (default: the op name)
  std::int64_t rows = 16;      ///< independent outputs computed (see the file comment)
  double scale = 1.0;          ///< activation σ or logit standard deviation
  std::uint64_t seed = 1;      ///< input draws
  double ref_budget = 1.0e6;   ///< Reference multiply-adds per shadowed call
  bool shadow = true;          ///< false: emulated calls only, no records (for timing the shadow's cost)
};

/// Runs the op forward and every backward pass it has under `policy`, shadowed; returns the tape records
/// (one per output tensor per pass). Deterministic in (policy, cfg).
std::vector<ops::OpRecord> run_case(const ops::Policy& policy, const CaseConfig& cfg);

/// The text that identifies what run_case computes for this op under `policy` (the op's OpPrecision for every
/// pass, plus the tensor-role formats for AdamW): two policies with the same key give the same records.
std::string precision_key(const ops::Policy& policy, ops::OpKind op);

}  // namespace roundoff::studies::op_error
