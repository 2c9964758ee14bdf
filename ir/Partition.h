#pragma once
// Fusion partitions beyond FuseOps's, as rewrites of a fused graph (one `fn` node per kernel).
// A fused graph is a partition: each function is one kernel. A move turns one partition into
// another, so every partition the search tries is a graph the reference executor runs and the
// runtime compiles, and FuseOps's partition is the one the moves start from.
//
// The move built so far is the prologue: a group with no anchor (elementwise and broadcast ops
// only) is recomputed inside each group that reads it, at that group's input reads, instead of
// being stored once and read back (e.g. squeeze-excitation's `x * scale`, read by the next 1x1
// conv). FuseOps never does this: it fuses elementwise ops only into what follows when the
// consumer is not an anchor.
#include <string>
#include <vector>

#include "ir/Graph.h"

namespace autotune {

struct PrologueMove {
  int producer = -1;            // the fn node recomputed in its consumers
  std::vector<int> consumers;   // the fn nodes that absorb it (every node reading it)
  std::string why_not;          // "" when the move is legal; otherwise the reason
};

/**
 * Every function node of `fused` whose body is elementwise or broadcast ops only, with whether
 * it can be recomputed in its consumers: it must not be a graph output, every consumer must be a
 * function with one anchor (conv, dense, pool, reduction) reading it, and it may be duplicated
 * into at most `max_copies` consumers (its recomputation bound).
 */
std::vector<PrologueMove> prologue_moves(const Graph &fused, int max_copies = 2);

/**
 * `fused` with function node `producer`'s body recomputed inside every consumer: each consumer's
 * body starts with a copy of the producer's body, reading the producer's arguments, and the
 * producer's node goes away. Fails (naming the node) when the move is not legal.
 */
Expected<Graph> apply_prologue(const Graph &fused, int producer, int max_copies = 2);

/** A move as reports name it: "prologue:%12" (a node index of FuseOps's partition). */
std::string move_name(const PrologueMove &m);

/**
 * A saved partition: the producers (node indices of FuseOps's partition `fused`) whose prologue
 * moves it applies, as the JSON the tuning database keeps ({"prologues": [5, 12]}).
 */
std::string partition_json(const std::vector<int> &producers);

/**
 * `fused` with the prologue moves of a saved partition applied, from the last producer to the
 * first (so each index still names its node). Fails naming the move that is not legal here.
 */
Expected<Graph> apply_partition(const Graph &fused, const std::string &json);

}  // namespace autotune
