#pragma once
// What a fusion partition could gain at most, estimated by measurement. A partition moves no FLOP out
// of a model (recomputation only adds); what it can save is the traffic of the values between
// groups (each written once and read by each consumer), the thread hand-off of every group it
// merges away, and the dispatch between kernels. `traffic_bound` prices the values between a
// fused graph's groups at the host's streaming rates for their sizes (`measure_stream_rates`: the
// model's threads writing and reading buffers of 64 KiB to 32 MiB with the target's vectors, so a
// value that fits the caches is priced at their speed), takes all of it and every hand-off and
// the dispatch as saved, and gives the model's time with none of it. It is an estimate at
// streaming speed, not a proof: a kernel that moves a value slower than streaming (a layout change
// reading across channel planes: 1.5-3x its price) pays more, and a partition removing it saves
// more. A value that one consumer reduces whole (a global pool) while another consumer
// waits on that reduction (squeeze-excitation's multiply) must be stored whole in any partition
// that does not compute it twice, so it is priced as written once and read once, not saved.
// docs/architecture.md, "What any partition can gain here".
#include <cstddef>
#include <vector>

#include "codegen/Jit.h"
#include "ir/Graph.h"
#include "runtime/ThreadPool.h"

namespace autotune {

/** Streaming rates by buffer size: GB/s for the whole pool writing and reading its shares. */
struct StreamRates {
  std::vector<size_t> bytes;  // ascending
  std::vector<double> write_gbs, read_gbs;
  /** Milliseconds to write (read) `b` bytes, the rate interpolated on log(size), clamped at the ends. */
  double write_ms(size_t b) const;
  double read_ms(size_t b) const;
};

/**
 * Times the pool writing and then reading buffers of 64 KiB to 32 MiB (doubling), each thread its
 * contiguous share in blocks of 16 KiB, with kernels JIT-compiled for the JIT's target (its
 * vector width; the reads on four accumulators), a thread's time from its own start (the
 * hand-off is priced apart). Four buffers of a size take turns, as an arena's values do; each
 * rate is the median of `reps` rounds over every size.
 */
Expected<StreamRates> measure_stream_rates(Jit &jit, ThreadPool &pool, int reps = 31);

struct TrafficBound {
  struct Value {
    int group = -1;      // the node that writes it
    size_t bytes = 0;
    int readers = 0;
    double ms = 0;       // written once, read by each reader
    bool kept = false;   // stays stored (see above)
  };
  std::vector<Value> values;  // the values between groups, costliest first
  int groups = 0;
  double written_mb = 0, read_mb = 0;  // values between groups (graph outputs excluded)
  double traffic_ms = 0;               // their cost at the stream rates
  double kept_ms = 0;                  // of it, values that stay stored (written and read once)
  int kept_values = 0;
  double handoff_ms = 0;               // (groups - 1) hand-offs
  double dispatch_ms = 0;              // end to end less the groups' sum (0 when negative)
  double e2e_ms = 0, floor_ms = 0;     // the model's time, and with everything above saved
  StreamRates rates;                   // what it was priced at
  double bound = 1;                    // e2e_ms / floor_ms: the most any partition gains (0: the
                                       // traffic alone prices at the whole time, no bound)
};

/**
 * The bound for fused graph `fused` (every node a group), whose groups took `group_ms` (node by
 * node) in a run of `e2e_ms`, with a thread hand-off of `handoff_ns`.
 */
TrafficBound traffic_bound(const Graph &fused, const std::vector<double> &group_ms, double e2e_ms, double handoff_ns,
                           const StreamRates &rates);

}  // namespace autotune
