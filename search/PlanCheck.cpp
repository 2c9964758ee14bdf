#include "search/PlanCheck.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "db/TuningDb.h"
#include "db/Workload.h"
#include "ir/Reference.h"
#include "ir/Stats.h"
#include "runtime/Runtime.h"
#include "runtime/ThreadPool.h"

namespace autotune {

Expected<SideBySide> side_by_side(CompiledModel &a, CompiledModel &b, const std::vector<Tensor> &inputs, int rounds) {
  // Each model's own groups: two partitions of one model (the check in the model) differ in count.
  size_t na = a.groups().size(), nb = b.groups().size();
  std::shared_ptr<ThreadPool> pool = ThreadPool::shared(a.threads());
  double handoff = pool->handoff_ns();
  std::vector<double> ta, tb;
  std::vector<std::vector<double>> ga(na), gb(nb);
  for (int r = 0; r < rounds + 3; ++r)
    for (CompiledModel *m : {&a, &b}) {
      // Each timed run right after an untimed one of the same model: its first groups then find
      // their weights and inputs where the model's own last run left them, as in deployment (which
      // runs one model over and over), not where the other model's run did (alternating alone
      // made MobileNetV2's second and third groups take 0.16 ms in the model against 0.08 in `bench`).
      AT_TRY(m->run(inputs));
      std::vector<double> groups;
      auto s = std::chrono::steady_clock::now();
      AT_TRY(m->run(inputs, &groups));
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s).count();
      if (r < 3) continue;
      (m == &a ? ta : tb).push_back(ms);
      auto &per = m == &a ? ga : gb;
      for (size_t i = 0; i < per.size() && i < groups.size(); ++i) per[i].push_back(groups[i]);
    }
  SideBySide out;
  out.handoff_ns = std::max(handoff, pool->handoff_ns());
  out.a_ms = median(ta), out.b_ms = median(tb);
  for (const std::vector<double> &g : ga) out.a_group_ms.push_back(median(g));
  for (const std::vector<double> &g : gb) out.b_group_ms.push_back(median(g));
  return out;
}

Expected<Alternated> alternate(CompiledModel &a, CompiledModel &b, const std::vector<Tensor> &inputs, int runs, int rounds,
                               CompiledModel *a2, CompiledModel *b2) {
  Alternated out;
  std::vector<double> handoffs;
  bool pairs = a2 && b2;
  for (int r = 0; r < rounds; ++r) {
    int pair = pairs ? r % 2 : 0;
    bool a_first = (pairs ? r / 2 : r) % 2 == 0;
    CompiledModel &ma = pair ? *a2 : a, &mb = pair ? *b2 : b;
    AT_ASSIGN(s, a_first ? side_by_side(ma, mb, inputs, runs) : side_by_side(mb, ma, inputs, runs));
    Alternated::Round round;
    round.a_first = a_first, round.pair = pair, round.handoff_ns = s.handoff_ns;
    round.a_ms = a_first ? s.a_ms : s.b_ms, round.b_ms = a_first ? s.b_ms : s.a_ms;
    round.a_group_ms = a_first ? s.a_group_ms : s.b_group_ms, round.b_group_ms = a_first ? s.b_group_ms : s.a_group_ms;
    handoffs.push_back(s.handoff_ns);
    out.rounds.push_back(std::move(round));
  }
  out.near_ns = near_handoff_ns(handoffs);
  return out;
}

std::vector<double> Alternated::ratios(bool near_only) const {
  std::vector<double> out;
  for (const Round &r : rounds)
    if (!near_only || !cores_apart(r.handoff_ns, near_ns)) out.push_back(r.b_ms / r.a_ms);
  return out;
}

std::vector<double> Alternated::group_ms(bool of_b) const {
  std::vector<double> out;
  for (size_t i = 0; !rounds.empty() && i < (of_b ? rounds[0].b_group_ms : rounds[0].a_group_ms).size(); ++i) {
    std::vector<double> per;
    for (const Round &r : rounds) per.push_back((of_b ? r.b_group_ms : r.a_group_ms)[i]);
    out.push_back(median(per));
  }
  return out;
}

