#pragma once
// Fusion partitions chosen by measurement (issue 11): each legal move from FuseOps's partition
// (ir/Partition) is measured as the kernels it replaces against the kernels it makes, each with
// its default schedule, and the moves that win by a margin make the partition saved for the
// model, once checked in the model: a move whose groups are slower there than the groups it
// replaces is left out, and a partition not faster end to end than FuseOps's is not kept.
#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "codegen/Target.h"
#include "search/Measurer.h"

namespace autotune {

struct PartitionSearchOptions {
  std::string db_path;                  // where the chosen partition is saved ("" : not saved)
  MeasureOptions measure;
  std::string cache_dir;
  Target target = host_target();
  double min_gain = 0.03;               // a move is taken when its kernels are this much faster than those it replaces
  int max_copies = 2;                   // a prologue's recomputation bound: consumers it is copied into
  int rounds = 3;                       // each move's kernels timed this often, apart then merged; the median ratio decides
  bool chains = false;                  // measure every chain move, also those no chain tile fits (their segments run one after another)
  int model_rounds = 10;                // the check in the model: FuseOps's and the searched partition run alternately this often a timing (0: no check)
  int model_timings = 8;                // and timed so this often, two compiled pairs in turn, the order swapped every two (Alternated); the medians decide
  const std::atomic<bool> *stop = nullptr;
  std::function<void(const std::string &)> progress;
};

struct MoveReport {
  std::string move;          // "prologue:%12"
  int producer = -1;
  std::string ops;           // the groups it touches, "multiply -> nn.conv2d+add"
  std::string kind;          // "prologue" or "chain"
  double apart_s = 0;        // the producer's and consumers' kernels, summed
  double merged_s = 0;       // the consumers' kernels with the producer recomputed in them, summed
  double ratio = 0;          // merged over apart: the median of the rounds' ratios
  double bytes_saved = 0;    // the producer's output, no longer written and read back
  // The cost model's estimates (costmodel/Features of the default kernels): bytes touched (each
  // buffer's touched bytes once) and float operations, the kernels apart and merged.
  double bytes_apart = 0, bytes_merged = 0, flops_apart = 0, flops_merged = 0;
  // The largest thread hand-off (ThreadPool::handoff_ns) around its rounds' timings: where the
  // cores were. With the cores apart (each vCPU on its own core complex) a fused kernel gains more
  // than near (MobileNetV2's chains, Zen 5: 1.08-1.15 end to end against 1.02 near).
  double handoff_ns = 0;
  // Producer kernels run before the timed runs of one round's kernels apart and merged (the groups
  // that write each kernel's inputs in its graph: MeasureOptions::producers); 0 when timed alone.
  int producers_apart = 0, producers_merged = 0;
  // In the model (the check after the search, for a move taken): the medians of the groups it
  // replaces in FuseOps's model and of those it makes in the searched one; 0 where not checked.
  double model_apart_ms = 0, model_merged_ms = 0;
  bool measured = false;     // apart_s and merged_s were measured
  bool chosen = false;
  std::string why_not;       // illegal, failed to compile or measure, or left out for a better move; "" otherwise
  std::string same_as;       // a move before it with the same kernels apart and merged, whose measurement it takes
};

struct PartitionReport {
  std::string target;
  std::string model_hash;    // FuseOps's partition's, which the database keys the choice by
  std::vector<MoveReport> moves;
  std::vector<int> chosen;   // producers of the moves taken (each legal after the ones before)
  // The check in the model, where a move was taken: both partitions compiled with their default
  // schedules and run alternately (`model_rounds` times each, `model_timings` timings with the
  // order swapped), end-to-end medians of the last check (after any move slower in the model was
  // left out), the median of its timings' ratios searched / FuseOps's, and its largest hand-off.
  bool checked = false;
  double fuseops_ms = 0, searched_ms = 0, check_ratio = 0, check_handoff_ns = 0;
  std::string json() const;  // the report saved beside the partition
};

/** Measures every prologue move of `fused` (FuseOps's partition) and saves the winners' partition. */
Expected<PartitionReport> search_partition(const Graph &fused, const PartitionSearchOptions &o);

/**
 * The moves `blocked` (indices into `moves`, best first: measured faster, left out for a move
 * taken before them) added to the partition `keep` (producers) where `legal` accepts it with
 * each, in order; each one taken is marked chosen again. The check in the model does this once
 * its first timing has left moves out.
 */
void take_blocked(std::vector<int> &keep, const std::vector<size_t> &blocked, std::vector<MoveReport> &moves,
                  const std::function<Status(const std::vector<int> &)> &legal);

}  // namespace autotune
