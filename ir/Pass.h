#pragma once
// Pass infrastructure, after TVM's: a pass is a pure Graph -> Graph function with a name, an opt
// level and the passes it requires. A PassContext decides which passes run (a pass runs when it
// is not disabled and either is required or opt_level >= its opt level) and carries instruments
// that watch each pass: print the IR, time it, verify it by execution.
#include <chrono>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "ir/Graph.h"

namespace autotune {

struct Pass {
  std::string name;
  int opt_level;
  std::function<Expected<Graph>(const Graph &)> run;
  std::vector<std::string> required;  // run before this pass, whenever it runs
};

class PassInstrument {
 public:
  virtual ~PassInstrument() = default;
  virtual Status before_pass(const Pass &, const Graph &) { return Status::ok(); }
  /** An error here stops the pipeline (verification). */
  virtual Status after_pass(const Pass &, const Graph & /*before*/, const Graph & /*after*/) { return Status::ok(); }
};

struct PassContext {
  int opt_level = 3;
  std::set<std::string> required;
  std::set<std::string> disabled;
  std::vector<std::shared_ptr<PassInstrument>> instruments;

  /** Disabled beats required beats opt level. */
  bool enabled(const Pass &p) const;
};

/** Every registered pass. */
const std::vector<Pass> &all_passes();
const Pass *find_pass(const std::string &name);

/** Runs the named passes in order under ctx; each enabled pass runs after the passes it requires. */
Expected<Graph> run_passes(const Graph &g, const std::vector<std::string> &names, const PassContext &ctx);

/** How far `autotune inspect/run` lower a model. */
enum class Stage { kImported, kOptimized, kFused };
Expected<Stage> parse_stage(const std::string &s);
/** The pass names of a stage's pipeline. */
std::vector<std::string> stage_pipeline(Stage s);
/** Runs a stage's pipeline. At the fused stage with fuse-ops disabled, each op becomes its own function (no fusion). */
Expected<Graph> lower_to_stage(const Graph &g, Stage s, const PassContext &ctx);

/** Prints the IR after each pass (to a FILE*, normally stderr). */
class PrintIRInstrument : public PassInstrument {
 public:
  explicit PrintIRInstrument(std::FILE *out) : out_(out) {}
  Status after_pass(const Pass &p, const Graph &before, const Graph &after) override;

 private:
  std::FILE *out_;
};

/** Times each pass; report() lists them. */
class TimingInstrument : public PassInstrument {
 public:
  Status before_pass(const Pass &, const Graph &) override;
  Status after_pass(const Pass &p, const Graph &before, const Graph &after) override;
  std::string report() const;

 private:
  std::chrono::steady_clock::time_point start_;
  std::vector<std::pair<std::string, double>> times_;  // pass, milliseconds
};

/**
 * Verifies each pass by execution: the graph before and after it run on the same seeded random
 * inputs through the reference executor, and the outputs must agree within `tolerance` relative to
 * each output's largest magnitude. A pass that changes results fails with its name and the first
 * differing output.
 */
class VerifyInstrument : public PassInstrument {
 public:
  explicit VerifyInstrument(uint64_t seed = 0, double tolerance = 1e-5, std::FILE *log = nullptr)
      : seed_(seed), tolerance_(tolerance), log_(log) {}
  Status before_pass(const Pass &p, const Graph &before) override;
  Status after_pass(const Pass &p, const Graph &before, const Graph &after) override;

 private:
  uint64_t seed_;
  double tolerance_;
  std::FILE *log_;
  std::vector<Tensor> last_;  // outputs of the graph the next pass starts from
};

}  // namespace autotune
