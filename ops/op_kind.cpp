#include "ops/op_kind.hpp"
