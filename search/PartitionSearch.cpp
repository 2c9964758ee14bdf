#include "search/PartitionSearch.h"

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "codegen/Jit.h"
#include "db/TuningDb.h"
#include "db/Workload.h"
#include "ir/Partition.h"
#include "runtime/Runtime.h"
#include "search/Tuner.h"

namespace autotune {

std::string PartitionReport::json() const {
  nlohmann::json moves_j = nlohmann::json::array();
  for (const MoveReport &m : moves)
    moves_j.push_back({{"move", m.move}, {"ops", m.ops}, {"apart_ms", m.apart_s * 1e3}, {"merged_ms", m.merged_s * 1e3},
                       {"bytes_saved", m.bytes_saved}, {"chosen", m.chosen}, {"why_not", m.why_not}});
  return nlohmann::json{{"target", target}, {"model_hash", model_hash}, {"moves", moves_j}}.dump();
}

Expected<PartitionReport> search_partition(const Graph &fused, const PartitionSearchOptions &o) {
  AT_TRY(o.measure.validate());
  AT_ASSIGN(jit, Jit::create({o.cache_dir, o.target}));
  PartitionReport rep;
  rep.target = tuning_key(*jit, o.measure.threads);
  rep.model_hash = model_hash(fused);
  Measurer measurer(*jit, o.measure);
  // The default kernel's median of one group body, measured once per round (the fastest round counts).
  auto time_of = [&](const Graph &body, std::string &error) -> double {
    auto data = TaskData::make(body, 1);
    if (!data) return error = data.error().message, 0.0;
    auto r = measurer.measure(body, *data, {default_schedule(body, jit->target())}, nullptr, o.stop);
    if (r.empty()) return error = "stopped", 0.0;
    if (r[0].status != MeasureStatus::kOk) return error = std::string(status_name(r[0].status)) + ": " + r[0].error, 0.0;
    return r[0].median_s;
  };
  std::vector<PrologueMove> moves = prologue_moves(fused, o.max_copies);
  for (size_t mi = 0; mi < moves.size(); ++mi) {
    const PrologueMove &mv = moves[mi];
    if (o.stop && o.stop->load()) break;
    MoveReport r;
    r.move = move_name(mv);
    r.producer = mv.producer;
    r.ops = group_ops(*fused.nodes[mv.producer].body);
    for (size_t k = 0; k < mv.consumers.size(); ++k)
      r.ops += std::string(k ? ", " : " -> ") + group_ops(*fused.nodes[mv.consumers[k]].body);
    r.why_not = mv.why_not;
    r.bytes_saved = 2.0 * static_cast<double>(fused.nodes[mv.producer].type.numel()) * 4;  // written once, read back once
    if (r.why_not.empty()) {
      auto merged = apply_prologue(fused, mv.producer, o.max_copies);
      if (!merged) {
        r.why_not = merged.error().message;
      } else {
        // Apart: the producer's kernel and each consumer's; merged: each consumer's new kernel (one
        // node earlier, the producer's node having gone).
        std::vector<const Graph *> apart{fused.nodes[mv.producer].body.get()}, together;
        for (int c : mv.consumers) apart.push_back(fused.nodes[c].body.get()), together.push_back(merged->nodes[c - 1].body.get());
        std::vector<double> a(apart.size(), 0), t(together.size(), 0);
        for (int round = 0; round < std::max(1, o.rounds) && r.why_not.empty(); ++round) {
          for (size_t k = 0; k < apart.size() && r.why_not.empty(); ++k) {
            double s = time_of(*apart[k], r.why_not);
            a[k] = round ? std::min(a[k], s) : s;
          }
          for (size_t k = 0; k < together.size() && r.why_not.empty(); ++k) {
            double s = time_of(*together[k], r.why_not);
            t[k] = round ? std::min(t[k], s) : s;
          }
        }
        for (double x : a) r.apart_s += x;
        for (double x : t) r.merged_s += x;
        r.chosen = r.why_not.empty() && r.merged_s < r.apart_s * (1 - o.min_gain);
      }
    }
    if (r.chosen) rep.chosen.push_back(mv.producer);
    if (o.progress) {
      char line[256];
      if (r.why_not.empty())
        std::snprintf(line, sizeof line, "partition [%zu/%zu] %s %s: apart %.4f ms, merged %.4f ms%s", mi + 1, moves.size(), r.move.c_str(),
                      r.ops.c_str(), r.apart_s * 1e3, r.merged_s * 1e3, r.chosen ? ", taken" : "");
      else
        std::snprintf(line, sizeof line, "partition [%zu/%zu] %s %s: not tried (%s)", mi + 1, moves.size(), r.move.c_str(), r.ops.c_str(),
                      r.why_not.c_str());
      o.progress(line);
    }
    rep.moves.push_back(std::move(r));
  }
  if (o.stop && o.stop->load()) return make_error("partition search interrupted; nothing saved");
  if (!o.db_path.empty()) {
    AT_ASSIGN(db, TuningDb::open(o.db_path));
    AT_TRY(db->save_partition(rep.model_hash, rep.target, partition_json(rep.chosen), rep.json()));
  }
  return rep;
}

}  // namespace autotune
