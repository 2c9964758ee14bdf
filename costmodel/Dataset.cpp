#include "costmodel/Dataset.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>

#include "codegen/Lower.h"
#include "codegen/Schedule.h"
#include "costmodel/Features.h"
#include "ir/Parser.h"

#include <nlohmann/json.hpp>

namespace autotune {

std::vector<float> default_features(const Graph &body, const Target &target) {
  auto k = lower_group(body, "default", default_schedule(body, target));
  return k ? kernel_features(*k, target) : std::vector<float>{};
}

Expected<SampleSet> load_samples(TuningDb &db, const std::string &target_key, const Target &target) {
  SampleSet out;
  AT_ASSIGN(workloads, db.workloads());
  for (const WorkloadInfo &w : workloads) {
    if (w.target != target_key || w.ok_records == 0) continue;
    auto body = parse_text(w.ir);
    AT_ASSIGN(records, db.records(w.hash, w.target));
    if (!body) {
      out.skipped += w.ok_records;
      continue;
    }
    std::map<std::string, std::vector<float>> features;  // per schedule: lowered once
    std::optional<std::vector<float>> default_kernel;      // the task's default schedule's kernel features, when needed
    for (const TuningRecord &r : records) {
      if (r.status != "ok" || r.baseline_s <= 0 || r.median_s <= 0) continue;
      auto it = features.find(r.schedule);
      if (it == features.end()) {
        // The features saved with the record when they are of this version; else lowered again.
        std::vector<float> x;
        if (r.feature_version == kFeatureVersion && !r.features.empty()) {
          auto j = nlohmann::json::parse(r.features, nullptr, false);
          if (j.is_array() && j.size() == model_feature_names().size())
            for (const auto &v : j) x.push_back(v.is_number() ? v.get<float>() : 0.0f);
        }
        if (x.empty())
          if (auto s = schedule_from_json(r.schedule))
            if (auto k = lower_group(*body, "k", *s)) {
              if (!default_kernel) default_kernel = default_features(*body, target);
              if (!default_kernel->empty()) x = model_features(kernel_features(*k, target), *default_kernel);
            }
        it = features.emplace(r.schedule, std::move(x)).first;
      }
      if (it->second.empty()) {
        ++out.skipped;
        continue;
      }
      out.samples.push_back({w.hash, r.schedule, it->second, static_cast<float>(std::log2(r.baseline_s / r.median_s)), r.handoff_ns,
                             r.baseline_s});
    }
  }
  return out;
}

namespace {

/**
 * Each sample's group for ranking: its task, and whether its cores were apart (db/TuningDb.h,
 * cores_apart, over these samples' hand-offs). A ratio taken while the host ran the cores apart is
 * not compared with one taken while it ran them near: a default whose stages pass data between
 * threads ran 1.4x slower apart, so every candidate timed against it then looked 1.4x better.
 */
std::vector<std::string> rank_groups(const std::vector<Sample> &samples) {
  std::vector<double> h;
  for (const Sample &s : samples) h.push_back(s.handoff_ns);
  double near = near_handoff_ns(std::move(h));
  std::vector<std::string> g;
  for (const Sample &s : samples) g.push_back(cores_apart(s.handoff_ns, near) ? s.workload + " apart" : s.workload);
  return g;
}

}  // namespace

Expected<std::unique_ptr<CostModel>> train_on(const std::vector<Sample> &train, const CostModelOptions &o) {
  std::vector<std::vector<float>> x;
  std::vector<float> y;
  std::vector<unsigned> groups;
  std::vector<std::string> key = rank_groups(train);
  if (o.objective.rfind("rank:", 0) == 0) {
    // A ranking objective compares rows within a group: one group per task and mode, its rows together.
    std::vector<size_t> order(train.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key[a] < key[b]; });
    for (size_t i = 0; i < order.size(); ++i) {
      const Sample &s = train[order[i]];
      if (i == 0 || key[order[i]] != key[order[i - 1]]) groups.push_back(0);
      ++groups.back();
      x.push_back(s.x), y.push_back(s.y);
    }
    return CostModel::train(x, y, o, groups);
  }
  // Regression: a label taken with the cores apart is the candidate against a default that may have
  // run slower apart. It is moved by how much slower: log2 of the task's median default time apart
  // over its median near (the baselines, whatever candidates they were timed with), so that a mode
  // is not learned as the speed of the schedules measured in it. Labels taken near, and every label
  // of a task never timed near or of a host that never moves its cores, are left as they are.
  std::map<std::string, std::vector<double>> baselines;
  for (size_t i = 0; i < train.size(); ++i)
    if (train[i].baseline_s > 0) baselines[key[i]].push_back(train[i].baseline_s);
  std::map<std::string, double> shift;  // per apart group
  for (size_t i = 0; i < train.size(); ++i) {
    if (key[i] == train[i].workload || shift.count(key[i])) continue;
    shift[key[i]] = std::log2(apart_slowdown(baselines[train[i].workload], baselines[key[i]]));
  }
  for (size_t i = 0; i < train.size(); ++i) {
    auto it = shift.find(key[i]);
    x.push_back(train[i].x), y.push_back(static_cast<float>(train[i].y - (it == shift.end() ? 0.0 : it->second)));
  }
  return CostModel::train(x, y, o);
}

