#pragma once
// Lowering: a fused group (a function body from fuse-ops) and its schedule become a
// LoweredKernel. Every op but the group's anchor is inlined as an expression at the point of
// use (TVM's compute_inline): elementwise/broadcast/injective prologues into the anchor's reads,
// the epilogue into the anchor's final store while its accumulators are still in registers.
// The group is its naive loop nests (lower_naive) transformed by the schedule's steps; a schedule
// of knobs stands for a step list (steps_of_knobs). No anchor has a hand-written template left.
#include <optional>
#include <string>

#include "codegen/Kernel.h"
#include "codegen/Schedule.h"
#include "codegen/Steps.h"
#include "ir/Graph.h"

namespace autotune {

/** A readable symbol prefix for a group's kernel ("conv2d_add_relu"); the JIT appends the IR's hash. */
std::string kernel_name(const Graph &body);

/**
 * Lowers a function body; `name` becomes the kernel's symbol prefix. An illegal schedule is an
 * error. A schedule with steps is the group's naive nests (lower_naive) with the steps replayed;
 * without, the steps its knobs stand for (steps_of_knobs). With `cache`, the steps' prefixes
 * replayed before for the same naive nests are taken from it (a search lowering many points).
 */
Expected<LoweredKernel> lower_group(const Graph &body, const std::string &name, const KernelSchedule &s, ReplayCache *cache = nullptr);

/**
 * A group with several anchors (a partition move put a producer anchor's group in front of its
 * consumer's, ir/Partition) is a chain of segments, each one anchor with its prologue and
 * epilogue: segment j + 1's anchor reads segment j's result (its `cut`) as its data input, and
 * only it does. A segment's body reads the group's arguments it needs and, after the first, the
 * previous segment's result as its last input.
 */
struct Segment {
  Graph body;
  std::vector<int> args;  // per input of `body`: the group's argument index, or -1 for the previous segment's result
};
/**
 * A group without an anchor that changes layout (nn.to_nchwc or nn.from_nchwc, with elementwise
 * ops around it): its argument read in the other layout than the output's (`input`, an index of
 * the group's inputs) and the channel block. The argument is a full activation (NCHW with more than
 * one pixel, or NCHWc), not a per-channel value.
 */
struct LayoutChange {
  int input = -1;
  int64_t block = 0;
};
std::optional<LayoutChange> layout_change(const Graph &body);
/** Whether `body` holds more than one anchor: a chain, or (where split_segments refuses it) no kernel at all. */
bool is_chain(const Graph &body);
/** The segments of `body` (one for a group with at most one anchor), or why it is no chain. */
Expected<std::vector<Segment>> split_segments(const Graph &body);

/**
 * The group's initial loop nests, before any schedule step (issue 10): for an elementwise group
 * a loop per output dimension (i0, i1, ...) around the output's store; for a reduction (conv,
 * dense, pools, global pools, mean, matmul) the same loops around a local accumulator: acc =
 * init, a loop per reduction dimension (k0, k1, ...) around the update, and the epilogue's store;
 * a padded conv reads a `pad` stage (loops pn, pc, py, px), a producer nest steps can move;
 * softmax a loop per dimension but the axis around its three passes over the axis. Of `s`, only
 * the Winograd tile and pixel_vectors are read (its steps and other knobs are not).
 */
Expected<LoweredKernel> lower_naive(const Graph &body, const std::string &name, const KernelSchedule &s);

/**
 * The Winograd sketch's step list for a Winograd schedule's knobs: oc_block channels x px_block
 * tiles (at most the tiles there are) in registers, vectors of vector_width (NCHW: the channels
 * as the vector), the padded input at root (pad_at_root) or recomputed at its reads. lower_group
 * lowers a Winograd schedule without steps this way, in NCHW and conv2d_nchwc.
 */
Expected<std::vector<Step>> winograd_steps_of_knobs(const Graph &body, const KernelSchedule &s);

/**
 * The step list a knob schedule stands for: the knobs are a thin layer on the sketches. An
 * elementwise group, a pool, a global pool, a mean, a matmul or a softmax is its loop sketch at the schedule's vector width (default_schedule's rules: a pool's
 * columns cut at its padding, a global pool's plane summed as vectors of partials); a dense
 * layer with a packed weight is the register-tile sketch with oc_block columns; a conv without
 * channel blocks (oc_block 0: depthwise, narrow groups) the loop sketch's row tile of px_block
 * rows with its padded input at root (pad_at_root) or per channel plane; a conv with channel
 * blocks its register tile of oc_block channels x px_block pixels of the flattened output (the
 * tile sketch's flat pixels: the blocked template's kernel), in conv2d_nchwc with its padding in
 * the tiles (and an NCHW stem's) the row tiles, with pixel_vectors the pixel lanes; Winograd
 * knobs are winograd_steps_of_knobs. An empty list is the naive nest as it is (a nest no sketch fits).
 */
Expected<std::vector<Step>> steps_of_knobs(const Graph &body, const KernelSchedule &s);

/** Packs a weight for a kernel (WeightPacking), once, when the model is loaded. */
Tensor pack_weight(const Tensor &w, const WeightPacking &p);

}  // namespace autotune
