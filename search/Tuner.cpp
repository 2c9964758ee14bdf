#include "search/Tuner.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <cmath>
#include <set>

#include "db/TuningDb.h"
#include "ir/Printer.h"
#include "ir/Stats.h"
#include "costmodel/Features.h"
#include "search/ModelSearch.h"
#include "search/TaskScheduler.h"

#include <nlohmann/json.hpp>
#include "search/ScheduleSpace.h"

namespace autotune {

double TuneReport::estimated_untuned_s() const {
  double s = 0;
  for (const TaskReport &t : tasks) s += t.default_s * static_cast<double>(t.task.groups.size());
  return s;
}

double TuneReport::estimated_tuned_s() const {
  double s = 0;
  for (const TaskReport &t : tasks) s += t.best_s() * static_cast<double>(t.task.groups.size());
  return s;
}

namespace {

/** The schedules (JSON) of a schedule -> ratio map whose ratio is below `below`, best first. */
std::vector<std::string> by_ratio(const std::map<std::string, double> &ratios, double below = INFINITY) {
  std::vector<std::pair<double, std::string>> ranked;
  for (const auto &[s, r] : ratios)
    if (r < below) ranked.emplace_back(r, s);
  std::sort(ranked.begin(), ranked.end());
  std::vector<std::string> out;
  for (auto &[r, s] : ranked) out.push_back(std::move(s));
  return out;
}

std::string format_duration(double s) {
  int t = static_cast<int>(s + 0.5);
  char buf[32];
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%d:%02d:%02d", t / 3600, t / 60 % 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%02d:%02d", t / 60, t % 60);
  return buf;
}

/** ratios[schedule] = the smaller of what it holds and `ratio` (a schedule's best ratio so far). */
void keep_min(std::map<std::string, double> &ratios, const std::string &schedule, double ratio) {
  auto [it, fresh] = ratios.emplace(schedule, ratio);
  if (!fresh) it->second = std::min(it->second, ratio);
}

/** A task's report after its timed trials change: its best and its default's time as if near (near_best). */
void refresh(TaskReport &tr, const std::vector<Timed> &timed, double near_ns) {
  if (timed.empty()) return;  // nothing ran correctly beside a baseline: nothing to compare
  NearBest b = near_best(timed, near_ns);
  tr.default_s = b.default_s, tr.best_ratio = b.ratio, tr.best_schedule = b.schedule;
  tr.baselines = static_cast<int64_t>(timed.size());
}

/** Adds the seconds from its construction to its destruction to `into`. */
struct AddSeconds {
  double &into;
  std::chrono::steady_clock::time_point since = std::chrono::steady_clock::now();
  explicit AddSeconds(double &s) : into(s) {}
  ~AddSeconds() { into += std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count(); }
};

/**
 * Whether a schedule's records settle it, so it is not measured again: any result but a timeout
 * does, and so do two timeouts (each already measured twice, the second time with twice the
 * limit). One timeout may have been a load spike on a shared machine: a later run tries again.
 */
bool settled(const std::vector<const TuningRecord *> &records) {
  int timeouts = 0;
  for (const TuningRecord *r : records) {
    if (r->status != "timeout") return true;
    ++timeouts;
  }
  return timeouts >= 2;
}

/** The baselines of `timed` taken near and apart (cores_apart). */
std::pair<std::vector<double>, std::vector<double>> baselines_by_mode(const std::vector<Timed> &timed, double near_ns) {
  std::pair<std::vector<double>, std::vector<double>> out;
  for (const Timed &t : timed) (cores_apart(t.handoff_ns, near_ns) ? out.second : out.first).push_back(t.baseline_s);
  return out;
}

}  // namespace

std::map<std::string, double> near_ratios(const std::vector<Timed> &timed, double near_ns) {
  auto [near, apart] = baselines_by_mode(timed, near_ns);
  double slowdown = apart_slowdown(near, apart);
  std::map<std::string, double> ratios;
  for (const Timed &t : timed)
    keep_min(ratios, t.schedule, t.median_s / t.baseline_s * (cores_apart(t.handoff_ns, near_ns) ? slowdown : 1.0));
  return ratios;
}

NearBest near_best(const std::vector<Timed> &timed, double near_ns) {
  NearBest b;
  if (timed.empty()) return b;
  auto [near, apart] = baselines_by_mode(timed, near_ns);
  b.default_s = median(near.empty() ? apart : near);
  for (const auto &[schedule, ratio] : near_ratios(timed, near_ns))
    if (b.schedule.empty() || ratio < b.ratio) b.schedule = schedule, b.ratio = ratio;
  return b;
}

