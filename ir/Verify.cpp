#include "ir/Verify.h"

#include <cstdio>

#include "ir/Reference.h"

namespace autotune {

Expected<std::vector<Difference>> compare_outputs(const std::vector<Tensor> &before, const std::vector<Tensor> &after) {
  if (before.size() != after.size())
    return make_error("output count changed from " + std::to_string(before.size()) + " to " + std::to_string(after.size()));
  std::vector<Difference> out;
  for (size_t i = 0; i < before.size(); ++i) {
    auto d = compare(after[i], before[i]);
    if (!d) return make_error("output " + std::to_string(i) + ": " + d.error().message);
    out.push_back(*d);
  }
  return out;
}

Status check_within(const std::vector<Difference> &diffs, double tolerance) {
  for (size_t i = 0; i < diffs.size(); ++i) {
    const Difference &d = diffs[i];
    if (d.nan_mismatch || d.relative() > tolerance) {
      char buf[200];
      std::snprintf(buf, sizeof buf, "output %zu differs: %s at element %lld (max abs error %.3g, relative %.3g > %.3g)", i,
                    d.nan_mismatch ? "NaN/Inf mismatch" : "value", static_cast<long long>(d.first_index), d.max_abs,
                    d.relative(), tolerance);
      return make_error(buf);
    }
  }
  return Status::ok();
}

std::string describe(const std::vector<Difference> &diffs) {
  double mse = 0, max_abs = 0, rel = 0;
  for (const Difference &d : diffs) {
    mse = std::max(mse, d.mse);
    max_abs = std::max(max_abs, d.max_abs);
    rel = std::max(rel, d.relative());
  }
  char buf[160];
  std::snprintf(buf, sizeof buf, "mse %.2e, max abs %.2e (relative %.2e)", mse, max_abs, rel);
  return buf;
}

Status verify_equivalent(const Graph &before, const Graph &after, uint64_t seed, double tolerance) {
  std::vector<Tensor> inputs = random_inputs(before, seed);
  AT_ASSIGN(a, run_reference(before, inputs));
  AT_ASSIGN(b, run_reference(after, inputs));
  AT_ASSIGN(diffs, compare_outputs(a, b));
  return check_within(diffs, tolerance);
}

}  // namespace autotune
