#pragma once
// The learned cost model: gradient-boosted trees (XGBoost, through its C API) from a kernel's
// features (costmodel/Features) to its speed relative to its task's default schedule, as
// log2(default time / time): 0 for the default, 1 for twice as fast. The target is normalized
// within each task, so records of different tasks (and models) train one model, and a ranking
// within a task is all the search needs from it.
#include <memory>
#include <string>
#include <vector>

#include "ir/Error.h"

namespace autotune {

struct CostModelOptions {
  int rounds = 120;       // boosting rounds
  int max_depth = 6;
  double eta = 0.2;       // learning rate
  int threads = 1;        // XGBoost's own threads while training (the tuner's cores are measuring)
  // "reg:squarederror" (the speedup itself) or a ranking objective within each task
  // ("rank:pairwise", "rank:ndcg"): then the rows come with their tasks' group sizes.
  std::string objective = "reg:squarederror";
  uint64_t seed = 0;
  // Values per row: 0 for the CPU kernels' model features (costmodel/Features: model_feature_names()); a GPU
  // tuner's model takes costmodel/GpuFeatures' rows (gpu_feature_names()).
  size_t columns = 0;
};

class CostModel {
 public:
  /** Trains on rows `x` (each o.columns long) with targets `y`; an error for no rows or XGBoost's message. */
  static Expected<std::unique_ptr<CostModel>> train(const std::vector<std::vector<float>> &x, const std::vector<float> &y,
                                                    const CostModelOptions &o = {}, const std::vector<unsigned> &groups = {});
  /** A model saved by save(), checked against the feature version it was trained with. */
  static Expected<std::unique_ptr<CostModel>> load(const std::string &bytes);
  ~CostModel();
  CostModel(const CostModel &) = delete;
  CostModel &operator=(const CostModel &) = delete;

  /** Predicted log2 speedups over the task's default, one per row. */
  Expected<std::vector<float>> predict(const std::vector<std::vector<float>> &x) const;
  /** The model as bytes (XGBoost's UBJSON, behind a header naming the feature version); a model of the CPU features only. */
  Expected<std::string> save() const;
  int64_t rows_trained() const { return rows_; }

 private:
  CostModel() = default;
  void *booster_ = nullptr;
  int64_t rows_ = 0;
  size_t columns_ = 0;
};

}  // namespace autotune