std::vector<std::string> to_confirm(const std::map<std::string, double> &ratios, const std::string &default_json, int top) {
  std::vector<std::string> out;
  if (top < 1) return out;
  bool has_default = false;
  for (const std::string &j : by_ratio(ratios)) {
    // The last place is the default's unless a leader already was the default.
    if (static_cast<int>(out.size()) >= top - (has_default ? 0 : 1)) break;
    out.push_back(j), has_default |= j == default_json;
  }
  if (!has_default) out.push_back(default_json);
  return out;
}

Status TuneOptions::validate() const {
  if (trials < 1) return make_error("trials must be at least 1, got " + std::to_string(trials));
  if (batch < 1 || batch > 1024) return make_error("batch must be between 1 and 1024, got " + std::to_string(batch));
  if (confirm_top < 0 || confirm_top == 1 || confirm_top > 64)
    return make_error("confirm_top must be 0 (no confirmation) or between 2 and 64 (the default and the leading schedules), got " +
                      std::to_string(confirm_top));
  if (search != "evolutionary" && search != "random") return make_error("search must be evolutionary or random, got '" + search + "'");
  if (space != "all" && space != "knobs") return make_error("space must be all or knobs, got '" + space + "'");
  if (!(confirm_min_time_s >= 0 && confirm_min_time_s <= 3600))
    return make_error("confirm_min_time_s must be between 0 and 3600 seconds, got " + std::to_string(confirm_min_time_s));
  return measure.validate();
}

