#include "search/ModelSearch.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <set>

#include "costmodel/Features.h"
#include "runtime/ThreadPool.h"

namespace autotune {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

namespace {
CostModelOptions options_of(const ModelSearchOptions &o, uint64_t seed) {
  CostModelOptions mo;
  mo.threads = o.threads, mo.seed = seed;
  return mo;
}
}  // namespace

ModelSearch::ModelSearch(const Target &target, ModelSearchOptions o, uint64_t seed)
    : target_(target), o_(o), online_(options_of(o, seed), static_cast<size_t>(std::max<int64_t>(o.min_samples, 0)), 16) {}

void ModelSearch::add_samples(std::vector<Sample> samples) {
  for (Sample &s : samples) online_.add(std::move(s));
}

ModelSearch::Lowered ModelSearch::lowered(const Task &task, const KernelSchedule &s) const {
  auto k = lower_group(task.body, "k", s);
  if (!k) return {};
  return {kernel_features(*k, target_), k->identity()};
}

const ModelSearch::Lowered &ModelSearch::cached(const Task &task, const Point &p) {
  std::string key = task.hash + p.json;
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  return cache_.emplace(key, lowered(task, p.schedule)).first->second;
}

const std::vector<float> &ModelSearch::features(const Task &task, const Point &p) { return cached(task, p).features; }

const std::string &ModelSearch::kernel(const Task &task, const Point &p) { return cached(task, p).kernel; }

void ModelSearch::compute_features(const Task &task, const std::vector<Point> &points) {
  // The search runs between batches, when the measurer leaves the cores idle: the points not yet
  // cached are lowered on every thread.
  std::vector<std::string> keys;
  std::vector<const KernelSchedule *> todo;
  std::set<std::string> queued;
  for (const Point &p : points) {
    std::string key = task.hash + p.json;
    if (cache_.count(key) || !queued.insert(key).second) continue;
    keys.push_back(std::move(key));
    todo.push_back(&p.schedule);
  }
  std::vector<Lowered> out(todo.size());
  for_each_index(todo.size(), std::max(1, o_.threads), [&](size_t i) { out[i] = lowered(task, *todo[i]); });
  for (size_t i = 0; i < todo.size(); ++i) cache_.emplace(std::move(keys[i]), std::move(out[i]));
}

void ModelSearch::add_result(const Task &task, const Point &p, double ratio) {
  if (!(ratio > 0)) return;
  const std::vector<float> &x = features(task, p);
  if (x.empty()) return;
  online_.add({task.hash, p.json, x, static_cast<float>(-std::log2(ratio))});
}

std::vector<KernelSchedule> ModelSearch::propose(const Task &task, const ScheduleSpace &space, const std::set<std::string> &measured,
                                                 const std::vector<KernelSchedule> &elite, int want, Rng &rng) {
  // A schedule's JSON is its identity (measured, chosen, scored, the feature cache); a step list's
  // takes 50 us to write, so each point's is written once.
  auto point = [](KernelSchedule s) {
    std::string j = schedule_to_json(s);
    return Point{std::move(s), std::move(j)};
  };
  // Several schedules may make one kernel: a knob point and the step list it stands for, knobs
  // that the lowering clamps alike (a pixel tile wider than the image), a default and the sketch
  // point it is. One of them is measured: the kernels of the measured schedules (lowered here
  // once, those from the database included) and of the chosen ones are taken.
  std::vector<Point> known;
  for (const std::string &j : measured)
    if (!cache_.count(task.hash + j))
      if (auto s = schedule_from_json(j)) known.push_back({*s, j});
  compute_features(task, known);
  std::set<std::string> kernels;
  for (const std::string &j : measured)
    if (auto it = cache_.find(task.hash + j); it != cache_.end() && !it->second.kernel.empty()) kernels.insert(it->second.kernel);
  std::set<std::string> chosen;
  std::vector<KernelSchedule> out;
  auto take = [&](const Point &p) {
    if (measured.count(p.json) || chosen.count(p.json) || !validate_schedule(task.body, p.schedule)) return false;
    const std::string &k = kernel(task, p);
    if (!k.empty() && !kernels.insert(k).second) return false;
    chosen.insert(p.json);
    out.push_back(p.schedule);
    return true;
  };
  int randoms = online_.model() ? static_cast<int>(std::ceil(o_.epsilon * want)) : want;
  if (const CostModel *model = online_.model()) {
    auto t0 = std::chrono::steady_clock::now();
    // Population: the seeds, then random points.
    std::map<std::string, std::pair<const Point *, float>> scored;  // every point scored so far, by its JSON
    std::deque<Point> points;                                         // their storage (stable addresses)
    auto score = [&](std::vector<Point> pts) {
      compute_features(task, pts);
      std::vector<std::vector<float>> x;
      std::vector<const Point *> kept;
      for (Point &p : pts) {
        if (scored.count(p.json)) continue;
        // Lowering refuses an illegal schedule (its knobs validated, its steps replayed): no features, not scored.
        const std::vector<float> &f = features(task, p);
        if (f.empty()) continue;
        points.push_back(std::move(p));
        x.push_back(f), kept.push_back(&points.back());
        scored[kept.back()->json] = {kept.back(), 0.0f};
      }
      if (auto pr = model->predict(x))
        for (size_t i = 0; i < kept.size(); ++i) scored[kept[i]->json].second = (*pr)[i];
    };
    // Everything scored so far, best prediction first.
    auto ranked_points = [&] {
      std::vector<std::pair<float, const Point *>> ranked;
      for (const auto &[j, sp] : scored) ranked.emplace_back(sp.second, sp.first);
      std::stable_sort(ranked.begin(), ranked.end(), [](const auto &a, const auto &b) { return a.first > b.first; });
      return ranked;
    };
    std::vector<Point> pop;
    for (const KernelSchedule &s : elite) pop.push_back(point(s));
    for (int i = 0; i < o_.population; ++i) pop.push_back(point(space.sample(rng)));  // seeds do not crowd out the random points
    score(std::move(pop));
    for (int g = 0; g < o_.generations; ++g) {
      // Survivors: the best-predicted half of everything scored; children by mutation and crossover.
      std::vector<std::pair<float, const Point *>> ranked = ranked_points();
      size_t parents = std::max<size_t>(2, std::min(ranked.size(), static_cast<size_t>(o_.population / 2)));
      if (ranked.empty()) break;
      auto parent = [&]() -> const KernelSchedule & {
        return ranked[static_cast<size_t>(rng.uniform(static_cast<int>(std::min(parents, ranked.size()))))].second->schedule;
      };
      std::vector<Point> children;
      for (int i = 0; i < o_.population; ++i) {
        const KernelSchedule &a = parent();
        if (rng.uniform(2)) {
          const KernelSchedule &b = parent();
          children.push_back(point(space.crossover(a, b, rng)));
        } else {
          children.push_back(point(space.mutate(a, rng)));
        }
      }
      score(std::move(children));
    }
    for (const auto &[pr, p] : ranked_points()) {
      if (static_cast<int>(out.size()) >= want - randoms) break;
      take(*p);
    }
    predict_s_ += seconds_since(t0);
  }
  for (int attempt = 0; attempt < 200 && static_cast<int>(out.size()) < want; ++attempt) take(point(space.sample(rng)));
  return out;
}

}  // namespace autotune
