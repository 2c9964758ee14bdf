#pragma once
// Fusion partitions chosen by measurement (issue 11): each legal move from FuseOps's partition
// (ir/Partition) is measured as the kernels it replaces against the kernels it makes, each with
// its default schedule (checked against the reference there), and then judged in the model: the
// moves measured, in sets legal together, run in the model against FuseOps's partition, and
// those whose groups there beat the groups they replace make the partition saved for the model,
// the largest gain first; a partition not faster end to end than FuseOps's is not kept. Without
// the check in the model (model_rounds 0) the moves that win alone by a margin are taken.
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
  double min_gain = 0.03;               // without the check in the model, a move is taken when its kernels are this much faster than those it replaces
  double alone_limit = 1.5;             // with it, every move measured alone below this ratio is judged in the model, which decides
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
  // In the model (the check after the search, for a move judged there): the medians of the groups
  // it replaces in FuseOps's model and of those it makes in the searched one; 0 where not judged.
  double model_apart_ms = 0, model_merged_ms = 0;
  // And the median over the timings of each timing's merged / apart (both partitions ran in it,
  // alternately): what decides, a load that moves whole timings moving both sides of each ratio.
  double model_ratio = 0;
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
 * The moves `judged` in the model (producers; their reports in `moves` hold model_apart_ms and
 * model_ratio) that gain there (model_ratio below 1), the largest gain first ((1 - model_ratio) x
 * model_apart_ms), each taken where `legal` accepts the
 * partition with it and those before; each taken is marked chosen, each other one left out with
 * its reason (slower in the model, or a move that gains more joins its groups). Returns the
 * producers taken.
 */
std::vector<int> take_by_model_gain(const std::vector<int> &judged, std::vector<MoveReport> &moves,
                                    const std::function<Status(const std::vector<int> &)> &legal);

}  // namespace autotune
