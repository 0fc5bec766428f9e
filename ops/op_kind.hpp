#pragma once
/// \file op_kind.hpp
/// The transformer ops roundoff knows, listed once.
