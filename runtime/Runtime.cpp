#include "runtime/Runtime.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>

#include "codegen/Schedule.h"
#include "codegen/ThreadRows.h"
#include "db/TuningDb.h"
#include "db/Workload.h"
#include "ir/OnnxImport.h"
#include "ir/Partition.h"
#include "ir/Reference.h"

namespace autotune {

std::vector<int> last_uses(const Graph &g) {
  std::vector<int> last(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    last[i] = static_cast<int>(i);
    for (ValueId v : g.nodes[i].inputs)
      if (v.kind == ValueId::Kind::kNode) last[v.index] = static_cast<int>(i);
  }
  return last;
}

MemoryPlan plan_memory(const std::vector<size_t> &bytes, const std::vector<std::pair<int, int>> &lifetimes) {
  // Greedy by size (largest first): each buffer takes the lowest offset that overlaps no buffer
  // already placed whose lifetime overlaps its own.
  std::vector<size_t> order(bytes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return bytes[a] > bytes[b]; });
  MemoryPlan plan;
  plan.offsets.assign(bytes.size(), 0);
  std::vector<size_t> placed;
  for (size_t i : order) {
    size_t size = (bytes[i] + 63) / 64 * 64;
    std::vector<std::pair<size_t, size_t>> busy;  // address ranges of live, placed buffers
    for (size_t j : placed)
      if (lifetimes[j].first <= lifetimes[i].second && lifetimes[i].first <= lifetimes[j].second)
        busy.emplace_back(plan.offsets[j], plan.offsets[j] + (bytes[j] + 63) / 64 * 64);
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (const auto &[b, e] : busy) {
      if (offset + size <= b) break;
      offset = std::max(offset, e);
    }
    plan.offsets[i] = offset;
    plan.total = std::max(plan.total, offset + size);
    placed.push_back(i);
  }
  return plan;
}

std::string group_ops(const Graph &body) {
  std::string s;
  for (const Node &n : body.nodes) s += (s.empty() ? "" : "+") + n.op;
  return s;
}

double group_flops(const Graph &body) {
  double f = 0;
  for (const Node &n : body.nodes) {
    const Shape &o = n.type.shape;
    if (n.op == "nn.conv2d" || n.op == "nn.conv2d_nchwc") {
      const Shape &w = body.type_of(n.inputs[1]).shape;
      f += 2.0 * static_cast<double>(n.type.numel()) * static_cast<double>(w[1] * w[2] * w[3]);
    } else if (n.op == "nn.dense" || n.op == "nn.matmul") {
      const Shape &a = body.type_of(n.inputs[0]).shape;
      f += 2.0 * static_cast<double>(n.type.numel()) * static_cast<double>(a.back());
    } else {
      f += static_cast<double>(TensorType{DType::kFloat32, o}.numel());
    }
  }
  return f;
}

namespace {

/** Where a value lives while the model runs. */
struct Loc {
  enum Kind { kInput, kConstant, kArena, kOutput } kind = kArena;
  int index = 0;      // input, constant or output slot
  size_t offset = 0;  // arena
};

struct Exec {
  int node = 0;
  bool compiled = false;
  CompiledKernel kernel;
  std::vector<int64_t> extents;  // each stage's parallel extent
  std::vector<Loc> args;         // the group's arguments, in order
  std::vector<Tensor> packed;    // per argument: the packed weight, when the kernel wants one
  std::vector<WeightPacking> dynamic_packings;  // weights that are not constants: packed at each run
  std::vector<IndexCheck> index_checks;          // gather indices, checked before each run
  std::vector<size_t> temps;     // arena offsets of the kernel's temporaries
};

}  // namespace

struct CompiledModel::Impl {
  std::vector<Exec> execs;
  std::vector<Loc> node_loc;
  std::shared_ptr<uint8_t> arena;
  std::mutex run_mu;  // one run at a time: the arena is shared
};

CompiledModel::~CompiledModel() = default;

Expected<std::optional<Graph>> apply_saved_partition(const Graph &fused, TuningDb &db, const std::string &target, std::string *note) {
  AT_ASSIGN(saved, db.partition(model_hash(fused), target));
  if (!saved) {
    if (note) *note = "FuseOps's (none saved for this model)";
    return std::optional<Graph>();
  }
  auto moved = apply_partition(fused, *saved);
  if (!moved) return make_error(db.path() + ": the partition saved for this model does not apply: " + moved.error().message);
  if (note) {
    // A chain joins one group to the one that reads it (its anchor kept, placed per block of rows
    // where a chain tile fits); a prologue is recomputed in every group that reads it.
    size_t chains = std::count_if(moved->nodes.begin(), moved->nodes.end(), [](const Node &n) { return n.body && is_chain(*n.body); });
    size_t moves = fused.nodes.size() - moved->nodes.size();
    *note = "searched (the database's): " + std::to_string(moves - chains) + " groups recomputed in the groups that read them, " +
            std::to_string(chains) + " joined to the group that reads them";
  }
  return std::optional<Graph>(moved.take());
}

