#pragma once
/// \file op_kind.hpp
/// The transformer ops roundoff knows, listed once, and the passes and tensor roles a Policy sets.
///
/// Every op appears exactly once in ROUNDOFF_FOR_EACH_OP(X) as X(Enumerator, "cli-name", Group, "what it is").
/// Adding an op there makes every switch over OpKind fail to compile (-Werror=switch) until it is handled,
/// and the name tables below grow with it (static_assert on their sizes). The Group (OpGroup) is where the
/// policy presets place the op (ops/policy.cpp places groups, never single ops): an op in an existing group
/// gets that group's entries in every preset; a new group makes the presets' switches over OpGroup fail to
/// compile until each preset says where the group runs.
///
/// Sites that the precision layouts of STUDY_PROTOCOL.md §4.1 need to tell apart are separate kinds:
///   - projections (PROJ-F / PROJ-dX / PROJ-dW) are (Matmul, Forward / BackwardData / BackwardWeight);
///     the classifier GEMM is its own kind (CLS), so `matmul` never touches the logits;
///   - the two residual adds of a Pre-Norm block are ResidualAttn (x + α·attn_out) and ResidualFfn
///     (x + α·ffn_out): the ane-fp16 layout runs only the FFN add in fp16;
///   - RoPE has two knobs: RopeAngles (θ = p·b^(-2i/d) and its cos/sin table: compute format = the format
///     the angle and cos/sin are evaluated in, storage = the table format) and RopeRotate (the rotation).
/// Ops added later go at the end of the list (GELU after AdamW), so that no existing op's index, and with it no
/// table order a canonical policy text or a CSV follows, moves.
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace roundoff::ops {

// clang-format off
#define ROUNDOFF_FOR_EACH_OP(X)                                                                                     \
  X(Embedding,    "embedding",     Embedding,     "token-embedding gather (EMB)")                                  \
  X(RmsNorm,      "rmsnorm",       Norm,          "RMSNorm incl. the sum-of-squares reduction (NORM)")             \
  X(Matmul,       "matmul",        Projection,    "linear projections y = x W^T: Q K V O W1 W3 W2 (PROJ-F/-dX/-dW)") \
  X(RopeAngles,   "rope-angles",   RopeTable,     "RoPE angles and cos/sin table (ROPE, angle knob)")              \
  X(RopeRotate,   "rope",          RopeRotation,  "RoPE rotation of q and k (ROPE, rotation knob)")                \
  X(AttnScores,   "attn-scores",   AttnScores,    "scaled q k^T with causal mask (ATT-S)")                         \
  X(Softmax,      "softmax",       Softmax,       "causal attention softmax (SMAX)")                               \
  X(AttnValues,   "attn-values",   AttnValues,    "attention weights x V (ATT-V)")                                 \
  X(Silu,         "silu",          FfnActivation, "SiLU x*sigmoid(x) (SILU)")                                      \
  X(SwiGlu,       "swiglu",        FfnActivation, "gate product silu(g)*u (SILU)")                                 \
  X(ResidualAttn, "residual-attn", ResidualAttn,  "residual add x + a*attn_out (RES)")                             \
  X(ResidualFfn,  "residual-ffn",  ResidualFfn,   "residual add x + a*ffn_out (RES)")                              \
  X(Classifier,   "classifier",    Classifier,    "logits GEMM h W_cls^T (CLS)")                                   \
  X(CrossEntropy, "cross-entropy", Loss,          "log-softmax + cross-entropy, loss reduced in fp64 (CLS)")       \
  X(AdamW,        "adamw",         Optimizer,     "AdamW update of master weights and moments (OPT)")             \
  X(Gelu,         "gelu",          FfnActivation, "GELU x*Phi(x), erf or tanh form (SILU group; --ffn gelu)")
// clang-format on

/// Where the policy presets place an op: ops of one group have the same entries in every preset
/// (tests/ops/policy_test.cpp, PolicyGroups). Named after STUDY_PROTOCOL.md §4.1's sites; the two residual adds
/// and the classifier / loss are groups of their own because the layouts treat them differently.
enum class OpGroup : std::uint8_t {
  Embedding,      ///< EMB
  Norm,           ///< NORM
  Projection,     ///< PROJ (the block's linear projections)
  RopeTable,      ///< ROPE angle knob (θ and the cos/sin table)
  RopeRotation,   ///< ROPE rotation knob
  AttnScores,     ///< ATT-S
  Softmax,        ///< SMAX
  AttnValues,     ///< ATT-V
  FfnActivation,  ///< SILU: the feed-forward's elementwise activation and gate (SiLU, SwiGLU's product, GELU)
  ResidualAttn,   ///< RES, attention branch
  ResidualFfn,    ///< RES, feed-forward branch
  Classifier,     ///< CLS, the logits GEMM
  Loss,           ///< CLS, log-softmax + cross-entropy
  Optimizer,      ///< OPT
};

/// One enumerator per op, in table order.
enum class OpKind : std::uint8_t {
#define ROUNDOFF_OP_ENUM(e, name, group, what) e,
  ROUNDOFF_FOR_EACH_OP(ROUNDOFF_OP_ENUM)
#undef ROUNDOFF_OP_ENUM
};

#define ROUNDOFF_OP_COUNT(e, name, group, what) +1
inline constexpr std::size_t kOpCount = 0 ROUNDOFF_FOR_EACH_OP(ROUNDOFF_OP_COUNT);
#undef ROUNDOFF_OP_COUNT

/// Static facts about an op.
struct OpInfo {
  OpKind kind;
  std::string_view name;  ///< CLI / CSV name
  OpGroup group;          ///< where the policy presets place it
  std::string_view what;  ///< one-line description with the STUDY_PROTOCOL group id
};

inline constexpr std::array<OpInfo, kOpCount> kOpInfo{{
#define ROUNDOFF_OP_INFO(e, name, group, what) OpInfo{OpKind::e, name, OpGroup::group, what},
    ROUNDOFF_FOR_EACH_OP(ROUNDOFF_OP_INFO)
#undef ROUNDOFF_OP_INFO
}};

/// All ops in table order (for loops over the policy table).
inline constexpr std::array<OpKind, kOpCount> kAllOps = [] {
  std::array<OpKind, kOpCount> a{};
  for (std::size_t i = 0; i < kOpCount; ++i) a[i] = kOpInfo[i].kind;
  return a;
}();

constexpr bool op_info_in_order() {
  for (std::size_t i = 0; i < kOpCount; ++i)
    if (static_cast<std::size_t>(kOpInfo[i].kind) != i) return false;
  return true;
}
static_assert(op_info_in_order(), "kOpInfo must follow the enum order");

/// Which computation of an op: forward (fprop), gradient w.r.t. data inputs (dgrad), w.r.t. weights (wgrad).
enum class Pass : std::uint8_t { Forward, BackwardData, BackwardWeight };
inline constexpr std::size_t kPassCount = 3;
inline constexpr std::array<Pass, kPassCount> kAllPasses{Pass::Forward, Pass::BackwardData, Pass::BackwardWeight};
/// CLI names, in enum order.
inline constexpr std::array<std::string_view, kPassCount> kPassNames{"fwd", "bwd-data", "bwd-weight"};

/// Tensors whose format the policy sets outside any single op.
enum class TensorRole : std::uint8_t {
  Weight,        ///< the working copy of the weights that the forward pass reads
  MasterWeight,  ///< the copy AdamW updates (equal to Weight when no separate master copy exists)
  AdamM,         ///< first moment
  AdamV,         ///< second moment
  Gradient,      ///< weight-gradient buffers (accumulated over micro-batches)
};
inline constexpr std::size_t kRoleCount = 5;
inline constexpr std::array<TensorRole, kRoleCount> kAllRoles{TensorRole::Weight, TensorRole::MasterWeight,
                                                              TensorRole::AdamM, TensorRole::AdamV,
                                                              TensorRole::Gradient};
/// CLI names, in enum order.
inline constexpr std::array<std::string_view, kRoleCount> kRoleNames{"weights", "master", "adam-m", "adam-v",
                                                                     "grads"};

constexpr std::size_t index_of(OpKind k) { return static_cast<std::size_t>(k); }
constexpr std::size_t index_of(Pass p) { return static_cast<std::size_t>(p); }
constexpr std::size_t index_of(TensorRole r) { return static_cast<std::size_t>(r); }

constexpr std::string_view name_of(OpKind k) { return kOpInfo[index_of(k)].name; }
constexpr OpGroup group_of(OpKind k) { return kOpInfo[index_of(k)].group; }
constexpr std::string_view name_of(Pass p) { return kPassNames[index_of(p)]; }
constexpr std::string_view name_of(TensorRole r) { return kRoleNames[index_of(r)]; }

/// Exact-name lookups (no exceptions; Policy::parse turns a miss into a one-line error).
std::optional<OpKind> find_op(std::string_view name);
std::optional<Pass> find_pass(std::string_view name);
std::optional<TensorRole> find_role(std::string_view name);
/// "embedding, rmsnorm, ..." for error messages.
std::string_view op_names_list();

}  // namespace roundoff::ops