Expected<TuneReport> tune(const Graph &fused, const TuneOptions &o) {
  auto t_start = std::chrono::steady_clock::now();
  AT_TRY(o.validate());
  AT_ASSIGN(jit, Jit::create({o.cache_dir, o.target}));
  const Target &target = jit->target();
  AT_ASSIGN(db, TuningDb::open(o.db_path));
  TuneReport rep;
  rep.target = target.key(o.measure.threads);
  Measurer measurer(*jit, o.measure);
  Rng rng(o.seed);

  struct State {
    ScheduleSpace space;
    std::set<std::string> measured;  // schedule JSON already in the database
    std::optional<TaskData> data;
    std::vector<Timed> timed;  // its ok trials: near_ratios ranks the schedules
    KernelSchedule default_point;  // the task's default schedule, and its JSON: made once, asked for every batch
    std::string default_json;
    std::string anchor_key;  // tasks with the same anchor (anchor_key) measure each other's best
    std::string anchor_op;   // its conv or dense (schedule_anchor), else its first op: tasks of one anchor op seed each other's search
  };
  rep.search = o.search;
  // The cost model's features of every measured kernel are saved with its record, whatever the
  // search; with the evolutionary search the model also proposes the candidates.
  ModelSearchOptions mo;
  mo.threads = target.threads;
  mo.every_family = o.search == "evolutionary";
  ModelSearch features(target, mo, o.seed);
  ModelSearch *model = o.search == "evolutionary" ? &features : nullptr;
  if (model) {
    // Whatever the database holds for this target trains the first model, other models' records too.
    AT_ASSIGN(known, load_samples(*db, rep.target, target));
    model->add_samples(std::move(known.samples));
  }
  std::vector<State> states;
  std::vector<double> handoffs;  // of every ok trial, the database's and this run's: the near level (near_handoff_ns)
  std::vector<TaskProgress> progress;  // what the task scheduler reads, one per task: its best ratio after each trial
  TaskSchedulerOptions so;
  so.warmup_trials = 1 + o.batch;  // its default and one batch
  TaskScheduler scheduler(so);
  // Each task's trials in the database, in order: how many of its timed trials (State::timed) each
  // had behind it; the progress the task scheduler reads is replayed from them once the near level
  // of the hand-offs (over every task's records) is known.
  std::vector<std::vector<size_t>> timed_after;
  for (Task &t : extract_tasks(fused)) {
    AT_TRY(db->upsert_workload(t.hash, rep.target, print_text(t.body), t.flops));
    TaskReport tr;
    KernelSchedule def = default_schedule(t.body, target);
    const Node *anchor = schedule_anchor(t.body);
    State st{ScheduleSpace::of(t.body, target, o.space == "all"), {}, std::nullopt, {}, def, schedule_to_json(def), anchor_key(t.body),
             anchor ? anchor->op : t.ops.substr(0, t.ops.find('+'))};
    TaskProgress pr;
    pr.uses = static_cast<double>(t.groups.size()), pr.flops = t.flops, pr.kind = t.ops;
    AT_ASSIGN(recs, db->records(t.hash, rep.target));
    std::map<std::string, std::vector<const TuningRecord *>> by_schedule;
    std::vector<size_t> after;
    for (const TuningRecord &r : recs) {
      if (r.phase != "trial") continue;  // confirmations inform best(), not the budget
      by_schedule[r.schedule].push_back(&r);
      ++tr.trials;
      if (r.status == "ok" && r.baseline_s > 0) {
        st.timed.push_back({r.schedule, r.median_s, r.baseline_s, r.handoff_ns});
        handoffs.push_back(r.handoff_ns);
      }
      after.push_back(st.timed.size());
    }
    for (const auto &[schedule, records] : by_schedule)
      if (settled(records)) st.measured.insert(schedule);
    rep.trials_before += tr.trials;
    tr.task = std::move(t);
    rep.tasks.push_back(std::move(tr));
    progress.push_back(std::move(pr));
    states.push_back(std::move(st));
    timed_after.push_back(std::move(after));
  }
  double near_ns = near_handoff_ns(handoffs);
  for (size_t i = 0; i < rep.tasks.size(); ++i) {
    std::vector<Timed> prefix;
    for (size_t n : timed_after[i]) {
      if (n > prefix.size()) {
        prefix.insert(prefix.end(), states[i].timed.begin() + static_cast<std::ptrdiff_t>(prefix.size()),
                      states[i].timed.begin() + static_cast<std::ptrdiff_t>(n));
        refresh(rep.tasks[i], prefix, near_ns);
      }
      progress[i].best_ratio.push_back(rep.tasks[i].best_ratio);
    }
  }

  auto stopped = [&] { return o.stop && o.stop->load(); };
  // A task's seeded inputs and reference output, made when it is first measured; its weights are
  // marked for eviction before each timed run.
  auto ensure_data = [&](size_t i) -> Status {
    if (states[i].data) return Status::ok();
    AT_ASSIGN(d, TaskData::make(rep.tasks[i].task.body, o.seed + 1));
    d.cold = rep.tasks[i].task.constant;
    d.add_producers(rep.tasks[i].task.producers, o.seed + 2);
    states[i].data = std::move(d);
    return Status::ok();
  };
  // " | cost model: 1200 records, held-out 0.87" for the progress line.
  auto model_state = [&]() -> std::string {
    if (!model) return "";
    if (!model->has_model()) return " | cost model: not trained yet";
    char buf[96];
    std::snprintf(buf, sizeof buf, " | cost model: %lld records", static_cast<long long>(model->trained_rows()));
    std::string out = buf;
    if (model->heldout_accuracy() >= 0) std::snprintf(buf, sizeof buf, ", held-out %.2f", model->heldout_accuracy()), out += buf;
    return out;
  };
  // Saves one measurement the moment it is known, folds it into the task's report and prints progress.
  // A failed save, or a measurement the host itself could not start, stops the batch: nothing
  // measured after it could be saved, and the error ends the run.
  auto saver = [&](int pick, const std::vector<KernelSchedule> &candidates, Status &save_error, const char *phase) {
    return [&, pick, phase](size_t i, const MeasureResult &m) -> bool {
      AddSeconds saving{rep.save_s};  // every return below counts
      if (m.status == MeasureStatus::kHostError) {
        save_error = make_error("cannot measure: " + m.error + "; every result measured so far is saved, run again to resume");
        return false;
      }
      TaskReport &tr = rep.tasks[pick];
      State &st = states[pick];
      TuningRecord r;
      r.workload_hash = tr.task.hash;
      r.target = rep.target;
      ModelSearch::Point point{candidates[i], schedule_to_json(candidates[i])};  // its JSON written once: record, features, sample
      r.schedule = point.json;
      r.status = status_name(m.status);
      r.error = m.error;
      r.median_s = m.median_s, r.min_s = m.min_s, r.stddev_s = m.stddev_s, r.runs = m.runs, r.compile_s = m.compile_s;
      r.baseline_s = m.baseline_s, r.handoff_ns = m.handoff_ns;
      if (m.handoff_ns > 0) rep.handoff_ns.push_back(m.handoff_ns);
      bool confirming = std::string(phase) == "confirm";
      r.phase = confirming ? "confirmation" : "trial";
      if (const std::vector<float> &f = features.features(tr.task, point); !f.empty()) {
        r.features = nlohmann::json(f).dump();
        r.feature_version = kFeatureVersion;
      }
      if (auto id = db->add_record(r); !id) {
        save_error = Status(id.error());
        return false;
      }
      st.measured.insert(r.schedule);
      if (!confirming) ++tr.trials;
      if (confirming) ++rep.confirmations;
      else ++rep.trials_run;
      if (m.status != MeasureStatus::kOk && !confirming) ++rep.failures_run;
      if (m.status == MeasureStatus::kOk && m.baseline_s > 0) {
        double ratio = m.median_s / m.baseline_s;
        st.timed.push_back({r.schedule, m.median_s, m.baseline_s, m.handoff_ns});
        handoffs.push_back(m.handoff_ns);
        if (!confirming) refresh(tr, st.timed, near_ns);
        if (model) model->add_result(tr.task, point, ratio, m.baseline_s, m.handoff_ns);
      }
      if (!confirming) progress[pick].best_ratio.push_back(tr.best_ratio);
      if (o.progress) {
        double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
        int64_t done = rep.trials_before + rep.trials_run, left = std::max<int64_t>(0, o.trials - done);
        char line[400];
        std::snprintf(line, sizeof line,
                      "[%5lld/%lld %s] task %d/%zu %s %s: %s, best %.3f ms (default %.3f) | model ~%.2f ms (untuned ~%.2f) | %s elapsed%s%s%s",
                      static_cast<long long>(confirming ? rep.confirmations : done),
                      static_cast<long long>(confirming ? rep.confirmations : o.trials), phase, pick + 1, rep.tasks.size(),
                      tr.task.ops.c_str(), tr.task.shape.c_str(), status_name(m.status), tr.best_s() * 1e3, tr.default_s * 1e3,
                      rep.estimated_tuned_s() * 1e3, rep.estimated_untuned_s() * 1e3, format_duration(elapsed).c_str(),
                      confirming ? "" : ", ~", confirming ? "" : (format_duration(rep.trials_run ? elapsed / static_cast<double>(rep.trials_run) * static_cast<double>(left) : 0) + " left").c_str(),
                      model_state().c_str());
        o.progress(line);
      }
      return true;
    };
  };
  while (rep.trials_before + rep.trials_run < o.trials && !stopped()) {
    // Pick a task: unmeasured defaults first, then the task scheduler's choice.
    int pick = -1;
    std::vector<KernelSchedule> candidates;
    std::optional<AddSeconds> choosing(rep.choose_s);
    near_ns = near_handoff_ns(handoffs);  // once a batch: the records' ratios as if near
    for (size_t i = 0; i < rep.tasks.size() && pick < 0; ++i) {
      if (!states[i].measured.count(states[i].default_json)) {
        pick = static_cast<int>(i);
        candidates.push_back(states[i].default_point);
      }
    }
    if (pick < 0) {
      for (size_t i = 0; i < rep.tasks.size(); ++i) {
        const TaskReport &t = rep.tasks[i];
        progress[i].default_s = t.best_schedule.empty() ? 0 : t.default_s;  // nothing of it ever ran correctly: nothing to improve on
        progress[i].exhausted = static_cast<int64_t>(states[i].measured.size()) >= states[i].space.size();
      }
      pick = scheduler.pick(progress);
      if (pick < 0) {
        rep.spaces_measured = true;  // every space measured: more budget would find nothing new
        break;
      }
      int64_t want = std::min<int64_t>(o.batch, o.trials - rep.trials_before - rep.trials_run);
      if (model) {
        AT_ASSIGN(trained, model->maybe_retrain());
        if (trained) {
          AT_ASSIGN(bytes, model->model()->save());
          AT_TRY(db->save_cost_model(rep.target, kFeatureVersion, model->trained_rows(), bytes));
        }
        // The population's seeds: the task's best measured schedules.
        std::vector<KernelSchedule> elite;
        for (const std::string &j : by_ratio(near_ratios(states[pick].timed, near_ns))) {
          if (elite.size() >= 8) break;
          if (auto s = schedule_from_json(j)) elite.push_back(*s);
        }
        // And the best two of every other task with the same anchor that beat its default: what
        // made one conv fast (the algorithm, the register block) often makes the next one fast,
        // and a task's first batches otherwise start from random points alone. The model scores
        // them with the rest; those illegal here are dropped when they do not lower.
        // A task whose anchor is this one's (the same conv, another epilogue: ResNet's 3x3 convs
        // with and without the residual add) has its best measured here, not only scored: it is
        // this task's likely best too, and the model, trained across tasks, may not rank it first.
        std::vector<KernelSchedule> siblings;
        for (size_t t = 0; t < rep.tasks.size(); ++t) {
          if (static_cast<int>(t) == pick || states[t].anchor_op != states[pick].anchor_op) continue;
          std::vector<std::string> theirs = by_ratio(near_ratios(states[t].timed, near_ns), 0.98);
          bool sibling = !states[pick].anchor_key.empty() && states[t].anchor_key == states[pick].anchor_key;
          for (size_t k = 0; k < theirs.size() && k < 2; ++k)
            if (auto s = schedule_from_json(theirs[k]); s && !states[pick].measured.count(theirs[k]))
              (sibling && k == 0 ? siblings : elite).push_back(*s);
        }
        candidates = model->propose(rep.tasks[pick].task, states[pick].space, states[pick].measured, elite, static_cast<int>(want), rng, siblings);
      } else {
        // Random search: a ModelSearch that never trains proposes random, unmeasured, legal points.
        candidates = features.propose(rep.tasks[pick].task, states[pick].space, states[pick].measured, {}, static_cast<int>(want), rng);
      }
      if (candidates.empty()) {
        states[pick].space = ScheduleSpace{};  // sampling finds nothing new: treat as exhausted
        continue;
      }
    }
    choosing.reset();
    TaskReport &tr = rep.tasks[pick];
    State &st = states[pick];
    AT_TRY(ensure_data(static_cast<size_t>(pick)));
    Status save_error;
    measurer.measure(tr.task.body, *st.data, candidates, saver(pick, candidates, save_error, "trials"), o.stop);
    if (!save_error) return save_error.error();
  }
  // Confirmation: re-measure confirm_top schedules of each task, its default and its leaders
  // (to_confirm), then report the database's robust choice (median ratio of confirmed
  // schedules). These decide the plan: each is timed for confirm_min_time_s, which may be longer
  // than a trial's min_time_s.
  measurer.set_min_time_s(o.confirm_min_time_s);
  for (size_t i = 0; i < rep.tasks.size() && o.confirm_top > 0 && !stopped(); ++i) {
    TaskReport &tr = rep.tasks[i];
    AT_ASSIGN(recs, db->records(tr.task.hash, rep.target));
    std::vector<Timed> timed;  // every ok record: each schedule's best single ratio, as if near
    for (const TuningRecord &r : recs)
      if (r.status == "ok" && r.baseline_s > 0) timed.push_back({r.schedule, r.median_s, r.baseline_s, r.handoff_ns});
    std::map<std::string, double> best_ratio = near_ratios(timed, near_handoff_ns(handoffs));
    const std::string &def = states[i].default_json;
    std::vector<KernelSchedule> leading;
    for (const std::string &j : to_confirm(best_ratio, def, o.confirm_top))
      if (j == def) leading.push_back(states[i].default_point);
      else if (auto s = schedule_from_json(j)) leading.push_back(*s);
    if (leading.size() < 2) continue;  // nothing to choose between
    AT_TRY(ensure_data(i));
    for (int round = 0; round < kConfirmations && !stopped(); ++round) {
      Status save_error;
      measurer.measure(tr.task.body, *states[i].data, leading, saver(static_cast<int>(i), leading, save_error, "confirm"), o.stop);
      if (!save_error) return save_error.error();
    }
    // The task's best is now the database's choice, scored by its median ratio.
    AT_ASSIGN(choice, db->best_scored(tr.task.hash, rep.target));
    if (choice) {
      tr.best_ratio = choice->median_ratio;
      tr.best_schedule = choice->record.schedule;
    }
  }
  rep.interrupted = stopped();  // in the search or in the confirmation phase: either way the run is not finished
  rep.near_handoff_ns = near_handoff_ns(handoffs);
  // The plan: each group's chosen record.
  std::vector<std::pair<std::string, int64_t>> plan;
  for (const Node &n : fused.nodes) {
    std::string h = workload_hash(*n.body);
    AT_ASSIGN(b, db->best(h, rep.target));
    plan.emplace_back(h, b ? b->id : 0);
  }
  AT_TRY(db->save_plan(model_hash(fused), rep.target, plan));
  if (model) {
    rep.model_rows = model->trained_rows(), rep.model_heldout_accuracy = model->heldout_accuracy();
    rep.model_train_s = model->train_seconds(), rep.model_predict_s = model->predict_seconds(), rep.model_trainings = model->trainings();
  }
  rep.points_lowered = features.points_lowered(), rep.points_lower_s = features.lower_seconds();
  rep.measure_times = measurer.phase_times();
  rep.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  return rep;
}

}  // namespace autotune
