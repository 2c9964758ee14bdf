#include "search/PartitionSearch.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "codegen/Jit.h"
#include "codegen/Lower.h"
#include "costmodel/Features.h"
#include "db/TuningDb.h"
#include "db/Workload.h"
#include "ir/Partition.h"
#include "ir/Reference.h"
#include "ir/Stats.h"
#include "runtime/Runtime.h"
#include "search/PlanCheck.h"
#include "search/Tuner.h"

namespace autotune {

std::string PartitionReport::json() const {
  nlohmann::json moves_j = nlohmann::json::array();
  for (const MoveReport &m : moves) {
    moves_j.push_back({{"move", m.move}, {"ops", m.ops}, {"apart_ms", m.apart_s * 1e3}, {"merged_ms", m.merged_s * 1e3}, {"ratio", m.ratio},
                       {"bytes_saved", m.bytes_saved}, {"bytes_apart", m.bytes_apart}, {"bytes_merged", m.bytes_merged},
                       {"flops_apart", m.flops_apart}, {"flops_merged", m.flops_merged}, {"handoff_ns", m.handoff_ns}, {"producers_apart", m.producers_apart}, {"producers_merged", m.producers_merged}, {"measured", m.measured}, {"chosen", m.chosen}, {"why_not", m.why_not}});
    if (!m.same_as.empty()) moves_j.back()["same_as"] = m.same_as;
    if (m.model_apart_ms > 0)
      moves_j.back()["model_apart_ms"] = m.model_apart_ms, moves_j.back()["model_merged_ms"] = m.model_merged_ms, moves_j.back()["model_ratio"] = m.model_ratio;
  }
  nlohmann::json j{{"target", target}, {"model_hash", model_hash}, {"moves", moves_j}};
  if (checked) j["model_check"] = {{"fuseops_ms", fuseops_ms}, {"searched_ms", searched_ms}, {"ratio", check_ratio}, {"handoff_ns", check_handoff_ns}};
  return j.dump();
}

namespace {

using Legal = std::function<Status(const std::vector<int> &)>;

/** The report of the move of `producer` (one per producer). */
MoveReport &report_for(std::vector<MoveReport> &moves, int producer) {
  return *std::find_if(moves.begin(), moves.end(), [&](const MoveReport &m) { return m.producer == producer; });
}

/**
 * `start` with the producers of `order` added one by one where `legal` accepts the partition with
 * them and those before; `refused` is told of each one it does not accept, and why.
 */
std::vector<int> add_while_legal(std::vector<int> start, const std::vector<int> &order, const Legal &legal,
                                 const std::function<void(int, const std::string &)> &refused = nullptr) {
  for (int p : order) {
    std::vector<int> with = start;
    with.push_back(p);
    if (Status ok = legal(with)) start = std::move(with);
    else if (refused) refused(p, ok.error().message);
  }
  return start;
}

/** Marks a move left out for its groups in the model (model_ratio, model_apart_ms, model_merged_ms). */
void left_out_slower(MoveReport &r) {
  char why[200];
  std::snprintf(why, sizeof why, "left out: not faster in the model (%.4f ms merged against %.4f ms apart, median ratio %.3f)", r.model_merged_ms,
                r.model_apart_ms, r.model_ratio);
  r.chosen = false, r.why_not = why;
}

/**
 * The moves judged in the model. Each move was measured as its kernels alone, where its inputs
 * sit in the cache as its own previous run left them; in the model they were just written by
 * other kernels, and the two disagree more often than not: on MobileNetV2 (Sapphire Rapids,
 * AVX-512, 2 threads) every projection chain applied at once ran 0.78-0.97 of FuseOps's pairs in
 * the model for 13 of 16, among them the 56x56 one at 0.777 that measured 1.006 alone and a 14x14
 * expansion at 0.814 that measured 1.008, while three measured 0.76-0.82 alone ran 1.02-1.10
 * there (docs/architecture.md, "The model decides"). So every move measured alone up to
 * `alone_limit` is judged in the model: the moves taken so far (`rep.chosen`, the best ratios
 * alone first, each legal with those before it) and, where that left moves out (`blocked`, their
 * producers, a
 * chain's consumer another chain joined first), those that are legal together, each set compiled
 * with default schedules and run alternately with FuseOps's partition. A move's groups there
 * against the groups it replaces give its gain; the moves that gain are taken, the largest gain
 * first, each where it is legal with those before (a move's gain: the median over the timings of
 * its groups' time over the replaced groups', times those groups' time). Then the partition is
 * timed again: a move slower there is left out (and the rest timed once more), and the partition
 * is kept only if it is faster end to end than FuseOps's.
 */
Status check_in_model(const Graph &fused, const std::vector<PartitionMove> &moves, const PartitionSearchOptions &o, PartitionReport &rep,
                      const std::vector<int> &blocked, const Legal &legal) {
  CompileOptions co;
  co.threads = o.measure.threads, co.cache_dir = o.cache_dir, co.target = o.target;
  // Not the first model this process compiles, and each side twice, in both orders: two compiles
  // of one plan run about 1% apart, the later one mostly faster (docs/architecture.md, "Runtime").
  AT_ASSIGN(compiled_first, CompiledModel::compile(fused, co));
  AT_ASSIGN(base, CompiledModel::compile(fused, co));
  auto inputs = random_inputs(fused, 0);
  auto report_of = [&](int producer) -> MoveReport & { return report_for(rep.moves, producer); };
  rep.checked = true;
  // Times partition `set` against FuseOps's; each move of it whose consumers no other move of it
  // joined gets its groups' medians there (model_apart_ms, model_merged_ms) and the median of the
  // timings' ratios (model_ratio), and `judged` says so.
  std::set<int> judged;
  auto judge = [&](const std::vector<int> &set) -> Status {
    AT_ASSIGN(g, apply_partition(fused, partition_json(set)));
    AT_ASSIGN(m, CompiledModel::compile(g, co));
    AT_ASSIGN(m2, CompiledModel::compile(g, co));
    AT_ASSIGN(base2, CompiledModel::compile(fused, co));
    // Both orders, several timings (Alternated): one timing with FuseOps's partition first in every
    // round refused MobileNetV2's 56x56 chain, whose groups took 0.303 against 0.369 ms in that
    // same timing, by 5.616 against 5.575 ms end to end (Sapphire Rapids, 2026-11-29).
    AT_ASSIGN(t, alternate(*base, *m, inputs, o.model_rounds, std::max(4, o.model_timings), base2.get(), m2.get()));
    std::vector<double> a_ms, b_ms;
    for (const Alternated::Round &r : t.rounds)
      a_ms.push_back(r.a_ms), b_ms.push_back(r.b_ms), rep.check_handoff_ns = std::max(rep.check_handoff_ns, r.handoff_ns);
    rep.fuseops_ms = median(a_ms), rep.searched_ms = median(b_ms), rep.check_ratio = median(t.ratios());
    std::vector<double> fuseops_group_ms = t.group_ms(false), searched_group_ms = t.group_ms(true);
    // A FuseOps group's index in the searched model: the producers removed before it shift it.
    auto moved_index = [&](int i) { return i - static_cast<int>(std::count_if(set.begin(), set.end(), [&](int p) { return p < i; })); };
    std::set<int> producers(set.begin(), set.end());
    for (int p : set) {
      const PartitionMove &mv = *std::find_if(moves.begin(), moves.end(), [&](const PartitionMove &x) { return x.producer == p; });
      // A consumer that is itself a producer of the set went into a group of another move: the
      // two are judged together end to end only.
      if (std::any_of(mv.consumers.begin(), mv.consumers.end(), [&](int c) { return producers.count(c) > 0; })) continue;
      double apart = fuseops_group_ms[p], merged = 0;
      for (int c : mv.consumers) apart += fuseops_group_ms[c], merged += searched_group_ms[moved_index(c)];
      std::vector<double> ratios;
      for (const Alternated::Round &rd : t.rounds) {
        double a = rd.a_group_ms[p], b = 0;
        for (int c : mv.consumers) a += rd.a_group_ms[c], b += rd.b_group_ms[moved_index(c)];
        if (a > 0) ratios.push_back(b / a);
      }
      MoveReport &r = report_of(p);
      r.model_apart_ms = apart, r.model_merged_ms = merged, r.model_ratio = median(ratios);
      judged.insert(p);
    }
    return Status::ok();
  };
  // The sets: the moves taken, then those they kept out that are legal together.
  std::vector<int> first = rep.chosen;
  std::vector<int> second = add_while_legal({}, blocked, legal);
  AT_TRY(judge(first));
  if (!second.empty()) AT_TRY(judge(second));
  std::vector<int> chosen = take_by_model_gain({judged.begin(), judged.end()}, rep.moves, legal);
  // A move judged only together with another stays where it is legal.
  std::vector<int> together;
  for (int p : first)
    if (!judged.count(p)) together.push_back(p);
  chosen = add_while_legal(chosen, together, legal, [&](int p, const std::string &) {
    report_of(p).chosen = false, report_of(p).why_not = "left out: a move that gains in the model joins its groups";
  });
  std::sort(chosen.begin(), chosen.end());
  rep.chosen = chosen;
  // The partition timed as it is: a move slower there now is left out, and the rest timed again.
  for (int pass = 0; pass < 2 && !rep.chosen.empty(); ++pass) {
    judged.clear();
    AT_TRY(judge(rep.chosen));
    std::vector<int> keep;
    for (int p : rep.chosen) {
      MoveReport &r = report_of(p);
      if (!judged.count(p) || r.model_ratio <= 1) keep.push_back(p);
      else left_out_slower(r);
    }
    if (keep == rep.chosen) break;
    rep.chosen = keep;
  }
  if (!rep.chosen.empty() && rep.check_ratio >= 1) {
    char why[200];
    std::snprintf(why, sizeof why, "left out: the searched partition was not faster end to end (%.4f ms against FuseOps's %.4f, median ratio %.3f)",
                  rep.searched_ms, rep.fuseops_ms, rep.check_ratio);
    for (int p : rep.chosen) {
      MoveReport &r = report_of(p);
      r.chosen = false, r.why_not = why;
    }
    rep.chosen.clear();
  }
  return Status::ok();
}

}  // namespace

std::vector<int> take_by_model_gain(const std::vector<int> &judged, std::vector<MoveReport> &moves,
                                    const std::function<Status(const std::vector<int> &)> &legal) {
  auto report_of = [&](int producer) -> MoveReport & { return report_for(moves, producer); };
  std::vector<int> gaining;
  for (int p : judged) {
    MoveReport &r = report_of(p);
    if (r.model_ratio < 1) gaining.push_back(p);
    else left_out_slower(r);
  }
  std::stable_sort(gaining.begin(), gaining.end(), [&](int a, int b) {
    const MoveReport &x = report_of(a), &y = report_of(b);
    return (1 - x.model_ratio) * x.model_apart_ms > (1 - y.model_ratio) * y.model_apart_ms;
  });
  std::vector<int> chosen = add_while_legal({}, gaining, legal, [&](int p, const std::string &why) {
    report_of(p).chosen = false, report_of(p).why_not = "left out: a move that gains more in the model joins its groups (" + why + ")";
  });
  for (int p : chosen) report_of(p).chosen = true, report_of(p).why_not.clear();
  return chosen;
}

Expected<PartitionReport> search_partition(const Graph &fused, const PartitionSearchOptions &o) {
  AT_TRY(o.measure.validate());
  // The database first: a file that is not one fails before anything is measured.
  std::unique_ptr<TuningDb> db;
  if (!o.db_path.empty()) {
    AT_ASSIGN(opened, TuningDb::open(o.db_path));
    db = std::move(opened);
  }
  AT_ASSIGN(jit, Jit::create({o.cache_dir, o.target}));
  PartitionReport rep;
  rep.target = jit->target().key(o.measure.threads);
  rep.model_hash = model_hash(fused);
  Measurer measurer(*jit, o.measure);
  // Each group body's default schedule, made once: a chain's lowers and replays its joined nests,
  // and a move's kernels are timed every round, estimated, and checked to lower.
  std::map<std::string, KernelSchedule> defaults;
  auto default_of = [&](const Graph &body) -> const KernelSchedule & {
    std::string h = workload_hash(body);
    auto it = defaults.find(h);
    if (it == defaults.end()) it = defaults.emplace(h, default_schedule(body, jit->target())).first;
    return it->second;
  };
  // The default kernel's median of one group (node `node` of fused graph `g`), measured once per
  // round (the fastest round counts), after the groups that write its inputs in `g` ran their
  // default kernels (MeasureOptions::producers): apart, a consumer reads what the move's producer
  // just wrote, split over the cores as that kernel splits it, as in the model; merged, it reads
  // what the producer's own producers wrote. `handoff` keeps the largest thread hand-off around
  // the timings.
  // `data` is the group's seeded inputs, reference output and producers (data_of), made once per
  // move and reused by every round.
  auto data_of = [&](const Graph &g, size_t node) -> Expected<TaskData> {
    AT_ASSIGN(data, TaskData::make(*g.nodes[node].body, 1));
    data.add_producers(group_producers(g, node), 2);
    return data;
  };
  auto time_of = [&](const Graph &g, size_t node, const TaskData &data, std::string &error, double &handoff, int &producers) -> double {
    const Graph &body = *g.nodes[node].body;
    auto r = measurer.measure(body, data, {default_of(body)}, nullptr, o.stop);
    if (r.empty()) return error = "stopped", 0.0;
    if (r[0].status != MeasureStatus::kOk) return error = std::string(status_name(r[0].status)) + ": " + r[0].error, 0.0;
    handoff = std::max(handoff, r[0].handoff_ns);
    producers += r[0].producers;
    return r[0].median_s;
  };
  // The cost model's view of a kernel apart from its time: the bytes it touches (every buffer's
  // touched bytes once: what it must move at least) and its float operations (recomputation
  // shows here), from the features of its default schedule's loop IR.
  const std::vector<std::string> &names = feature_names();
  auto feature = [&](const std::string &name) { return std::find(names.begin(), names.end(), name) - names.begin(); };
  size_t f_flops = feature("log2 flops"), f_bytes = feature("log2 compulsory bytes");
  auto estimate = [&](const Graph &body, double &bytes, double &flops) {
    auto k = lower_group(body, "estimate", default_of(body));
    if (!k) return;
    std::vector<float> v = kernel_features(*k, jit->target());
    bytes += std::exp2(v[f_bytes]);
    flops += std::exp2(v[f_flops]);
  };
  std::vector<PartitionMove> moves = partition_moves(fused, o.max_copies);
  // A chain is measured where the chain or expand tile sketch fits it (its default is the sketch's
  // list: the producer's result a local box per block); elsewhere its default runs the segments one
  // after another, the kernels apart with the same traffic, so it is not measured unless asked.
  std::vector<std::string> unfit(moves.size());
  for (size_t i = 0; i < moves.size(); ++i) {
    const PartitionMove &m = moves[i];
    if (m.kind != PartitionMove::kChain || !m.why_not.empty() || o.chains) continue;
    auto merged = apply_move(fused, m.producer, o.max_copies);
    if (merged && default_of(*merged->nodes[m.consumers[0] - 1].body).steps.empty())
      unfit[i] = "not measured: no chain tile fits it (a depthwise conv before a 1x1 conv on pixel lanes, or a 1x1 conv before a stride-1 "
                 "depthwise conv of 14x14 or more), and its segments one after another are the kernels apart";
  }
  // The moves measured: what progress counts.
  auto measurable = [&](size_t i) { return moves[i].why_not.empty() && unfit[i].empty(); };
  size_t to_measure = 0, measuring = 0;
  for (size_t i = 0; i < moves.size(); ++i) to_measure += measurable(i);
  // A move whose kernels apart and merged are those of a move measured before (a transformer's 12
  // identical layers) takes that measurement: the same kernels, timed again, say nothing new.
  std::map<std::string, size_t> measured_kernels;
  for (size_t mi = 0; mi < moves.size(); ++mi) {
    const PartitionMove &mv = moves[mi];
    if (o.stop && o.stop->load()) break;
    MoveReport r;
    r.move = move_name(mv);
    r.producer = mv.producer;
    r.kind = mv.kind == PartitionMove::kChain ? "chain" : "prologue";
    r.ops = group_ops(*fused.nodes[mv.producer].body);
    for (size_t k = 0; k < mv.consumers.size(); ++k)
      r.ops += std::string(k ? ", " : " -> ") + group_ops(*fused.nodes[mv.consumers[k]].body);
    r.why_not = mv.why_not.empty() ? unfit[mi] : mv.why_not;
    r.bytes_saved = 2.0 * static_cast<double>(fused.nodes[mv.producer].type.numel()) * 4;  // written once, read back once
    if (r.why_not.empty()) {
      auto merged = apply_move(fused, mv.producer, o.max_copies);
      if (!merged) {
        r.why_not = merged.error().message;
      } else {
        // Apart: the producer's kernel and each consumer's; merged: each consumer's new kernel (one
        // node earlier, the producer's node having gone).
        std::vector<size_t> apart_nodes{static_cast<size_t>(mv.producer)}, together_nodes;
        for (int c : mv.consumers) apart_nodes.push_back(static_cast<size_t>(c)), together_nodes.push_back(static_cast<size_t>(c - 1));
        std::string kernels;
        // With their producers: the kernels that run before each timed run are part of what is measured.
        auto key_of = [&](const Graph &g, size_t node) {
          std::string k = workload_hash(*g.nodes[node].body) + "(";
          if (o.measure.producers)
            for (const GroupProducer &p : group_producers(g, node)) k += workload_hash(p.body) + ":" + std::to_string(p.writes) + " ";
          return k + "),";
        };
        for (size_t n : apart_nodes) kernels += key_of(fused, n);
        kernels += "->";
        for (size_t n : together_nodes) kernels += key_of(*merged, n);
        if (auto seen = measured_kernels.find(kernels); seen != measured_kernels.end()) {
          const MoveReport &s = rep.moves[seen->second];
          r.apart_s = s.apart_s, r.merged_s = s.merged_s, r.ratio = s.ratio, r.measured = s.measured, r.chosen = s.chosen;
          r.bytes_apart = s.bytes_apart, r.bytes_merged = s.bytes_merged, r.flops_apart = s.flops_apart, r.flops_merged = s.flops_merged;
          r.why_not = s.why_not, r.same_as = s.move, r.handoff_ns = s.handoff_ns;
          r.producers_apart = s.producers_apart, r.producers_merged = s.producers_merged;
        } else {
          measured_kernels[kernels] = rep.moves.size();
          for (size_t n : apart_nodes) estimate(*fused.nodes[n].body, r.bytes_apart, r.flops_apart);
          for (size_t n : together_nodes) estimate(*merged->nodes[n].body, r.bytes_merged, r.flops_merged);
          // Each round times the kernels apart and then merged, back to back, and judges the move by
          // that round's ratio: a load spike on the shared host then moves both sides of a ratio.
          // The move is taken on the median ratio; the times reported are each side's fastest round.
          std::vector<double> ratios;
          r.apart_s = r.merged_s = INFINITY;
          std::vector<TaskData> apart_data, together_data;
          auto make_data = [&](const Graph &g, const std::vector<size_t> &nodes, std::vector<TaskData> &out) {
            for (size_t n : nodes) {
              if (!r.why_not.empty()) return;
              auto d = data_of(g, n);
              if (!d) r.why_not = d.error().message;
              else out.push_back(d.take());
            }
          };
          make_data(fused, apart_nodes, apart_data);
          make_data(*merged, together_nodes, together_data);
          for (int round = 0; round < std::max(1, o.rounds) && r.why_not.empty(); ++round) {
            double a = 0, t = 0;
            r.producers_apart = r.producers_merged = 0;
            for (size_t k = 0; k < apart_nodes.size() && r.why_not.empty(); ++k)
              a += time_of(fused, apart_nodes[k], apart_data[k], r.why_not, r.handoff_ns, r.producers_apart);
            for (size_t k = 0; k < together_nodes.size() && r.why_not.empty(); ++k)
              t += time_of(*merged, together_nodes[k], together_data[k], r.why_not, r.handoff_ns, r.producers_merged);
            if (!r.why_not.empty()) break;
            ratios.push_back(t / a);
            r.apart_s = std::min(r.apart_s, a), r.merged_s = std::min(r.merged_s, t);
          }
          r.measured = r.why_not.empty();
          if (r.measured) r.ratio = median(ratios);
          // With the check in the model, every move measured up to alone_limit is judged there.
          r.chosen = r.measured && r.ratio < (o.model_rounds > 0 ? o.alone_limit : 1 - o.min_gain);
        }
      }
    }

    if (o.progress && measurable(mi)) {
      ++measuring;
      char line[256];
      if (r.measured)
        std::snprintf(line, sizeof line, "partition [%zu/%zu] %s %s: apart %.4f ms, merged %.4f ms (median ratio %.3f; hand-off up to %.0f ns)%s%s%s",
                      measuring, to_measure, r.move.c_str(), r.ops.c_str(), r.apart_s * 1e3, r.merged_s * 1e3, r.ratio, r.handoff_ns, r.chosen ? (o.model_rounds > 0 ? ", to be judged in the model" : ", taken") : "",
                      r.same_as.empty() ? "" : "; the kernels of ", r.same_as.c_str());
      else
        std::snprintf(line, sizeof line, "partition [%zu/%zu] %s %s: not measured (%s)", measuring, to_measure, r.move.c_str(), r.ops.c_str(),
                      r.why_not.c_str());
      o.progress(line);
    }
    rep.moves.push_back(std::move(r));
  }
  if (o.stop && o.stop->load()) return make_error("partition search interrupted; nothing saved");
  // The candidates (the winners, without the check in the model), the best ratio alone first, each
  // kept only where the ones before leave it legal (a chain's consumer that another chain already
  // joined is not extended); the check in the model judges those left out too.
  std::vector<size_t> order;
  for (size_t i = 0; i < rep.moves.size(); ++i)
    if (rep.moves[i].chosen) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return rep.moves[a].ratio < rep.moves[b].ratio;
  });
  // A move measured alone may meet another in one group (two prologues of one conv): every group
  // the partition makes must still lower with its default schedule, or the move is left out (a
  // deploy would otherwise run that group on the reference executor).
  std::set<std::string> lowers;
  for (const Node &n : fused.nodes) lowers.insert(workload_hash(*n.body));
  auto all_lower = [&](const Graph &g) -> Status {
    for (const Node &n : g.nodes) {
      std::string h = workload_hash(*n.body);
      if (lowers.count(h)) continue;
      auto k = lower_group(*n.body, "check", default_of(*n.body));
      if (!k) return make_error(group_ops(*n.body) + " does not lower: " + k.error().message);
      lowers.insert(h);
    }
    return Status::ok();
  };
  auto legal = [&](const std::vector<int> &with) -> Status {
    AT_ASSIGN(g, apply_partition(fused, partition_json(with)));
    return all_lower(g);
  };
  std::vector<int> blocked;  // producers, best first
  std::vector<int> producers;
  for (size_t i : order) producers.push_back(rep.moves[i].producer);
  rep.chosen = add_while_legal(rep.chosen, producers, legal, [&](int p, const std::string &why) {
    MoveReport &r = report_for(rep.moves, p);
    r.chosen = false, r.why_not = "left out: " + why;
    blocked.push_back(p);
  });
  if (!rep.chosen.empty() && o.model_rounds > 0 && !(o.stop && o.stop->load())) AT_TRY(check_in_model(fused, moves, o, rep, blocked, legal));
  if (db) AT_TRY(db->save_partition(rep.model_hash, rep.target, partition_json(rep.chosen), rep.json()));
  return rep;
}

}  // namespace autotune
