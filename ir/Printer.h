#pragma once
// Printers of a Graph: Relay-style text (read back by Parser.h), Graphviz DOT, and JSON.
//
// Text form:
//   def @main(%input: Tensor[(1, 3, 32, 32), float32]) -> Tensor[(1, 10), float32] {
//     %conv1.weight = constant(Tensor[(8, 3, 3, 3), float32]);        // values elided
//     %shape = constant([1, -1], Tensor[(2), int64]);                  // small: values inline
//     %0 = nn.conv2d(%input, %conv1.weight, strides=[1, 1], ...); /* ty=Tensor[...] */
//     return %0;
//   }
// Each constant is printed just before its first use; nodes are numbered in order. A fused
// group prints as a primitive function applied to its arguments, its body indented:
//     %5 = fn (%p0: Tensor[...], %p1: Tensor[...]) -> Tensor[...] {
//       %0 = nn.conv2d(%p0, %p1, ...); /* ty=... */
//       return %0;
//     }(%4, %conv1.weight); /* ty=... */
#include <string>

#include "ir/Graph.h"

namespace autotune {

/** Constants with at most this many elements print their values inline. */
constexpr int64_t kInlineConstantElements = 8;

std::string print_text(const Graph &g);
/** The pattern of a fused group: the max of its ops' patterns. */
OpPattern function_pattern(const Graph &body);
std::string print_dot(const Graph &g);
std::string print_json(const Graph &g);

}  // namespace autotune
