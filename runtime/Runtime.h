#pragma once
// The runtime's C++ API, in one header: load an ONNX model (or a fused graph), compile each fused
// group into a kernel, plan memory, and run on a thread pool.
//
//   auto model = autotune::CompiledModel::load("resnet50.onnx", {});
//   if (!model) { ... model.error().message ... }
//   auto outputs = (*model)->run({input_tensor});
//
// A group that cannot be lowered or compiled runs on the reference executor instead; groups()
// says which and why.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "codegen/Jit.h"
#include "codegen/Lower.h"
#include "db/TuningDb.h"
#include "ir/Graph.h"
#include "ir/Pass.h"
#include "runtime/ThreadPool.h"

namespace autotune {

struct CompileOptions {
  int threads = 0;                                   // 0: one per hardware thread
  std::string cache_dir = default_kernel_cache_dir();  // "" disables the on-disk kernel cache
  PassContext passes;                                // for load(): how the graph is optimized and fused
  std::string db_path;                               // a tuning database: the model's saved plan, or
                                                     // without one each group's best record (the default where none)
  Target target = host_target();                     // what the kernels are compiled and scheduled for
  bool fuseops_partition = false;                    // ignore the partition the database saved for the model: FuseOps's groups
  // A plan given instead of the one db_path holds (per group of the model as the database's
  // partition leaves it: its record, nullopt for the default); the in-model check times variants
  // of the saved plan this way without writing them (search/PlanCheck). Without db_path, an error.
  std::optional<std::vector<std::optional<TuningRecord>>> plan;
  bool split_rows = true;                            // default schedules split rows over the threads where the model's
                                                     // cut says (codegen/ThreadRows); false: as each group's default alone
};

struct GroupInfo {
  std::string name;      // "%12"
  std::string ops;       // "nn.conv2d+add+nn.relu"
  std::string shape;     // of its output
  std::string schedule;  // the schedule used, or "reference executor"
  std::string fallback;  // why it runs on the reference executor ("" when compiled)
  bool tuned = false;    // compiled with a schedule from the tuning database
  std::string untuned_reason;  // with a database: why the default schedule was used
  double flops = 0;      // arithmetic of one call (multiply-adds count 2)
  size_t temp_bytes = 0; // its kernel's temporaries (padded copies, Winograd's transformed tensors), in the arena
  bool split_rows = false;  // its threads split its output rows, not its channels (codegen/ThreadRows)
};

class CompiledModel {
 public:
  /** Imports, optimizes, fuses and compiles an ONNX model. */
  static Expected<std::unique_ptr<CompiledModel>> load(const std::string &onnx_path, CompileOptions options = {});
  /** Compiles a graph (fused here if it is not yet). */
  static Expected<std::unique_ptr<CompiledModel>> compile(const Graph &g, CompileOptions options = {});
  ~CompiledModel();

  /** Runs the model; inputs must match the graph's input types. group_ms, if given, gets each group's time. */
  Expected<std::vector<Tensor>> run(const std::vector<Tensor> &inputs, std::vector<double> *group_ms = nullptr);

  const Graph &graph() const { return graph_; }
  const std::vector<GroupInfo> &groups() const { return info_; }
  int threads() const { return pool_->size(); }
  double compile_ms() const { return compile_ms_; }
  int kernels_compiled() const { return kernels_compiled_; }
  /** Which partition the model runs: FuseOps's, or the searched one the database saved (and its moves). */
  const std::string &partition() const { return partition_; }
  int kernels_cached() const { return kernels_cached_; }
  size_t arena_bytes() const { return arena_bytes_; }
  /** Groups compiled with a tuned schedule (0 without a database). */
  int tuned_groups() const;
  /** The JIT the model's kernels were compiled with (its target; more kernels for it, such as the peak's). */
  Jit &jit() { return *jit_; }

 private:
  CompiledModel() = default;
  struct Impl;
  Graph graph_;
  std::vector<GroupInfo> info_;
  std::shared_ptr<ThreadPool> pool_;
  std::unique_ptr<Jit> jit_;
  std::unique_ptr<Impl> impl_;
  double compile_ms_ = 0;
  std::string partition_ = "FuseOps's";
  int kernels_compiled_ = 0, kernels_cached_ = 0;
  size_t arena_bytes_ = 0;
};

class TuningDb;
/**
 * The partition a tuning database saved for FuseOps's partition `fused` on a target key, applied
 * (ir/Partition), or nullopt when none is saved; `note` says which partition runs. An error when
 * the saved moves do not apply.
 */
Expected<std::optional<Graph>> apply_saved_partition(const Graph &fused, TuningDb &db, const std::string &target, std::string *note);

/** Offsets for buffers with [first, last] lifetimes (node indices) so that live buffers never overlap; 64-byte aligned. */
struct MemoryPlan {
  std::vector<size_t> offsets;
  size_t total = 0;
};
MemoryPlan plan_memory(const std::vector<size_t> &bytes, const std::vector<std::pair<int, int>> &lifetimes);
/** For each node of `g`, the index of the last node that reads its value (itself when none does): the end of its lifetime. */
std::vector<int> last_uses(const Graph &g);

/** A fused group's ops joined by '+' ("nn.conv2d+add+nn.relu"), as reports name groups. */
std::string group_ops(const Graph &body);

/** The arithmetic of one call of a fused group: 2 per multiply-add of conv/dense/matmul, 1 per element otherwise. */
double group_flops(const Graph &body);

}  // namespace autotune
