#pragma once
// A schedule as a list of loop transformations (issue 10): each step names the stage it changes
// and the loops it takes, and replaying the list on a kernel's initial loop nests gives the
// scheduled kernel. The list is saved as versioned JSON:
//   {"version": 1, "steps": [{"op": "split", "stage": "conv", "loop": "ox", "factor": 8,
//                             "outer": "xo", "inner": "xi"}, ...]}
// The ops and their fields (every field named is required):
//   split          stage, loop, factor, outer, inner
//   reorder        stage, order (loop names, outermost first)
//   fuse           stage, loop (the outer), inner, fused
//   unroll, vectorize, parallel   stage, loop
//   compute_at     stage (the consumer), producer, loop
//   compute_inline stage (the consumer), producer
//   cache_write    stage, buffer, loop
//   cache_read     stage, buffer, loop (a local copy of the box the loop reads)
//   rfactor        stage, loop (the reduction loop), inner (the loop whose iterations get partials)
//   distribute     stage, loop
//   trim           stage, loop (bounded to the iterations where its guarded updates do something)
//   fission        stage, loop (the stage's whole body: distributed, each copy a stage `stage`_j of its own)
//   partition      stage, loop (split where the conditions in its body change: borders from the inside)
//   prefetch       stage, buffer, loop, factor (how many elements ahead)
//   pack           stage, buffer, dims, factor (the block; the packing is the kernel's, stage names where it is read)
// A step that cannot apply is refused with its number, what it is and the reason; nothing is
// partly applied.
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "codegen/Kernel.h"
#include "ir/Error.h"

namespace autotune {

struct Step {
  std::string op, stage;
  std::string loop;                // the loop it applies at (fuse: the outer loop)
  int64_t factor = 0;              // split
  std::vector<std::string> names;  // split: {outer, inner[, tail suffix (default _tail)]}; fuse: {inner, fused}; reorder: the order; rfactor: {inner}
  std::string producer;            // compute_at, compute_inline
  std::string buffer;              // cache_write, cache_read, pack, prefetch
  std::vector<int64_t> dims;       // pack: the argument's shape
  bool operator==(const Step &o) const = default;
};

/** Versioned JSON of a step list. */
std::string steps_to_json(const std::vector<Step> &steps);
/** The step list of `steps_to_json`'s text, or an error naming the step and field that is wrong. */
Expected<std::vector<Step>> steps_from_json(const std::string &text);

/** One line: "split loop ox of stage conv by 8 into xo, xi". */
std::string to_string(const Step &s);

/** `k` with one step applied. */
Expected<LoweredKernel> apply_step(const LoweredKernel &k, const Step &s);
/** `k` with every step applied in order; an error says which step failed ("step 3, <step>: <reason>"). */
Expected<LoweredKernel> replay(const LoweredKernel &k, const std::vector<Step> &steps);

/**
 * replay with the kernels that step lists' prefixes made kept at stage boundaries (where the next
 * step is another stage's), so that lists sharing a prefix replay it once: a task's points
 * share the steps of the stages they do not vary (a Winograd kernel's transforms), which were 55%
 * of a measured point's lowering time (2000-trial ResNet-18 records). Keyed exactly: the starting
 * kernel's name, identity and index checks, and every field of every step of the prefix. At most
 * `max_entries` kernels are kept (all dropped when full). Thread-safe; the replays run unlocked.
 */
class ReplayCache {
 public:
  explicit ReplayCache(size_t max_entries = 512) : max_(max_entries) {}
  Expected<LoweredKernel> replay(const LoweredKernel &k, const std::vector<Step> &steps);
  /**
   * The kernel `make` returns, kept under `key` the first time (an error is returned, not kept):
   * a search's points of one task start from the same naive nests (lower_group keys them by the
   * group's text and the knobs the naive nests read), 17% of a point's lowering when made anew.
   */
  Expected<LoweredKernel> made(const std::string &key, const std::function<Expected<LoweredKernel>()> &make);
  /** How many replays started from a kept prefix. */
  size_t hits() const {
    std::lock_guard<std::mutex> lock(mu_);
    return hits_;
  }

 private:
  /** Keeps `k` under `key` in `kept` (one of the two maps below), all of it dropped first when full. */
  void keep(std::unordered_map<std::string, LoweredKernel> &kept, const std::string &key, const LoweredKernel &k);

  mutable std::mutex mu_;
  std::unordered_map<std::string, LoweredKernel> kernels_;
  std::unordered_map<std::string, LoweredKernel> made_;
  size_t max_;
  size_t hits_ = 0;
};

}  // namespace autotune
