#include "search/ModelSearch.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>

#include "costmodel/Features.h"
#include "runtime/ThreadPool.h"

namespace autotune {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

ModelSearch::ModelSearch(const Target &target, ModelSearchOptions o, uint64_t seed) : target_(target), o_(o), seed_(seed) {}

void ModelSearch::add_samples(std::vector<Sample> samples) {
  for (Sample &s : samples) samples_.push_back(std::move(s));
}

std::string ModelSearch::feature_key(const Task &task, const KernelSchedule &s) { return task.hash + schedule_to_json(s); }

std::vector<float> ModelSearch::lowered_features(const Task &task, const KernelSchedule &s) const {
  auto k = lower_group(task.body, "k", s);
  return k ? kernel_features(*k, target_) : std::vector<float>{};
}

const std::vector<float> &ModelSearch::features(const Task &task, const KernelSchedule &s) {
  std::string key = feature_key(task, s);
  auto it = feature_cache_.find(key);
  if (it != feature_cache_.end()) return it->second;
  return feature_cache_.emplace(key, lowered_features(task, s)).first->second;
}

void ModelSearch::compute_features(const Task &task, const std::vector<KernelSchedule> &points) {
  // The search runs between batches, when the measurer leaves the cores idle: the points not yet
  // cached are lowered on every thread.
  std::vector<std::string> keys;
  std::vector<const KernelSchedule *> todo;
  std::set<std::string> queued;
  for (const KernelSchedule &s : points) {
    std::string key = feature_key(task, s);
    if (feature_cache_.count(key) || !queued.insert(key).second) continue;
    keys.push_back(std::move(key));
    todo.push_back(&s);
  }
  std::vector<std::vector<float>> out(todo.size());
  for_each_index(todo.size(), std::max(1, o_.threads), [&](size_t i) { out[i] = lowered_features(task, *todo[i]); });
  for (size_t i = 0; i < todo.size(); ++i) feature_cache_.emplace(std::move(keys[i]), std::move(out[i]));
}

void ModelSearch::add_result(const Task &task, const KernelSchedule &s, double ratio) {
  if (!(ratio > 0)) return;
  const std::vector<float> &x = features(task, s);
  if (x.empty()) return;
  samples_.push_back({task.hash, schedule_to_json(s), x, static_cast<float>(-std::log2(ratio))});
}

Expected<bool> ModelSearch::maybe_retrain() {
  size_t fresh = samples_.size() - trained_upto_;
  if (static_cast<int64_t>(samples_.size()) < o_.min_samples) return false;
  if (model_ && fresh < std::max<size_t>(16, trained_upto_ / 4)) return false;
  if (model_ && fresh > 0) {
    // The records the current model has not seen are its held-out set.
    std::vector<Sample> unseen(samples_.begin() + static_cast<std::ptrdiff_t>(trained_upto_), samples_.end());
    AT_ASSIGN(rep, evaluate(*model_, unseen));
    if (rep.pairs > 0) heldout_accuracy_ = rep.pairwise_accuracy;
  }
  auto t0 = std::chrono::steady_clock::now();
  CostModelOptions mo;
  mo.threads = o_.threads, mo.seed = seed_;
  AT_ASSIGN(m, train_on(samples_, mo));
  model_ = std::move(m);
  trained_upto_ = samples_.size();
  train_s_ += seconds_since(t0);
  ++trainings_;
  return true;
}

std::vector<KernelSchedule> ModelSearch::propose(const Task &task, const ScheduleSpace &space, const std::set<std::string> &measured,
                                                 const std::vector<KernelSchedule> &elite, int want, Rng &rng) {
  auto legal = [&](const KernelSchedule &s) { return static_cast<bool>(validate_schedule(task.body, s)); };
  std::set<std::string> chosen;
  std::vector<KernelSchedule> out;
  auto take = [&](const KernelSchedule &s) {
    std::string j = schedule_to_json(s);
    if (measured.count(j) || chosen.count(j) || !legal(s)) return false;
    chosen.insert(j);
    out.push_back(s);
    return true;
  };
  int randoms = model_ ? static_cast<int>(std::ceil(o_.epsilon * want)) : want;
  if (model_) {
    auto t0 = std::chrono::steady_clock::now();
    // Population: the seeds, then random points.
    std::map<std::string, std::pair<KernelSchedule, float>> scored;  // every point scored so far
    auto score = [&](std::vector<KernelSchedule> pts) {
      compute_features(task, pts);
      std::vector<std::vector<float>> x;
      std::vector<KernelSchedule> kept;
      for (const KernelSchedule &s : pts) {
        std::string j = schedule_to_json(s);
        if (scored.count(j)) continue;
        // Lowering refuses an illegal schedule (its knobs validated, its steps replayed): no features, not scored.
        const std::vector<float> &f = features(task, s);
        if (f.empty()) continue;
        x.push_back(f), kept.push_back(s);
        scored[j] = {s, 0.0f};
      }
      if (auto p = model_->predict(x))
        for (size_t i = 0; i < kept.size(); ++i) scored[schedule_to_json(kept[i])].second = (*p)[i];
    };
    // Everything scored so far, best prediction first.
    auto ranked_points = [&] {
      std::vector<std::pair<float, KernelSchedule>> ranked;
      for (const auto &[j, sp] : scored) ranked.emplace_back(sp.second, sp.first);
      std::stable_sort(ranked.begin(), ranked.end(), [](const auto &a, const auto &b) { return a.first > b.first; });
      return ranked;
    };
    std::vector<KernelSchedule> pop(elite.begin(), elite.end());
    for (int i = 0; i < o_.population; ++i) pop.push_back(space.sample(rng));  // seeds do not crowd out the random points
    score(pop);
    for (int g = 0; g < o_.generations; ++g) {
      // Survivors: the best-predicted half of everything scored; children by mutation and crossover.
      std::vector<std::pair<float, KernelSchedule>> ranked = ranked_points();
      size_t parents = std::max<size_t>(2, std::min(ranked.size(), static_cast<size_t>(o_.population / 2)));
      if (ranked.empty()) break;
      std::vector<KernelSchedule> children;
      for (int i = 0; i < o_.population; ++i) {
        const KernelSchedule &a = ranked[static_cast<size_t>(rng.uniform(static_cast<int>(std::min(parents, ranked.size()))))].second;
        if (rng.uniform(2)) {
          const KernelSchedule &b = ranked[static_cast<size_t>(rng.uniform(static_cast<int>(std::min(parents, ranked.size()))))].second;
          children.push_back(space.crossover(a, b, rng));
        } else {
          children.push_back(space.mutate(a, rng));
        }
      }
      score(children);
    }
    for (const auto &[p, s] : ranked_points()) {
      if (static_cast<int>(out.size()) >= want - randoms) break;
      take(s);
    }
    predict_s_ += seconds_since(t0);
  }
  for (int attempt = 0; attempt < 200 && static_cast<int>(out.size()) < want; ++attempt) take(space.sample(rng));
  return out;
}

}  // namespace autotune
