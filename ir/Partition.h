#pragma once
// Fusion partitions beyond FuseOps's, as rewrites of a fused graph (one `fn` node per kernel).
// A fused graph is a partition: each function is one kernel. A move turns one partition into
// another, so every partition the search tries is a graph the reference executor runs and the
// runtime compiles, and FuseOps's partition is the one the moves start from.
//
// A move merges a producer group into the groups that read it. Two kinds:
// - prologue: a group with no anchor (elementwise, broadcast and injective ops only) is
//   recomputed inside each group that reads it, at that group's input reads, instead of being
//   stored once and read back (e.g. squeeze-excitation's `x * scale`, read by the next 1x1 conv,
//   also where the scale changes layout first, or a layout change read by a conv). FuseOps never
//   does this: it fuses elementwise ops only into what follows when that is not an anchor.
// - chain: a group with one anchor joins the one group that reads it, whose anchor reads it as
//   its data input; the kernel runs the two anchors one after another (codegen's segments), so
//   the producer's result is a temporary of one kernel instead of a tensor between two (e.g. a
//   depthwise conv and the 1x1 conv after it, or squeeze-excitation's pool and its two convs).
#include <string>
#include <vector>

#include "ir/Graph.h"

namespace autotune {

struct PartitionMove {
  enum Kind { kPrologue, kChain } kind = kPrologue;
  int producer = -1;            // the fn node merged into its consumers
  std::vector<int> consumers;   // the fn nodes that absorb it (every node reading it)
  std::string why_not;          // "" when the move is legal; otherwise the reason
};

/**
 * The moves from `fused`, one per producer group, with whether each is legal. Never legal for a
 * graph output or a group read as a weight (input 1 or later of an anchor). A prologue may be
 * copied into at most `max_copies` consumers (its recomputation bound), each with one anchor; a
 * chain has one consumer and merges two groups of one anchor each (a chain is not extended).
 */
std::vector<PartitionMove> partition_moves(const Graph &fused, int max_copies = 2);

/**
 * `fused` with the move of producer node `producer` applied: each consumer's body starts with a
 * copy of the producer's body, reading the producer's arguments, and the producer's node goes
 * away. Fails (naming the node) when the move is not legal.
 */
Expected<Graph> apply_move(const Graph &fused, int producer, int max_copies = 2);

/** A move as reports name it: "prologue:%12" or "chain:%7" (a node index of FuseOps's partition). */
std::string move_name(const PartitionMove &m);

/** A saved partition: the producers (node indices of FuseOps's partition) whose moves it applies, as JSON ({"moves": [5, 12]}). */
std::string partition_json(const std::vector<int> &producers);

/**
 * `fused` with the moves of a saved partition applied, from the last producer to the first (so
 * each index still names its node). Fails naming the move that is not legal here.
 */
Expected<Graph> apply_partition(const Graph &fused, const std::string &json);

}  // namespace autotune