namespace {

/** side_by_side, timed again (up to o.mode_tries times in all, o.mode_wait_s apart) while its hand-off says the cores were apart. */
Expected<SideBySide> near_side_by_side(CompiledModel &a, CompiledModel &b, const std::vector<Tensor> &inputs, const PlanCheckOptions &o,
                                       int &tries, bool &apart) {
  for (tries = 1;; ++tries) {
    AT_ASSIGN(s, side_by_side(a, b, inputs, o.rounds));
    apart = cores_apart(s.handoff_ns, o.near_ns);
    if (!apart || tries >= std::max(1, o.mode_tries)) return s;
    std::this_thread::sleep_for(std::chrono::duration<double>(o.mode_wait_s));
  }
}

}  // namespace

Expected<PlanCheckReport> check_plan_in_model(const Graph &fused, const PlanCheckOptions &options) {
  CompileOptions plain, tuned;
  plain.threads = tuned.threads = options.threads;
  tuned.db_path = options.db_path;
  // The first model a process compiles runs about 1% slower than later ones (docs/architecture.md,
  // "Runtime"): a copy that is neither side goes first and is kept while they run. Unlike `bench
  // --against` and the partition check, one pair only (each side compiled once): two compiles of
  // one plan still differ by about 1%, within the 5% margin a group is judged by.
  AT_ASSIGN(compiled_first, CompiledModel::compile(fused, plain));
  AT_ASSIGN(m0, CompiledModel::compile(fused, plain));
  AT_ASSIGN(m1, CompiledModel::compile(fused, tuned));
  auto inputs = random_inputs(fused, 0);
  PlanCheckReport rep;
  AT_ASSIGN(first, near_side_by_side(*m0, *m1, inputs, options, rep.tries, rep.apart));
  rep.handoff_ns = first.handoff_ns;
  rep.untuned_ms = first.a_ms, rep.tuned_ms = first.b_ms;
  rep.checked_ms = first.b_ms, rep.checked_untuned_ms = first.a_ms;
  rep.tuned_groups = rep.checked_tuned_groups = m1->tuned_groups();
  const auto &groups = m1->groups();
  for (size_t i = 0; i < groups.size() && !rep.apart; ++i) {
    double d = first.a_group_ms[i], t = first.b_group_ms[i];
    if (groups[i].tuned && t > d * options.margin && t - d > 0.002)
      rep.reverted.push_back({i, groups[i].ops, groups[i].shape, d, t});
  }
  if (rep.reverted.empty()) return rep;
  // The plan with the reverted groups on their defaults, saved where the runtime reads it.
  std::string target = plain.target.key(m1->threads()), model = model_hash(m1->graph());
  AT_ASSIGN(db, TuningDb::open(options.db_path, DbAccess::kReadWrite));
  AT_ASSIGN(saved, db->plan(model, target));
  if (!saved || saved->size() != groups.size())
    return make_error(options.db_path + ": no plan of this model on " + target + " to check (tune it first)");
  std::vector<std::pair<std::string, int64_t>> plan;
  for (size_t i = 0; i < groups.size(); ++i) plan.emplace_back(workload_hash(*m1->graph().nodes[i].body), (*saved)[i] ? (*saved)[i]->id : 0);
  for (const auto &r : rep.reverted) plan[r.group].second = 0;
  AT_TRY(db->save_plan(model, target, plan));
  db.reset();
  AT_ASSIGN(m2, CompiledModel::compile(fused, tuned));
  int tries = 0;
  AT_ASSIGN(second, near_side_by_side(*m0, *m2, inputs, options, tries, rep.checked_apart));
  rep.checked_untuned_ms = second.a_ms, rep.checked_ms = second.b_ms;
  rep.checked_tuned_groups = m2->tuned_groups();
  return rep;
}

}  // namespace autotune