Expected<std::unique_ptr<CompiledModel>> CompiledModel::load(const std::string &onnx_path, CompileOptions options) {
  AT_ASSIGN(g, import_onnx_file(onnx_path));
  auto fused = lower_to_stage(g, Stage::kFused, options.passes);
  if (!fused) return make_error(onnx_path + ": " + fused.error().message);
  return compile(*fused, std::move(options));
}

Expected<std::unique_ptr<CompiledModel>> CompiledModel::compile(const Graph &input, CompileOptions options) {
  auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<CompiledModel> m(new CompiledModel());
  bool fused = !input.nodes.empty();
  for (const Node &n : input.nodes) fused &= n.is_function();
  if (fused) {
    m->graph_ = input;
  } else {
    AT_ASSIGN(f, run_passes(input, {"fuse-ops"}, PassContext{}));
    m->graph_ = std::move(f);
  }
  const Graph &g = m->graph_;
  m->pool_ = ThreadPool::shared(options.threads);
  AT_ASSIGN(jit, Jit::create({options.cache_dir, options.target}));
  m->jit_ = std::move(jit);
  m->impl_ = std::make_unique<Impl>();
  Impl &impl = *m->impl_;

  std::unique_ptr<TuningDb> db;
  std::string target = m->jit_->target().key(m->pool_->size());
  if (options.plan && options.db_path.empty())
    return make_error("a plan was given without the tuning database its records come from (CompileOptions::db_path)");
  if (!options.db_path.empty()) {
    AT_ASSIGN(opened, TuningDb::open(options.db_path, DbAccess::kReadOnly));  // a deploy never writes the database
    db = std::move(opened);
  }

  // Lower every group (with its tuned schedule where the database has one), then compile the
  // kernels in parallel. A plan the tuner saved for this model decides per group (it may keep a
  // default that was faster in the model); without one, each group takes its workload's best record.
  std::optional<std::vector<std::optional<TuningRecord>>> chosen;
  // A partition the tuner chose for this model (moves from FuseOps's, ir/Partition) replaces the
  // graph before anything is lowered; the plan below is then the one tuned for that partition.
  m->partition_ = "FuseOps's";
  if (db && options.fuseops_partition) m->partition_ = "FuseOps's (asked for)";
  if (db && !options.fuseops_partition) {
    AT_ASSIGN(moved, apply_saved_partition(g, *db, target, &m->partition_));
    if (moved) m->graph_ = std::move(*moved);
  }
  size_t n = g.nodes.size();
  if (options.plan) {  // with db_path, or refused above
    if (options.plan->size() != n)
      return make_error("a plan of " + std::to_string(options.plan->size()) + " groups given for a model of " + std::to_string(n));
    chosen = *options.plan;
  } else if (db) {
    AT_ASSIGN(p, db->plan(model_hash(g), target));
    if (p && p->size() == n) chosen = std::move(p);
  }
  // Each group's schedule: its tuned one, or its default. Then which split rows over the threads
  // instead of channels, chosen for the whole model so that each kernel reads what its own thread
  // wrote (codegen/ThreadRows): a default or a tuned step list that can take its rows (with_rows_split);
  // the other tuned schedules keep their split.
  std::vector<KernelSchedule> schedules;
  std::vector<std::optional<KernelSchedule>> split;
  std::vector<bool> fixed, rows_already;
  int threads = m->pool_->size();
  for (size_t i = 0; i < n; ++i) {
    const Node &node = g.nodes[i];
    GroupInfo info;
    info.name = "%" + std::to_string(i);
    info.ops = group_ops(*node.body);
    info.shape = shape_str(node.type.shape);
    info.flops = group_flops(*node.body);
    std::optional<KernelSchedule> schedule;
    if (db) {
      std::optional<TuningRecord> best;
      if (chosen) {
        best = (*chosen)[i];
      } else {
        AT_ASSIGN(b, db->best(workload_hash(*node.body), target));
        best = std::move(b);
      }
      if (!best) {
        info.untuned_reason = chosen ? "the model's plan keeps the default schedule" : "no record for this workload on " + target;
      } else if (auto s = schedule_from_json(best->schedule); !s) {
        info.untuned_reason = "record " + std::to_string(best->id) + ": " + s.error().message;
      } else if (auto v = validate_schedule(*node.body, *s); !v) {
        info.untuned_reason = "record " + std::to_string(best->id) + ": " + v.error().message;
      } else {
        schedule = *s;
        info.tuned = true;
      }
    }
    schedules.push_back(schedule ? *schedule : default_schedule(*node.body, m->jit_->target()));
    rows_already.push_back(splits_rows(*node.body, schedules.back()));
    // A tuned list's split is tried now (the cut must know whether it can move); a default's when
    // the cut moves it (can_split_rows says it can).
    split.push_back(schedule && options.split_rows && !rows_already.back() ? with_rows_split(*node.body, *schedule, threads) : std::nullopt);
    fixed.push_back(schedule && !split.back());
    m->info_.push_back(info);
  }
  std::vector<bool> rows = options.split_rows ? rows_by_thread(g, threads, rows_already, fixed) : rows_already;
  std::vector<Expected<LoweredKernel>> lowered;
  for (size_t i = 0; i < n; ++i) {
    const Node &node = g.nodes[i];
    if (rows[i] && !rows_already[i]) schedules[i] = split[i] ? *split[i] : default_schedule(*node.body, m->jit_->target(), threads);
    m->info_[i].split_rows = splits_rows(*node.body, schedules[i]);
    lowered.push_back(lower_group(*node.body, kernel_name(*node.body), schedules[i]));
  }
  std::vector<Expected<CompiledKernel>> compiled(n, Expected<CompiledKernel>(make_error("not compiled")));
  for_each_index(n, m->pool_->size(), [&](size_t i) {
    if (lowered[i]) compiled[i] = m->jit_->compile(*lowered[i]);
  });

  // Where values live: graph outputs in the caller's tensors, the rest in one planned arena.
  impl.node_loc.assign(n, Loc{});
  for (size_t k = 0; k < g.outputs.size(); ++k)
    if (g.outputs[k].kind == ValueId::Kind::kNode && impl.node_loc[g.outputs[k].index].kind != Loc::kOutput)
      impl.node_loc[g.outputs[k].index] = {Loc::kOutput, static_cast<int>(k), 0};
  std::vector<int> last_use = last_uses(g);
  std::vector<size_t> bytes;
  std::vector<std::pair<int, int>> lifetimes;
  std::vector<std::pair<int, int>> owner;  // (node, -1) for a value, (node, temp k) for a kernel temporary
  for (size_t i = 0; i < n; ++i) {
    if (impl.node_loc[i].kind == Loc::kArena) {
      bytes.push_back(g.nodes[i].type.nbytes());  // int64 values cross groups too
      lifetimes.emplace_back(static_cast<int>(i), last_use[i]);
      owner.emplace_back(static_cast<int>(i), -1);
    }
    if (!lowered[i] || !compiled[i]) continue;
    for (size_t b = lowered[i]->num_params + 1; b < lowered[i]->buffers.size(); ++b) {
      bytes.push_back(lowered[i]->buffers[b]->bytes());
      m->info_[i].temp_bytes += bytes.back();
      lifetimes.emplace_back(static_cast<int>(i), static_cast<int>(i));
      owner.emplace_back(static_cast<int>(i), static_cast<int>(b));
    }
  }
  MemoryPlan plan = plan_memory(bytes, lifetimes);
  m->arena_bytes_ = plan.total;
  AT_TRY(check_allocation(plan.total, "the activations"));
  // In huge pages where the kernel grants them (ir/Tensor's zeroed_buffer): fewer TLB misses
  // (docs/architecture.md, "Runtime").
  impl.arena = zeroed_buffer(plan.total);
  if (!impl.arena) return make_error("cannot allocate " + format_bytes(static_cast<double>(plan.total)) + " of activations");

  impl.execs.resize(n);
  for (size_t j = 0; j < owner.size(); ++j)
    if (owner[j].second < 0) impl.node_loc[owner[j].first].offset = plan.offsets[j];
    else impl.execs[owner[j].first].temps.push_back(plan.offsets[j]);

  for (size_t i = 0; i < n; ++i) {
    Exec &e = impl.execs[i];
    e.node = static_cast<int>(i);
    const Node &node = g.nodes[i];
    for (ValueId v : node.inputs) {
      if (v.kind == ValueId::Kind::kInput) e.args.push_back({Loc::kInput, v.index, 0});
      else if (v.kind == ValueId::Kind::kConstant) e.args.push_back({Loc::kConstant, v.index, 0});
      else e.args.push_back(impl.node_loc[v.index]);
    }
    e.packed.resize(node.inputs.size());
    GroupInfo &info = m->info_[i];
    std::string why = !lowered[i] ? lowered[i].error().message : !compiled[i] ? compiled[i].error().message : "";
    if (why.empty()) {
      for (const WeightPacking &p : lowered[i]->packings) {
        ValueId w = node.inputs[p.param];
        if (w.kind == ValueId::Kind::kConstant) e.packed[p.param] = pack_weight(g.constants[w.index].value, p);
        else e.dynamic_packings.push_back(p);  // computed by the graph: packed at each run
      }
    }
    if (!why.empty()) {
      info.fallback = why;
      info.schedule = "reference executor";
      continue;
    }
    e.compiled = true;
    e.kernel = compiled[i].take();
    e.index_checks = lowered[i]->index_checks;
    for (const KernelStage &s : lowered[i]->stages) e.extents.push_back(s.parallel_extent);
    info.schedule = (info.tuned ? "tuned: " : "") + lowered[i]->schedule;
    if (e.kernel.from_cache) ++m->kernels_cached_;
    else ++m->kernels_compiled_;
  }
  m->compile_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

int CompiledModel::tuned_groups() const {
  int n = 0;
  for (const GroupInfo &g : info_) n += g.tuned && g.fallback.empty();
  return n;
}

Expected<std::vector<Tensor>> CompiledModel::run(const std::vector<Tensor> &inputs, std::vector<double> *group_ms) {
  AT_TRY(check_inputs(graph_, inputs));
  std::lock_guard<std::mutex> lock(impl_->run_mu);
  const Graph &g = graph_;
  std::vector<Tensor> outs;
  for (ValueId v : g.outputs) outs.emplace_back(g.type_of(v));
  uint8_t *arena = impl_->arena.get();
  auto ptr = [&](const Loc &l) -> void * {
    switch (l.kind) {
      case Loc::kInput: return const_cast<void *>(inputs[l.index].raw());
      case Loc::kConstant: return const_cast<void *>(g.constants[l.index].value.raw());
      case Loc::kArena: return arena + l.offset;
      case Loc::kOutput: return outs[l.index].raw();
    }
    return nullptr;
  };
  if (group_ms) group_ms->assign(impl_->execs.size(), 0.0);
  std::vector<void *> bufs;
  for (Exec &e : impl_->execs) {
    auto t0 = std::chrono::steady_clock::now();
    const Node &node = g.nodes[e.node];
    void *out = ptr(impl_->node_loc[e.node]);
    if (e.compiled) {
      for (const IndexCheck &c : e.index_checks) {
        const auto *idx = static_cast<const int64_t *>(ptr(e.args[c.param]));
        if (auto st = check_gather_indices(idx, g.type_of(node.inputs[c.param]).numel(), c.extent); !st)
          return make_error("group %" + std::to_string(e.node) + " (" + c.node + "): " + st.error().message);
      }
      for (const WeightPacking &p : e.dynamic_packings) {
        Tensor w(g.type_of(node.inputs[p.param]));
        std::memcpy(w.raw(), ptr(e.args[p.param]), w.nbytes());
        e.packed[p.param] = pack_weight(w, p);
      }
      bufs.clear();
      for (size_t a = 0; a < e.args.size(); ++a)
        bufs.push_back(e.packed[a].defined() && e.packed[a].numel() ? const_cast<void *>(e.packed[a].raw()) : ptr(e.args[a]));
      bufs.push_back(out);
      for (size_t off : e.temps) bufs.push_back(arena + off);
      for (size_t s = 0; s < e.kernel.stages.size(); ++s) {
        StageFn fn = e.kernel.stages[s];
        void **table = bufs.data();
        pool_->parallel_for(e.extents[s], [fn, table](int64_t b, int64_t end) { fn(table, b, end); });
      }
    } else {
      std::vector<Tensor> args;
      for (size_t a = 0; a < e.args.size(); ++a) {
        Tensor t(g.type_of(node.inputs[a]));
        std::memcpy(t.raw(), ptr(e.args[a]), t.nbytes());
        args.push_back(std::move(t));
      }
      auto r = eval_node(node, args);
      if (!r) return make_error("group %" + std::to_string(e.node) + ": " + r.error().message);
      std::memcpy(out, r->raw(), r->nbytes());
    }
    if (group_ms) (*group_ms)[e.node] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  // An output that is also produced for a second output slot of the same node is copied.
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    ValueId v = g.outputs[k];
    if (v.kind != ValueId::Kind::kNode) {
      const Tensor &src = v.kind == ValueId::Kind::kInput ? inputs[v.index] : g.constants[v.index].value;
      std::memcpy(outs[k].raw(), src.raw(), src.nbytes());
    } else if (impl_->node_loc[v.index].index != static_cast<int>(k)) {
      std::memcpy(outs[k].raw(), ptr(impl_->node_loc[v.index]), outs[k].nbytes());
    }
  }
  return outs;
}

}  // namespace autotune