Expected<EvalReport> evaluate(const CostModel &model, const std::vector<Sample> &test) {
  EvalReport rep;
  rep.records_test = static_cast<int64_t>(test.size());
  // One point per (workload, schedule): the mean of its measurements; with the cores near and apart,
  // two points in two groups that are never compared (rank_groups).
  struct Point {
    std::vector<float> x;
    double y = 0;
    int n = 0;
  };
  std::map<std::string, std::map<std::string, Point>> tasks;
  std::vector<std::string> group = rank_groups(test);
  for (size_t i = 0; i < test.size(); ++i) {
    const Sample &s = test[i];
    Point &p = tasks[group[i]][s.schedule];
    p.x = s.x, p.y += s.y, ++p.n;
  }
  int64_t correct = 0, top1 = 0, top5 = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (auto &[workload, points] : tasks) {
    if (points.size() < 2) continue;
    std::vector<std::vector<float>> x;
    std::vector<double> y;
    for (auto &[schedule, p] : points) x.push_back(p.x), y.push_back(p.y / p.n);
    AT_ASSIGN(pred, model.predict(x));
    ++rep.tasks_test;
    for (size_t i = 0; i < y.size(); ++i)
      for (size_t j = i + 1; j < y.size(); ++j) {
        if (y[i] == y[j]) continue;
        ++rep.pairs;
        correct += (pred[i] - pred[j]) * (y[i] - y[j]) > 0;
      }
    size_t best = static_cast<size_t>(std::max_element(y.begin(), y.end()) - y.begin());
    std::vector<size_t> order(y.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return pred[a] > pred[b]; });
    for (size_t k = 0; k < order.size() && k < 5; ++k)
      if (order[k] == best) top5 += 1, top1 += k == 0;
  }
  rep.predict_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (rep.pairs) rep.pairwise_accuracy = static_cast<double>(correct) / static_cast<double>(rep.pairs);
  if (rep.tasks_test) {
    rep.top1_recall = static_cast<double>(top1) / static_cast<double>(rep.tasks_test);
    rep.top5_recall = static_cast<double>(top5) / static_cast<double>(rep.tasks_test);
  }
  return rep;
}

Expected<bool> OnlineModel::maybe_retrain() {
  size_t fresh = samples_.size() - trained_upto_;
  if (samples_.size() < min_samples_) return false;
  if (model_ && fresh < std::max(min_fresh_, trained_upto_ / 4)) return false;
  if (model_ && fresh > 0) {
    // The samples the current model has not seen are its held-out set.
    std::vector<Sample> unseen(samples_.begin() + static_cast<std::ptrdiff_t>(trained_upto_), samples_.end());
    AT_ASSIGN(rep, evaluate(*model_, unseen));
    if (rep.pairs > 0) heldout_accuracy_ = rep.pairwise_accuracy;
  }
  auto t0 = std::chrono::steady_clock::now();
  AT_ASSIGN(m, train_on(samples_, o_));
  model_ = std::move(m);
  trained_upto_ = samples_.size();
  train_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++trainings_;
  return true;
}

}  // namespace autotune
