#pragma once
// The keys of the tuning database. A workload is a fused group identified by a stable structural
// hash of its printed IR (ops, attributes, shapes and dtypes; no weight values), the same on every
// run and machine. The target key (codegen/Target: Target::key) names what a measurement is valid
// for: the CPU, its features and the thread count (TVM's database keys by workload only, a known
// complaint; this does not).
#include <string>

#include "ir/Graph.h"

namespace autotune {

/** 16 hex digits: FNV-1a of the printed function body. */
std::string workload_hash(const Graph &body);

/** A stable hash of a whole fused model, for its plan. */
std::string model_hash(const Graph &fused);

}  // namespace autotune
