#include "ops/op_kind.hpp"

#include <string>

namespace roundoff::ops {

std::optional<OpKind> find_op(std::string_view name) {
  for (const OpInfo& i : kOpInfo)
    if (i.name == name) return i.kind;
  return std::nullopt;
}

std::optional<Pass> find_pass(std::string_view name) {
  for (Pass p : kAllPasses)
    if (name_of(p) == name) return p;
  return std::nullopt;
}

std::optional<TensorRole> find_role(std::string_view name) {
  for (TensorRole r : kAllRoles)
    if (name_of(r) == name) return r;
  return std::nullopt;
}

std::string_view op_names_list() {
  static const std::string list = [] {
    std::string s;
    for (const OpInfo& i : kOpInfo) {
      if (!s.empty()) s += ", ";
      s += i.name;
    }
    return s;
  }();
  return list;
}

}  // namespace roundoff::ops
