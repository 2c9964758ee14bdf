#pragma once
// Which fused groups of a model split their output rows over the threads and which their
// channels, chosen for the whole model at once. The thread pool hands each thread one contiguous
// run of a kernel's parallel loop; when a kernel reads what another thread wrote, the data comes
// from that thread's core, over the fabric when the cores are on two core complexes (a 2-vCPU VM
// whose host moves its vCPUs apart: MobileNetV2 ran twice as slow, docs/architecture.md, "Where
// the cores are"). Splitting every kernel by rows keeps each thread's rows on its core from
// kernel to kernel; but a squeeze-excitation's pool reads whole channel planes, a Winograd conv
// keeps its channel split, and a conv that splits rows reads every weight on every thread.
#include <cstdint>
#include <vector>

#include "ir/Graph.h"

namespace autotune {

/**
 * The bytes the labels `rows` (one per node of the fused graph `model`: true splits rows, false
 * channels) make a thread read that another thread wrote, or read in full: for two threads,
 *  - a group reading a value another group produced: half its bytes when the two split
 *    differently; for a conv of one group, which reads every channel of a pixel, also when both
 *    split channels (each thread reads every channel, half of them written by the other);
 *  - a group that splits rows: half its convs' weights (each thread reads all of them).
 * A value read by several groups counts once per reader. With more threads every term grows by
 * the same factor, so the labels it ranks first are the same.
 */
int64_t thread_split_cost(const Graph &model, const std::vector<bool> &rows);

/**
 * For each node of `model` (every node a fused group), whether its default schedule splits its
 * output rows over `threads` threads (default_schedule's row_parts): the labels of least
 * thread_split_cost, where a group splits rows only if can_split_rows holds for it, and a group
 * whose default already splits rows (`rows_already`: a 1x1 conv with more input than output
 * channels splits its pixel blocks) keeps doing so, and a group `fixed` marks keeps channels (a
 * tuned schedule whose list cannot take rows: with_rows_split). The cost is a sum of terms of one or two
 * groups' labels, each submodular, so a minimum s-t cut gives its exact minimum (Kolmogorov and
 * Zabih 2004); a tie keeps channels. `rows_already` itself with one thread.
 */
std::vector<bool> rows_by_thread(const Graph &model, int threads, const std::vector<bool> &rows_already,
                                 const std::vector<bool> &fixed = {});

}  // namespace autotune
