// autotune: the one CLI binary. Thin: it parses flags, calls the libraries, and turns their
// errors into one line on stderr and exit code 1.
#include <algorithm>
#include <filesystem>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <set>
#include <unistd.h>
#include <string>
#include <vector>

#include "ir/Npy.h"
#include "ir/OnnxImport.h"
#include "ir/Pass.h"
#include "ir/Printer.h"
#include "ir/Reference.h"
#include "ir/Stats.h"
#include "db/TuningDb.h"
#include "db/Workload.h"
#include "ir/Files.h"
#include "codegen/Gpu.h"
#include "codegen/Peak.h"
#include "costmodel/Dataset.h"
#include "costmodel/Features.h"
#include "costmodel/GpuFeatures.h"
#include "ir/Hash.h"
#include "search/GpuTuner.h"
#include "search/Task.h"
#include "runtime/Cuda.h"
#include "runtime/Runtime.h"
#include "runtime/Traffic.h"
#include "runtime/ThreadPool.h"
#include "ir/Partition.h"
#include "search/PartitionSearch.h"
#include "search/PlanCheck.h"
#include "search/Tuner.h"
#include "tools/Args.h"

#include <csignal>
#include <nlohmann/json.hpp>

namespace autotune::cli {
namespace {

const char *kUsage = R"(autotune: a cost-model-driven autotuner and benchmark harness for neural networks

Usage:
  autotune --model M.onnx --trials N [--db tuning.db] [--timeout S] [--seed K] [--config C.json]
                                                                    # the tuning job (also: autotune tune)
  autotune inspect --model M.onnx [--stage imported|optimized|fused] [--format text|dot|json] [pass options]
  autotune run     --model M.onnx [--input X.npy]... [--output Y.npy] [--executor compiled|reference]
  autotune bench   --model M.onnx [--runs N] [--warmup N] [--threads T] [--json] [--db D]
  autotune db      ls|best|export|import|merge --db D [...]
  autotune target  [--target host|avx2|avx512|FILE] [--json]       # what kernels are built for
  autotune compile --model M.onnx --target sm_80|sm_90|FILE --out DIR  # every group's PTX (no GPU needed)
  autotune costmodel eval --db D [--train-model M.onnx] [--json]    # the cost model's held-out accuracy
  autotune <command> --help

Examples:
  autotune --model resnet18.onnx --trials 200 --db t.db       # tune; Ctrl-C stops, rerun resumes
  autotune bench --model resnet18.onnx --db t.db              # latency with the tuned plans
  autotune inspect --model resnet18.onnx                      # the graph IR, Relay-style text
  autotune inspect --model resnet18.onnx --stage fused        # fused groups as primitive functions
  autotune inspect --model resnet18.onnx --stage fused --format dot | dot -Tsvg > resnet18.svg
  autotune run --model resnet18.onnx --output logits.npy      # seeded random input
  autotune bench --model resnet50.onnx --runs 50              # latency and per-group times
)";

const char *kPassOptions = R"(Pass options (inspect and run):
  --stage S            imported: as read from ONNX; optimized: after the graph passes
                       (infer-shapes, simplify, fold-constants, fold-batch-norm,
                       fuse-layer-norm, eliminate-common-subexpr, eliminate-dead-code,
                       nchwc-layout);
                       fused: then fuse-ops
  --opt-level N        run the passes whose opt level is <= N (default 3; TVM's levels:
                       fuse-ops 0, eliminate-dead-code 1, fold-constants 2,
                       eliminate-common-subexpr 3, nchwc-layout 3)
  --disable-pass P     never run pass P (repeatable; e.g. nchwc-layout: convs in NCHW)
  --print-after-all    print the IR after each pass to stderr
  --time-passes        print each pass's time to stderr
  --verify             run the reference executor before and after each pass on seeded
                       random inputs; report each pass's error on stderr and fail if a
                       pass changes the result beyond 1e-5 relative
)";

const char *kInspectHelp = R"(autotune inspect: import an ONNX model and print its graph IR

Usage:
  autotune inspect --model M.onnx [--stage imported|optimized|fused|planned] [--format text|dot|json]
                   [--db D] [--target T] [--threads N]
                   [--opt-level N] [--disable-pass P]... [--print-after-all] [--time-passes] [--verify]

Options:
  --model M.onnx   the model (ONNX opsets 1-17, static input shapes)
  --format F       text (default): Relay-style IR, read back by the parser; fused groups print
                   as primitive functions (fn)
                   dot: Graphviz, fused groups as clusters
                   json: nodes with op, inputs, attributes, output shape and dtype; at the
                   fused stage also "groups": [{"id", "ops", "pattern", "inputs", "outputs"}]
  --stage S        default: imported; planned: the fused groups of the partition the tuning
                   database --db saved for this model and target (FuseOps's where none is
                   saved), each move from FuseOps's listed on stderr
  --db D           the tuning database (--stage planned)
  --target T       with --stage planned: the target the partition was chosen for (default host)
  --threads N      with --stage planned: the thread count it was chosen for (default: all)

Examples:
  autotune inspect --model resnet18.onnx --format json > resnet18.json
  autotune inspect --model resnet50.onnx --stage fused --verify --time-passes
  autotune inspect --model effnet.onnx --stage planned --db t.db --format dot > planned.dot
)";

const char *kRunHelp = R"(autotune run: run a model on an input and write or summarize its output

Usage:
  autotune run --model M.onnx [--input X.npy]... [--output Y.npy] [--executor compiled|reference]
               [--seed K] [--threads T] [--stage imported|optimized|fused] [pass options]

Options:
  --model M.onnx     the model
  --input X.npy      one per model input, in order (float32, int64 or bool, C order, exact shape);
                     without it, a seeded random input of the model's input shape
  --output Y.npy     where to write the output (a model with several outputs writes
                     Y.npy, Y.1.npy, ...); without it, only the summary is printed
  --executor E       compiled (default): each fused group JIT-compiled with LLVM for this
                     CPU and run on a thread pool; reference: the plain float32 oracle
                     every compiled kernel is checked against
  --threads T        compiled executor threads (default: one per hardware thread)
  --db D             a tuning database: the model's tuned plan (each group's best record without one)
                     and the fusion partition the tuner chose for it
  --partition P      db (default): the database's partition for the model; fuseops: FuseOps's groups
  --thread-split S   model (default): the default schedules split rows or channels over the threads as
                     chosen for the whole model, so each kernel reads what its own thread wrote;
                     group: as each group's default alone (for comparison)
  --target T         compile for: host (default), avx2, avx512 or a JSON file ('autotune target');
                     a GPU (sm_80, sm_90): run on the machine's NVIDIA GPU through the CUDA driver
  --seed K           seed of the random input (default 0)
  --stage S          the graph the reference executor runs (default: optimized); the
                     compiled executor always runs the fused graph

Example:
  autotune run --model resnet18.onnx --input image.npy --output logits.npy
)";

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

/** The one place errors leave the tool: one printable line on stderr, exit code 1. */
int fail(const Error &e) {
  std::fprintf(stderr, "autotune: error: %s\n", printable(e.message).c_str());
  return 1;
}

std::string summary(const Tensor &t) {
  char buf[256];
  if (t.dtype() != DType::kFloat32 || t.numel() == 0) return type_str(t.type());
  double lo = INFINITY, hi = -INFINITY, sum = 0;
  int64_t arg = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = t.f32()[i];
    if (v > hi) hi = v, arg = i;
    lo = std::min(lo, v);
    sum += v;
  }
  std::snprintf(buf, sizeof buf, "%s  min %.6g  max %.6g  mean %.6g  argmax %lld", type_str(t.type()).c_str(), lo, hi,
                sum / static_cast<double>(t.numel()), static_cast<long long>(arg));
  return buf;
}

std::string output_path(const std::string &base, size_t i) {
  if (i == 0) return base;
  std::string stem = base.size() > 4 && base.substr(base.size() - 4) == ".npy" ? base.substr(0, base.size() - 4) : base;
  return stem + "." + std::to_string(i) + ".npy";
}

const std::set<std::string> kPassValueFlags = {"stage", "opt-level", "disable-pass"};
const std::set<std::string> kPassSwitches = {"print-after-all", "time-passes", "verify"};

FlagSpec with_pass_flags(FlagSpec spec) {
  spec.with_value.insert(kPassValueFlags.begin(), kPassValueFlags.end());
  spec.switches.insert(kPassSwitches.begin(), kPassSwitches.end());
  spec.repeatable.insert("disable-pass");
  return spec;
}

/** Imports the model and lowers it to the requested stage under the pass flags. */
Expected<Graph> load_graph(const Args &args, const std::string &default_stage, const std::string &stage_name = "") {
  AT_ASSIGN(stage, parse_stage(stage_name.empty() ? args.get("stage", default_stage) : stage_name));
  AT_ASSIGN(opt_level, args.get_int("opt-level", 3));
  AT_ASSIGN(g, import_onnx_file(args.get("model")));
  PassContext ctx;
  ctx.opt_level = static_cast<int>(opt_level);
  for (const std::string &p : args.all("disable-pass")) ctx.disabled.insert(p);
  if (args.has("print-after-all")) ctx.instruments.push_back(std::make_shared<PrintIRInstrument>(stderr));
  if (args.has("verify")) ctx.instruments.push_back(std::make_shared<VerifyInstrument>(0, 1e-5, stderr));
  auto timing = std::make_shared<TimingInstrument>();  // last: it times the pass alone
  if (args.has("time-passes")) ctx.instruments.push_back(timing);
  auto lowered = lower_to_stage(g, stage, ctx);
  if (!lowered) return make_error(args.get("model") + ": " + lowered.error().message);
  if (args.has("time-passes")) std::fprintf(stderr, "pass times:\n%s", timing->report().c_str());
  return lowered;
}

Expected<Target> target_from_flags(const Args &args);

int cmd_inspect(const std::vector<std::string> &argv) {
  auto args = Args::parse("inspect", argv, with_pass_flags({{"model", "format", "db", "target", "threads"}, {"help"}, {}}));
  if (!args) return fail(args.error());
  if (args->has("help")) return std::printf("%s\n%s", kInspectHelp, kPassOptions), 0;
  if (!args->has("model")) return fail(make_error("inspect: --model is required (see 'autotune inspect --help')"));
  std::string format = args->get("format", "text");
  if (format != "text" && format != "dot" && format != "json")
    return fail(make_error("inspect: --format must be text, dot or json, got '" + format + "'"));
  bool planned = args->get("stage") == "planned";
  if (planned && !args->has("db")) return fail(make_error("inspect: --stage planned needs --db (the tuning database)"));
  if (!planned && (args->has("db") || args->has("target") || args->has("threads")))
    return fail(make_error("inspect: --db, --target and --threads go with --stage planned"));
  auto g = load_graph(*args, "imported", planned ? "fused" : "");
  if (!g) return fail(g.error());
  if (planned) {
    // The database's partition for this model: the same target key as the tuner and the runtime use.
    auto target = target_from_flags(*args);
    if (!target) return fail(target.error());
    auto threads = args->get_int("threads", 0);
    if (!threads) return fail(threads.error());
    if (!std::filesystem::exists(args->get("db"))) return fail(make_error(args->get("db") + ": no such tuning database"));
    auto db = TuningDb::open(args->get("db"), DbAccess::kReadOnly);
    if (!db) return fail(db.error());
    std::string key = target->key(static_cast<int>(*threads)), note;
    auto moved = apply_saved_partition(*g, **db, key, &note);
    if (!moved) return fail(moved.error());
    std::fprintf(stderr, "partition for %s: %s; %zu groups (FuseOps's: %zu)\n", key.c_str(), note.c_str(),
                 *moved ? (*moved)->nodes.size() : g->nodes.size(), g->nodes.size());
    if (*moved) {
      // Each group that is not FuseOps's, and what it holds.
      std::set<std::string> fuseops;
      for (const Node &f : g->nodes) fuseops.insert(workload_hash(*f.body));
      for (size_t i = 0; i < (*moved)->nodes.size(); ++i) {
        const Node &n = (**moved).nodes[i];
        if (!fuseops.count(workload_hash(*n.body))) std::fprintf(stderr, "  %%%zu %s: not one of FuseOps's groups\n", i, group_ops(*n.body).c_str());
      }
      *g = std::move(**moved);
    }
  }
  std::string out = format == "text" ? print_text(*g) : format == "dot" ? print_dot(*g) : print_json(*g);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

/** The model's inputs: from .npy files in order, or seeded random ones. */
Expected<std::vector<Tensor>> read_inputs(const Args &args, const Graph &g) {
  const auto &files = args.all("input");
  if (files.empty()) {
    AT_ASSIGN(seed, args.get_int("seed", 0));
    size_t bytes = 0;
    for (const GraphInput &in : g.inputs) bytes += in.type.nbytes();
    if (auto fits = check_allocation(bytes, "a random input"); !fits) return make_error(args.get("model") + ": " + fits.error().message);
    return random_inputs(g, static_cast<uint64_t>(seed));
  }
  if (files.size() != g.inputs.size())
    return make_error("the model takes " + std::to_string(g.inputs.size()) + " inputs, " + std::to_string(files.size()) +
                      " --input files given");
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < files.size(); ++i) {
    AT_ASSIGN(t, read_npy(files[i]));
    if (t.type() != g.inputs[i].type)
      return make_error(files[i] + ": model input '" + g.inputs[i].name + "' must be " + type_str(g.inputs[i].type) +
                        ", file holds " + type_str(t.type()));
    inputs.push_back(std::move(t));
  }
  return inputs;
}

/** --target NAME|FILE ("cpu" is the host, as before targets had names), checked to run on this machine. */
Expected<Target> target_from_flags(const Args &args) {
  std::string name = args.get("target", "host");
  auto target = resolve_target(name == "cpu" ? "host" : name);
  if (!target) return make_error("--target " + name + ": " + target.error().message);
  if (auto st = target->runnable_here(); !st) return make_error("--target " + name + ": " + st.error().message);
  return target;
}

/** Compiles the model (import, passes, fusion, kernels) under the flags, with the plan of the tuning database `db` ("": the default schedules). */
Expected<std::unique_ptr<CompiledModel>> compile_model(const Args &args, const std::string &db, const std::string &partition) {
  AT_ASSIGN(threads, args.get_int("threads", 0));
  if (threads < 0 || threads > 4096) return make_error("--threads: must be between 0 (one per hardware thread) and 4096, got " + std::to_string(threads));
  AT_ASSIGN(fused, load_graph(args, "fused"));
  CompileOptions options;
  AT_ASSIGN(target, target_from_flags(args));
  options.target = target;
  options.threads = static_cast<int>(threads);
  options.db_path = db;
  if (partition != "db" && partition != "fuseops") return make_error("--partition: db or fuseops, got '" + partition + "'");
  options.fuseops_partition = partition == "fuseops";
  std::string split = args.get("thread-split", "model");
  if (split != "model" && split != "group") return make_error("--thread-split: model or group, got '" + split + "'");
  options.split_rows = split == "model";
  if (!options.db_path.empty() && !std::filesystem::exists(options.db_path))
    return make_error(options.db_path + ": no such tuning database");
  auto m = CompiledModel::compile(fused, options);
  if (!m) return make_error(args.get("model") + ": " + m.error().message);
  return m;
}

/** The same with --db's plan and --partition's partition. */
Expected<std::unique_ptr<CompiledModel>> compile_model(const Args &args) {
  return compile_model(args, args.get("db"), args.get("partition", "db"));
}

std::string fallback_note(const CompiledModel &m) {
  int n = 0;
  for (const GroupInfo &g : m.groups()) n += !g.fallback.empty();
  if (!n) return "";
  return ", " + std::to_string(n) + " on the reference executor";
}

/** With a database: how many groups are tuned, and which were not (to stderr, so JSON stays clean). */
void report_tuning(const CompiledModel &m, const Args &args) {
  if (!args.has("db")) return;
  std::fprintf(stderr, "tuning database %s: %d of %zu groups tuned; partition %s\n", args.get("db").c_str(), m.tuned_groups(),
               m.groups().size(), m.partition().c_str());
  for (const GroupInfo &g : m.groups())
    if (!g.tuned) std::fprintf(stderr, "  %s %s %s: default schedule (%s)\n", g.name.c_str(), g.ops.c_str(), g.shape.c_str(), g.untuned_reason.c_str());
}

/** Writes the outputs to --output (Y.npy, Y.1.npy, ...) when given, and prints each one's summary. */
Status write_outputs(const Args &args, const std::vector<Tensor> &outs) {
  if (args.has("output"))
    for (size_t i = 0; i < outs.size(); ++i) AT_TRY(write_npy(output_path(args.get("output"), i), outs[i]));
  for (size_t i = 0; i < outs.size(); ++i) std::printf("output %zu: %s\n", i, summary(outs[i]).c_str());
  return Status::ok();
}

/**
 * run and bench with a GPU --target (sm_80, sm_90, a GPU file): the CUDA driver is opened first,
 * so that a machine without one says so in one line before anything is compiled. The kernels
 * are compiled for the device found (its own sm), whichever GPU description was named.
 */
int gpu_command(const Args &args, bool bench) {
  auto driver = CudaDriver::open();
  if (!driver) return fail(make_error("--target " + args.get("target") + ": " + driver.error().message));
  auto g = load_graph(args, "fused", "fused");
  if (!g) return fail(g.error());
  auto start = Clock::now();
  std::unique_ptr<TuningDb> db;
  if (args.has("db")) {
    auto opened = TuningDb::open(args.get("db"), DbAccess::kReadOnly);
    if (!opened) return fail(opened.error());
    db = opened.take();
  }
  auto m = GpuModel::compile(*g, *driver, 0, db.get());
  if (!m) return fail(make_error(args.get("model") + ": " + m.error().message));
  for (const std::string &note : (*m)->notes()) std::fprintf(stderr, "note: %s\n", note.c_str());
  double prepare_ms = ms_since(start);
  auto inputs = read_inputs(args, *g);
  if (!inputs) return fail(inputs.error());
  const GpuTarget &t = (*m)->target();
  if (bench) {
    auto runs = args.get_int("runs", 20);
    if (!runs) return fail(runs.error());
    auto ms = (*m)->median_ms(*inputs, static_cast<int>(*runs));
    if (!ms) return fail(make_error(args.get("model") + ": " + ms.error().message));
    std::printf("%s on %s (%s, %d SMs): median %.3f ms of %lld runs (device time, CUDA events)\n", args.get("model").c_str(), t.name.c_str(),
                t.sm.c_str(), t.sm_count, *ms, static_cast<long long>(*runs));
    return 0;
  }
  auto outs = (*m)->run(*inputs);
  if (!outs) return fail(make_error(args.get("model") + ": " + outs.error().message));
  if (auto st = write_outputs(args, *outs); !st) return fail(st.error());
  std::printf("executor gpu: %s (%s), %zu groups, prepare %.1f ms\n", t.name.c_str(), t.sm.c_str(), g->nodes.size(), prepare_ms);
  if (args.has("output")) std::printf("wrote %s\n", args.get("output").c_str());
  return 0;
}

int cmd_run(const std::vector<std::string> &argv) {
  auto args = Args::parse("run", argv, with_pass_flags({{"model", "input", "output", "executor", "seed", "threads", "db", "target", "partition", "thread-split"}, {"help"}, {"input"}}));
  if (!args) return fail(args.error());
  if (args->has("help")) return std::printf("%s\n%s", kRunHelp, kPassOptions), 0;
  if (!args->has("model")) return fail(make_error("run: --model is required (see 'autotune run --help')"));
  if (is_gpu_target(args->get("target"))) return gpu_command(*args, false);
  std::string executor = args->get("executor", "compiled");
  if (executor != "reference" && executor != "compiled")
    return fail(make_error("run: unknown --executor '" + executor + "' (compiled or reference)"));
  if (executor == "compiled" && args->has("stage"))
    return fail(make_error("run: --stage applies to the reference executor; the compiled one runs the fused graph"));

  auto t0 = Clock::now();
  std::unique_ptr<CompiledModel> compiled;
  Graph g;
  if (executor == "compiled") {
    auto m = compile_model(*args);
    if (!m) return fail(m.error());
    compiled = m.take();
    g = compiled->graph();
    report_tuning(*compiled, *args);
  } else {
    auto lg = load_graph(*args, "optimized");
    if (!lg) return fail(lg.error());
    g = lg.take();
  }
  double prepare_ms = ms_since(t0);
  auto inputs = read_inputs(*args, g);
  if (!inputs) return fail(inputs.error());

  auto t1 = Clock::now();
  auto outs = compiled ? compiled->run(*inputs) : run_reference(g, *inputs);
  if (!outs) return fail(make_error(args->get("model") + ": " + outs.error().message));
  double run_ms = ms_since(t1);

  if (auto st = write_outputs(*args, *outs); !st) return fail(st.error());
  if (compiled) {
    std::printf("executor compiled: %zu kernels (%d compiled, %d from cache%s) on %d threads, prepare %.1f ms, run %.1f ms\n",
                g.nodes.size(), compiled->kernels_compiled(), compiled->kernels_cached(), fallback_note(*compiled).c_str(),
                compiled->threads(), prepare_ms, run_ms);
  } else {
    std::printf("executor reference, %s graph: %zu nodes, import+passes %.1f ms, run %.1f ms\n",
                args->get("stage", "optimized").c_str(), g.nodes.size(), prepare_ms, run_ms);
  }
  if (args->has("output")) std::printf("wrote %s\n", args->get("output").c_str());
  return 0;
}

const char *kBenchHelp = R"(autotune bench: end-to-end latency of the compiled model, and each fused group's time

Usage:
  autotune bench --model M.onnx [--runs N] [--warmup N] [--threads T] [--json] [--input X.npy]...
                 [pass options]

Options:
  --runs N       timed runs (default 20); median, min and max are reported
  --warmup N     untimed runs first (default 3)
  --threads T    threads (default: one per hardware thread)
  --json         one JSON object: median_ms, min_ms, max_ms, runs, threads, per-group times and
                 handoff_ns (the thread pool's hand-off time before and after the runs: it grows
                 when a VM's host runs the cores far apart, and the times with it)
  --input X.npy  the input to time (default: seeded random)
  --db D         a tuning database: the model's tuned plan (each group's best record without one)
                 and the fusion partition the tuner chose for it
  --partition P  db (default): the database's partition for the model, FuseOps's without one;
                 fuseops: FuseOps's groups whatever the database says (for comparison)
  --thread-split S  model (default): the default schedules split rows or channels over the
                 threads as chosen for the whole model, so each kernel reads what its own
                 thread wrote; group: as each group's default alone (for comparison)
  --target T     compile for: host (default), avx2, avx512 or a JSON file ('autotune target');
                 a GPU (sm_80, sm_90): the median device time on the machine's NVIDIA GPU
  --bound        also the most any fusion partition of these groups could gain on this host: the
                 values between groups priced at the threads' streaming rates for their sizes
                 (measured now, 64 KiB to 32 MiB), every hand-off and the dispatch, all taken as
                 saved (a value a global pool reduces while another group waits on it stays
                 stored once); JSON: "bound"
  --against B    time the model with tuning database B's plan (or 'untuned': the default
                 schedules) beside the one --db gives, in this process, runs alternating: --rounds
                 timings of --runs runs of each, two compiled copies of each plan in turn (the
                 second pair compiled in the other order), which goes first swapped every two
                 rounds; prints each
                 round's medians, B's time over A's, and their median over the rounds the thread
                 hand-off puts near (two plans from separate commands differ by the host's moods),
                 then the groups whose times differ most (JSON: a_groups_ms and b_groups_ms, every
                 group's median over the rounds)
  --rounds R     timings with --against (default 6; each after 3 untimed runs of both)
  --against-partition P  B's partition, db or fuseops (default: --partition's); with --against
                 naming --db's database, the searched partition against FuseOps's in one process

Example:
  autotune bench --model resnet50.onnx --runs 50 --json
  autotune bench --model resnet18.onnx --db tuned.db --against untuned   # the plan against the defaults
  autotune bench --model resnet18.onnx --db a.db --against b.db --rounds 8
  autotune bench --model mobilenet_v2.onnx --db tuned.db --bound      # what partitions could gain
  autotune bench --model effnet.onnx --db t.db --against t.db --against-partition fuseops  # partitions
  autotune bench --model effnet.onnx --db t.db --partition fuseops   # the tuned plan without the searched partition
  autotune bench --model resnet50.onnx --target avx2        # the AVX2 kernels on an AVX-512 host
  autotune bench --model mobilenet_v2.onnx --thread-split group  # each group's thread split alone
)";

/**
 * bench --against: two plans of one model compiled in this process and timed alternately
 * (search/PlanCheck's side_by_side), round after round with the order swapped, so neither the
 * host's drift nor going first favours one of them.
 */
int bench_against(const Args &args, int64_t runs) {
  auto rounds = args.get_int("rounds", 6);
  if (!rounds) return fail(rounds.error());
  if (*rounds < 1 || *rounds > 1000) return fail(make_error("bench: --rounds must be between 1 and 1000, got " + std::to_string(*rounds)));
  std::string against = args.get("against");
  std::string b_db = against == "untuned" ? "" : against;
  if (!b_db.empty() && !std::filesystem::exists(b_db))
    return fail(make_error(against + ": no such tuning database (--against takes one, or 'untuned' for the default schedules)"));
  std::string a_partition = args.get("partition", "db"), b_partition = args.get("against-partition", a_partition);
  std::string a_name = args.has("db") ? args.get("db") : "untuned";
  if (a_name == against && (a_partition == b_partition || b_db.empty()))  // without a database, both are FuseOps's
    return fail(make_error("bench: --against names the plan --db already gives (" + against + "); --against-partition can set its partition apart"));
  // Two compiles of one plan run about 1% apart, the later one mostly faster (one plan compiled
  // twice: B / A 0.983-0.995; docs/architecture.md, "Runtime"). So a copy that is neither side is
  // compiled first, and each side twice, the second pair in the other order; the rounds take the
  // pairs in turn.
  auto first = compile_model(args);
  if (!first) return fail(first.error());
  auto a = compile_model(args);
  if (!a) return fail(a.error());
  auto b = compile_model(args, b_db, b_partition);
  if (!b) return fail(b.error());
  auto b2 = compile_model(args, b_db, b_partition);
  if (!b2) return fail(b2.error());
  auto a2 = compile_model(args);
  if (!a2) return fail(a2.error());
  auto inputs = read_inputs(args, (*a)->graph());
  if (!inputs) return fail(inputs.error());
  bool json = args.has("json");
  auto describe = [&](const char *label, const std::string &name, const CompiledModel &m) {
    if (!json)
      std::printf("%s: %s, %d of %zu groups tuned, partition %s\n", label, name.c_str(), m.tuned_groups(), m.groups().size(),
                  m.partition().c_str());
  };
  describe("A", a_name, **a);
  describe("B", against, **b);
  auto alternated = alternate(**a, **b, *inputs, static_cast<int>(runs), static_cast<int>(*rounds), a2->get(), b2->get());
  if (!alternated) return fail(make_error(args.get("model") + ": " + alternated.error().message));
  const std::vector<Alternated::Round> &done = alternated->rounds;
  double near_ns = alternated->near_ns;
  std::vector<double> ratios = alternated->ratios(), near_ratios = alternated->ratios(true);
  if (json) {
    nlohmann::json j{{"model", args.get("model")}, {"a", a_name}, {"b", against}, {"runs", runs}, {"threads", (*a)->threads()},
                     {"a_tuned_groups", (*a)->tuned_groups()}, {"b_tuned_groups", (*b)->tuned_groups()}, {"groups", (*a)->groups().size()},
                     {"b_groups", (*b)->groups().size()}, {"a_partition", (*a)->partition()}, {"b_partition", (*b)->partition()},
                     {"median_ratio", median(ratios)}, {"rounds_near", near_ratios.size()},
                     {"median_ratio_near", near_ratios.empty() ? nlohmann::json(nullptr) : nlohmann::json(median(near_ratios))}};
    for (const Alternated::Round &r : done)
      j["rounds"].push_back({{"a_ms", r.a_ms}, {"b_ms", r.b_ms}, {"ratio", r.b_ms / r.a_ms}, {"handoff_ns", r.handoff_ns},
                             {"first", r.a_first ? "a" : "b"}, {"pair", r.pair}, {"near", !cores_apart(r.handoff_ns, near_ns)}});
    // Each plan's groups, the median of their round medians: which kernels make the difference.
    for (bool of_b : {false, true}) {
      const CompiledModel &m = of_b ? **b : **a;
      std::vector<double> ms = alternated->group_ms(of_b);
      nlohmann::json &list = j[of_b ? "b_groups_ms" : "a_groups_ms"] = nlohmann::json::array();
      for (size_t k = 0; k < ms.size() && k < m.groups().size(); ++k)
        list.push_back({{"id", m.groups()[k].name}, {"ops", m.groups()[k].ops}, {"shape", m.groups()[k].shape}, {"median_ms", ms[k]}});
    }
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  for (size_t i = 0; i < done.size(); ++i) {
    const Alternated::Round &r = done[i];
    std::printf("round %zu (copies %d, %s first): A %.3f ms, B %.3f ms, B / A %.3f, hand-off %.0f ns%s\n", i + 1, r.pair + 1, r.a_first ? "A" : "B", r.a_ms, r.b_ms,
                r.b_ms / r.a_ms, r.handoff_ns, cores_apart(r.handoff_ns, near_ns) ? " (cores apart)" : "");
  }
  std::printf("B / A: median %.3f over %zu rounds (%.3f-%.3f)", median(ratios), ratios.size(), *std::min_element(ratios.begin(), ratios.end()),
              *std::max_element(ratios.begin(), ratios.end()));
  if (near_ratios.size() < ratios.size())
    std::printf(near_ratios.empty() ? "; the cores were apart in every round" : "; %.3f over the %zu rounds with the cores near",
                near_ratios.empty() ? 0.0 : median(near_ratios), near_ratios.size());
  std::printf(" (%lld runs of each per round, %d threads)\n", static_cast<long long>(runs), (*a)->threads());
  // Where both plans have the same groups, the ones that differ most, by the median of their round medians.
  const std::vector<GroupInfo> &ga = (*a)->groups(), &gb = (*b)->groups();
  bool same = ga.size() == gb.size();
  for (size_t k = 0; same && k < ga.size(); ++k) same = ga[k].ops == gb[k].ops && ga[k].shape == gb[k].shape;
  if (same) {
    std::vector<double> ms_a = alternated->group_ms(false), ms_b = alternated->group_ms(true);
    std::vector<size_t> order;
    for (size_t k = 0; k < ms_a.size() && k < ms_b.size(); ++k) order.push_back(k);
    std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return std::abs(ms_b[x] - ms_a[x]) > std::abs(ms_b[y] - ms_a[y]); });
    std::printf("groups that differ most (medians over the rounds, ms):\n");
    for (size_t i = 0; i < order.size() && i < 8; ++i) {
      size_t k = order[i];
      std::printf("  %-6s %-34s %-20s A %.4f  B %.4f  B / A %.3f\n", ga[k].name.c_str(), ga[k].ops.substr(0, 34).c_str(), ga[k].shape.c_str(),
                  ms_a[k], ms_b[k], ms_a[k] > 0 ? ms_b[k] / ms_a[k] : 0.0);
    }
  }
  return 0;
}

int cmd_bench(const std::vector<std::string> &argv) {
  auto args = Args::parse("bench", argv, with_pass_flags({{"model", "runs", "warmup", "threads", "seed", "input", "db", "target", "partition", "thread-split", "against", "against-partition", "rounds"}, {"help", "json", "bound"}, {"input"}}));
  if (!args) return fail(args.error());
  if (args->has("help")) return std::printf("%s\n%s", kBenchHelp, kPassOptions), 0;
  if (!args->has("model")) return fail(make_error("bench: --model is required (see 'autotune bench --help')"));
  if (is_gpu_target(args->get("target"))) {
    if (args->has("against")) return fail(make_error("bench: --against times CPU plans; a GPU --target has one plan per database"));
    if (args->has("bound")) return fail(make_error("bench: --bound prices a CPU model's values at this host's streaming rates; not with a GPU --target"));
    return gpu_command(*args, true);
  }
  auto runs = args->get_int("runs", 20), warmup = args->get_int("warmup", 3);
  if (!runs) return fail(runs.error());
  if (!warmup) return fail(warmup.error());
  if (*runs < 1) return fail(make_error("bench: --runs must be at least 1"));
  if (args->has("against") && args->has("bound")) return fail(make_error("bench: --bound applies without --against"));
  if (args->has("against")) return bench_against(*args, *runs);
  for (const char *flag : {"rounds", "against-partition"})
    if (args->has(flag)) return fail(make_error(std::string("bench: --") + flag + " applies with --against"));
  auto m = compile_model(*args);
  if (!m) return fail(m.error());
  CompiledModel &model = **m;
  report_tuning(model, *args);
  auto inputs = read_inputs(*args, model.graph());
  if (!inputs) return fail(inputs.error());
  for (int64_t i = 0; i < *warmup; ++i)
    if (auto r = model.run(*inputs); !r) return fail(r.error());
  std::vector<double> total;
  std::vector<std::vector<double>> per_group(model.groups().size());
  std::vector<double> group_ms;
  // Where the cores were, before and after the timed runs (ThreadPool::handoff_ns): two benches
  // compare only if it was alike for both.
  std::shared_ptr<ThreadPool> pool = ThreadPool::shared(model.threads());
  double handoff_before = pool->handoff_ns();
  for (int64_t i = 0; i < *runs; ++i) {
    auto t0 = Clock::now();
    if (auto r = model.run(*inputs, &group_ms); !r) return fail(r.error());
    total.push_back(ms_since(t0));
    for (size_t k = 0; k < group_ms.size(); ++k) per_group[k].push_back(group_ms[k]);
  }
  double handoff_after = pool->handoff_ns();
  double med = median(total), lo = *std::min_element(total.begin(), total.end()), hi = *std::max_element(total.begin(), total.end());
  double flops = 0;
  for (const GroupInfo &gi : model.groups()) flops += gi.flops;
  // The roofline's ceiling: the target's FMA peak on the threads the model ran on, measured now
  // with the model's own JIT (so for its target).
  const Target &target = model.jit().target();
  auto peak = measure_fma_peak(model.jit(), model.threads());
  if (!peak) return fail(peak.error());
  auto share = [&](double gflops) { return *peak > 0 ? 100.0 * gflops / *peak : 0.0; };
  std::optional<TrafficBound> bound;
  if (args->has("bound")) {
    std::vector<double> ms;
    for (const auto &g : per_group) ms.push_back(median(g));
    auto rates = measure_stream_rates(model.jit(), *pool);
    if (!rates) return fail(rates.error());
    bound = traffic_bound(model.graph(), ms, med, handoff_after, *rates);
  }
  if (args->has("json")) {
    std::printf("{\"model\": \"%s\", \"median_ms\": %.4f, \"min_ms\": %.4f, \"max_ms\": %.4f, \"runs\": %lld, "
                "\"threads\": %d, \"gflops\": %.3f, \"compile_ms\": %.1f, \"tuned_groups\": %d, \"isa\": \"%s\", "
                "\"peak_gflops\": %.1f, \"handoff_ns\": [%.0f, %.0f], \"partition\": %s, \"groups\": [",
                args->get("model").c_str(), med, lo, hi, static_cast<long long>(*runs), model.threads(), flops / 1e9,
                model.compile_ms(), model.tuned_groups(), target.isa.c_str(), *peak, handoff_before, handoff_after,
                nlohmann::json(model.partition()).dump().c_str());
    for (size_t k = 0; k < per_group.size(); ++k) {
      const GroupInfo &gi = model.groups()[k];
      double gflops = gi.flops / 1e6 / std::max(median(per_group[k]), 1e-9);
      std::printf("%s{\"id\": \"%s\", \"ops\": \"%s\", \"median_ms\": %.4f, \"gflops_per_s\": %.2f, \"share_of_peak\": %.4f, "
                  "\"compiled\": %s, \"threads_split\": \"%s\"}",
                  k ? ", " : "", gi.name.c_str(), gi.ops.c_str(), median(per_group[k]), gflops, share(gflops) / 100,
                  gi.fallback.empty() ? "true" : "false", gi.split_rows ? "rows" : "channels");
    }
    std::printf("]");
    if (bound) {
      std::printf(", \"bound\": {\"written_mb\": %.3f, \"read_mb\": %.3f, \"traffic_ms\": %.4f, \"kept_ms\": %.4f, "
                  "\"kept_values\": %d, \"handoff_ms\": %.4f, \"dispatch_ms\": %.4f, \"floor_ms\": %.4f, \"bound\": %.4f}",
                  bound->written_mb, bound->read_mb, bound->traffic_ms, bound->kept_ms, bound->kept_values, bound->handoff_ms,
                  bound->dispatch_ms, bound->floor_ms, bound->bound);
      std::printf(", \"values\": [");
      for (size_t k = 0; k < bound->values.size(); ++k) {
        const TrafficBound::Value &v = bound->values[k];
        std::printf("%s{\"group\": \"%%%d\", \"bytes\": %zu, \"readers\": %d, \"ms\": %.4f, \"kept\": %s}", k ? ", " : "", v.group, v.bytes,
                    v.readers, v.ms, v.kept ? "true" : "false");
      }
      std::printf("]");
      std::printf(", \"stream_rates\": [");
      for (size_t k = 0; k < bound->rates.bytes.size(); ++k)
        std::printf("%s{\"bytes\": %zu, \"write_gbs\": %.1f, \"read_gbs\": %.1f}", k ? ", " : "", bound->rates.bytes[k],
                    bound->rates.write_gbs[k], bound->rates.read_gbs[k]);
      std::printf("]");
    }
    std::printf("}\n");
    return 0;
  }
  std::printf("%s: %zu groups, %.2f GFLOP per run, %d threads, compiled in %.0f ms (%d kernels compiled, %d from cache)\n",
              args->get("model").c_str(), model.groups().size(), flops / 1e9, model.threads(), model.compile_ms(),
              model.kernels_compiled(), model.kernels_cached());
  std::printf("target %s (%s): measured fp32 FMA peak %.1f GFLOP/s on %d threads\n", target.cpu.c_str(), target.isa.c_str(), *peak,
              model.threads());
  std::printf("%-6s %-34s %-20s %10s %10s %7s  %s\n", "group", "ops", "output", "median ms", "GFLOP/s", "% peak", "threads split");
  for (size_t k = 0; k < per_group.size(); ++k) {
    const GroupInfo &gi = model.groups()[k];
    double ms = median(per_group[k]), gflops = gi.flops / 1e6 / std::max(ms, 1e-9);
    std::printf("%-6s %-34s %-20s %10.3f %10.1f %6.1f%%  %s%s\n", gi.name.c_str(), gi.ops.substr(0, 34).c_str(), gi.shape.c_str(), ms,
                gflops, share(gflops), gi.split_rows ? "rows" : "channels",
                gi.fallback.empty() ? "" : ("  [reference executor: " + gi.fallback + "]").c_str());
  }
  std::printf("end to end: median %.3f ms, min %.3f ms, max %.3f ms over %lld runs (%.1f GFLOP/s, %.1f%% of peak)\n", med, lo, hi,
              static_cast<long long>(*runs), flops / 1e6 / med, share(flops / 1e6 / med));
  if (model.threads() > 1)
    std::printf("thread hand-off: %.0f ns before the runs, %.0f ns after (it grows when the host runs the cores far apart, "
                "and so do the times)\n", handoff_before, handoff_after);
  if (bound) {
    const TrafficBound &b = *bound;
    std::printf("what any partition of these %d groups could gain here: the values between them (%.1f MB written, %.1f MB "
                "read) cost %.3f ms at the threads' streaming rates for their sizes, %d of them (%.3f ms) stay stored "
                "once (a global pool reduces them while another group waits on it); hand-offs %.3f ms, dispatch %.3f ms. "
                "With all the rest saved: %.3f ms, ",
                b.groups, b.written_mb, b.read_mb, b.traffic_ms, b.kept_values, b.kept_ms, b.handoff_ms, b.dispatch_ms, b.floor_ms);
    if (b.bound > 0) std::printf("at most %.3fx faster than this partition.\n", b.bound);
    else std::printf("no bound: the traffic alone prices at the whole time.\n");
    std::printf("the costliest values (ms: written once, read by each reader):\n");
    for (size_t k = 0; k < std::min<size_t>(8, b.values.size()); ++k) {
      const TrafficBound::Value &v = b.values[k];
      const GroupInfo &gi = model.groups()[v.group];
      std::printf("  %-6s %-34s %8.2f MB  %d reader%s  %.3f ms%s\n", gi.name.c_str(), gi.ops.substr(0, 34).c_str(), static_cast<double>(v.bytes) / 1e6,
                  v.readers, v.readers == 1 ? " " : "s", v.ms, v.kept ? "  (stays stored)" : "");
    }
  }
  return 0;
}


const char *kTuneHelp = R"(autotune --model M.onnx --trials N: tune a model and save the best schedules

Usage:
  autotune --model M.onnx --trials N [--db tuning.db] [--target T] [--timeout S] [--seed K]
           [--config configs/search-default.json] [--threads T] [--min-time S] [--confirm-min-time S]
           [--flush-cache] [--warm-weights] [--alone] [--search evolutionary|random]
           [--space all|knobs] [--partition searched|fuseops]
  autotune tune ...    (the same)

Every fused group of the model is a task (identical groups are one task). Candidate schedules
are compiled in parallel and measured one at a time in a child process (warm-up, repeated runs,
output checked against the reference executor); every result, failures too, is saved to the
database as soon as it is measured. Ctrl-C stops after the current candidate; running the same
command again resumes (records already in the database count toward N). At the end the plan is
checked in the model, both ways alternating: a group slower tuned than with its default keeps
its default. With the config key runners_up N (default 0), a tuned group that gains less than 3%
there first tries its task's N next confirmed schedules and takes one that runs faster there;
with check_takes 2 (default 1) each timing the check decides on is taken twice, the quieter kept.

Options:
  --trials N        total measurements for this model on this machine (default 200)
  --db D            the tuning database (SQLite; default tuning.db)
  --target T        what to tune for: host (default: this CPU as detected), avx2, avx512, or a
                    JSON file (see 'autotune target --json'); records are keyed by it. A GPU
                    (sm_80, sm_90) tunes the tiles of the conv, dense and matmul kernels on
                    device 0 through the CUDA driver, keyed by the device's sm and name (only
                    --trials, --db, --seed and --search apply: a cost model on the GPU features
                    picks tiles once 16 are measured); without a driver it stops in one line
  --timeout S       per-candidate limit in seconds (default 10): a hang is recorded and killed
  --compile-timeout S  per-candidate compile limit in seconds (default 120; 0: none): each
                    candidate is compiled in a child process, and one LLVM stalls on is killed
                    and recorded as a compile error instead of stalling the run
  --seed K          search seed (default 0)
  --config C        JSON with defaults for these options (configs/search-default.json)
  --threads T       threads kernels run on (default: all); part of the database's target key
  --min-time S      keep timing a trial's candidate and its baseline, alternating, for S seconds
                    (default 0.1: a ratio to about 0.8%; 0.05: about 1.1%, and a 2000-trial run
                    in 0.7-0.77 of the time, its plans 0.986-1.022 of the default's end to end
                    on ResNet-18, three seeds)
  --confirm-min-time S  the same for the confirmations at the end, which choose the plan, and
                    for the partition search's moves (default 0.1)
  --flush-cache     overwrite 64 MiB between timed runs
  --warm-weights    leave the kernel's weights in cache between timed runs (by default they
                    are flushed before each run, as a whole inference evicts them in the model)
  --alone           time each candidate (and each partition move's kernels) alone; by default
                    the groups that write its inputs in the model run (their default kernels)
                    before each timed run, so it finds its inputs where the model leaves them: in
                    the cache of the core that wrote each part
  --search S        evolutionary (default): a cost model trained on the database's records ranks
                    mutations and crossovers of the best schedules, and the best predictions (and
                    one random point in eight) are measured; random: random points of the space
  --space S         all (default): each template's knobs and the sketch rules' step lists (loop
                    transformations of the group's naive nests); knobs: the template knobs only
  --partition P     searched (default): first measure each fusion move from FuseOps's partition
                    (an elementwise group recomputed in the conv that reads it; a depthwise conv
                    computed per block of the 1x1 conv after it, or a 1x1 conv per block of the
                    depthwise conv after it) against the kernels it replaces, check the winners
                    in the model (a move slower there is left out; a partition not faster end to
                    end than FuseOps's is not kept), save the partition, then tune its groups;
                    fuseops: FuseOps's groups

Example:
  autotune --model resnet18.onnx --trials 200 --db t.db && autotune bench --model resnet18.onnx --db t.db
)";

/**
 * The moves a partition search measured, from its report (search/PartitionSearch's JSON, as the
 * database keeps it): times apart and merged, the cost model's estimates, and taken or why not.
 */
void print_measured_moves(const std::string &report_json) {
  auto report = nlohmann::json::parse(report_json, nullptr, false);
  if (report.is_discarded() || !report.contains("moves")) return;
  for (const auto &m : report["moves"]) {
    if (!m.value("measured", false)) continue;
    std::string why = m.value("why_not", "");
    char in_model[96] = "";
    if (m.contains("model_apart_ms"))
      std::snprintf(in_model, sizeof in_model, "; in the model %.4f -> %.4f ms (%.3f)", m.value("model_apart_ms", 0.0), m.value("model_merged_ms", 0.0),
                    m.value("model_ratio", 0.0));
    std::printf("  %-16s %-36s %.4f -> %.4f ms (%.3f; hand-off %.0f ns)%s; est. %.0f -> %.0f KiB touched, %.2f -> %.2f MFLOP%s\n",
                m.value("move", "").c_str(), m.value("ops", "").substr(0, 36).c_str(), m.value("apart_ms", 0.0), m.value("merged_ms", 0.0),
                m.value("ratio", 0.0), m.value("handoff_ns", 0.0), in_model,
                m.value("bytes_apart", 0.0) / 1024, m.value("bytes_merged", 0.0) / 1024, m.value("flops_apart", 0.0) / 1e6,
                m.value("flops_merged", 0.0) / 1e6, m.value("chosen", false) ? "  taken" : why.empty() ? "" : ("  " + why).c_str());
  }
  if (report.contains("model_check")) {
    const auto &c = report["model_check"];
    std::printf("  checked in the model (default schedules, alternating, both orders): FuseOps's partition %.3f ms, the searched one %.3f ms "
                "end to end, median ratio %.3f (hand-off up to %.0f ns)\n",
                c.value("fuseops_ms", 0.0), c.value("searched_ms", 0.0), c.value("ratio", 0.0), c.value("handoff_ns", 0.0));
  }
}

std::atomic<bool> g_stop{false};
/** Ctrl-C or SIGTERM: finish the current candidate, save, report, exit 130; a second one ends the process at once. */
extern "C" void on_stop_signal(int sig) {
  g_stop.store(true);
  std::signal(sig, SIG_DFL);
}

/**
 * The tuning job with a GPU --target: the driver is opened first (one line without one), then
 * each GEMM-shaped task's tiles are measured on device 0 (search/GpuTuner) into the database,
 * keyed by the device's sm and name; run/bench --target with --db then use the best tiles.
 */
int gpu_tune(const Args &args) {
  auto driver = CudaDriver::open();
  if (!driver) return fail(make_error("--target " + args.get("target") + ": " + driver.error().message));
  auto trials = args.get_int("trials", 200), seed = args.get_int("seed", 0);
  if (!trials) return fail(trials.error());
  if (!seed) return fail(seed.error());
  auto g = load_graph(args, "fused", "fused");
  if (!g) return fail(g.error());
  auto device = (*driver)->device_target(0);
  if (!device) return fail(device.error());
  std::string key = gpu_target_key(**driver, *device, 0);
  auto db = TuningDb::open(args.get("db", "tuning.db"));
  if (!db) return fail(db.error());
  DeviceKernelTimer timer(**driver, 0, *device);
  GpuTuneOptions o;
  o.trials = static_cast<int>(std::clamp<int64_t>(*trials, 0, INT32_MAX));
  o.seed = static_cast<uint64_t>(*seed);
  std::string search = args.get("search", "evolutionary");
  if (search != "evolutionary" && search != "random") return fail(make_error("--search must be evolutionary or random, not '" + search + "'"));
  o.model = search == "evolutionary";
  o.progress = [](const std::string &line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  o.stop = [] { return g_stop.load(); };
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  auto rep = tune_gpu(*g, timer, **db, key, o);
  if (!rep) return fail(make_error(args.get("model") + ": " + rep.error().message));
  std::printf("tuned %d tasks on %s: %d measured (%d failed), %d already in %s\n", rep->tasks, key.c_str(), rep->measured, rep->failed,
              rep->skipped_known, (*db)->path().c_str());
  if (o.model)
    std::printf("cost model: trained %d times, last on %lld records, held-out pairwise accuracy %s; %d trials its picks; %.1f s\n",
                rep->model_trainings, static_cast<long long>(rep->model_rows),
                rep->model_heldout_accuracy >= 0 ? std::to_string(rep->model_heldout_accuracy).substr(0, 5).c_str() : "-", rep->model_picks,
                rep->model_s);
  std::printf("%-18s %-30s %12s %12s %8s  %s\n", "task", "ops", "default ms", "best ms", "speedup", "best tile");
  for (const auto &b : rep->best)
    std::printf("%-18s %-30s %12.4f %12.4f %8.2f  %s\n", b.hash.c_str(), b.ops.substr(0, 30).c_str(), b.default_s * 1e3, b.best_s * 1e3,
                b.best_s > 0 ? b.default_s / b.best_s : 0.0, b.tile.c_str());
  return g_stop.load() ? 130 : 0;
}

int cmd_tune(const std::vector<std::string> &argv) {
  auto args = Args::parse("tune", argv, with_pass_flags({{"model", "trials", "db", "target", "timeout", "compile-timeout", "seed", "config", "threads", "min-time", "confirm-min-time", "batch", "search", "space", "partition"}, {"help", "flush-cache", "warm-weights", "alone"}, {}}));
  if (!args) return fail(args.error());
  if (args->has("help")) return std::printf("%s\n%s", kTuneHelp, kPassOptions), 0;
  if (!args->has("model")) return fail(make_error("tune: --model is required (see 'autotune tune --help')"));
  if (is_gpu_target(args->get("target"))) return gpu_tune(*args);
  auto target = target_from_flags(*args);
  if (!target) return fail(target.error());
  TuneOptions o;
  o.target = *target;
  o.db_path = "tuning.db";
  o.cache_dir = default_kernel_cache_dir();
  int runners_up = PlanCheckOptions{}.runners_up;  // the in-model check's second look (search/PlanCheck)
  int check_takes = PlanCheckOptions{}.takes;      // and how many times it takes each timing it decides on
  if (args->has("config")) {
    auto text = read_file(args->get("config"));
    if (!text) return fail(text.error());
    auto j = nlohmann::json::parse(*text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return fail(make_error(args->get("config") + ": not a JSON object"));
    try {
      for (auto &[k, v] : j.items()) {
        if (k == "trials") o.trials = v.get<int64_t>();
        else if (k == "batch") o.batch = v.get<int>();
        else if (k == "confirm_top") o.confirm_top = v.get<int>();
        else if (k == "seed") o.seed = v.get<uint64_t>();
        else if (k == "timeout_s") o.measure.timeout_s = v.get<double>();
        else if (k == "compile_timeout_s") o.measure.compile_timeout_s = v.get<double>();
        else if (k == "min_time_s") o.measure.min_time_s = v.get<double>();
        else if (k == "confirm_min_time_s") o.confirm_min_time_s = v.get<double>();
        else if (k == "max_runs") o.measure.max_runs = v.get<int64_t>();
        else if (k == "flush_cache") o.measure.flush_cache = v.get<bool>();
        else if (k == "cold_weights") o.measure.cold_weights = v.get<bool>();
        else if (k == "producers") o.measure.producers = v.get<bool>();
        else if (k == "threads") o.measure.threads = v.get<int>();
        else if (k == "db") o.db_path = v.get<std::string>();
        else if (k == "search") o.search = v.get<std::string>();
        else if (k == "space") o.space = v.get<std::string>();
        else if (k == "runners_up") runners_up = v.get<int>();
        else if (k == "check_takes") check_takes = v.get<int>();
        else return fail(make_error(args->get("config") + ": unknown key '" + k + "'"));
      }
    } catch (const std::exception &e) {
      return fail(make_error(args->get("config") + ": " + e.what()));
    }
  }
  auto num = [&](const char *flag, double def) -> Expected<double> {
    if (!args->has(flag)) return def;
    try {
      size_t pos;
      double v = std::stod(args->get(flag), &pos);
      if (pos != args->get(flag).size()) throw std::invalid_argument("");
      return v;
    } catch (...) {
      return make_error(std::string("--") + flag + " expects a number, got '" + args->get(flag) + "'");
    }
  };
  auto trials = args->get_int("trials", o.trials), seed = args->get_int("seed", static_cast<int64_t>(o.seed)),
       threads = args->get_int("threads", o.measure.threads), batch = args->get_int("batch", o.batch);
  auto timeout = num("timeout", o.measure.timeout_s), min_time = num("min-time", o.measure.min_time_s),
       confirm_min_time = num("confirm-min-time", o.confirm_min_time_s), compile_timeout = num("compile-timeout", o.measure.compile_timeout_s);
  for (auto *e : {&trials, &seed, &threads, &batch})
    if (!*e) return fail(e->error());
  for (auto *e : {&timeout, &min_time, &confirm_min_time, &compile_timeout})
    if (!*e) return fail(e->error());
  // Range checks happen once, on the finished options (config file and flags alike), before any work.
  auto narrow = [](int64_t v) { return static_cast<int>(std::clamp<int64_t>(v, INT32_MIN, INT32_MAX)); };
  o.trials = *trials, o.seed = static_cast<uint64_t>(*seed), o.measure.threads = narrow(*threads);
  o.batch = narrow(*batch);
  o.measure.timeout_s = *timeout, o.measure.min_time_s = *min_time, o.measure.compile_timeout_s = *compile_timeout;
  o.confirm_min_time_s = *confirm_min_time;
  if (args->has("flush-cache")) o.measure.flush_cache = true;
  if (args->has("warm-weights")) o.measure.cold_weights = false;
  if (args->has("alone")) o.measure.producers = false;
  if (args->has("db")) o.db_path = args->get("db");
  if (args->has("search")) o.search = args->get("search");
  if (args->has("space")) o.space = args->get("space");
  if (auto st = o.validate(); !st) return fail(make_error("tune: " + st.error().message));
  if (runners_up < 0 || runners_up > 8)
    return fail(make_error("tune: runners_up must be between 0 (no second look in the model) and 8, got " + std::to_string(runners_up)));
  if (check_takes < 1 || check_takes > 8) return fail(make_error("tune: check_takes must be between 1 and 8, got " + std::to_string(check_takes)));

  std::string partition = args->get("partition", "searched");
  if (partition != "searched" && partition != "fuseops") return fail(make_error("tune: --partition: searched or fuseops, got '" + partition + "'"));

  auto fused = load_graph(*args, "fused");
  if (!fused) return fail(fused.error());
  bool tty = isatty(fileno(stderr));
  o.progress = [tty](const std::string &line) {
    if (tty) std::fprintf(stderr, "\r\033[K%s", line.c_str());
    else std::fprintf(stderr, "%s\n", line.c_str());
  };
  o.stop = &g_stop;
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  if (partition == "searched") {
    // The partition first: each move from FuseOps's measured against the kernels it replaces; the
    // winners' partition is saved, and the schedules are then tuned for its groups.
    PartitionSearchOptions po;
    po.db_path = o.db_path, po.measure = o.measure, po.cache_dir = o.cache_dir, po.target = o.target;
    po.measure.min_time_s = o.confirm_min_time_s;  // a move is taken on three rounds of these: timed as confirmations are
    po.stop = o.stop, po.progress = o.progress;
    auto prep = search_partition(*fused, po);
    if (tty) std::fprintf(stderr, "\n");
    if (!prep) {
      std::signal(SIGINT, SIG_DFL);
      std::signal(SIGTERM, SIG_DFL);
      if (g_stop.load()) return std::printf("interrupted while searching the partition: nothing saved (no schedule was measured yet); run the same command again\n"), 130;
      return fail(prep.error());
    }
    int tried = 0;
    for (const MoveReport &m : prep->moves) tried += m.measured;
    std::printf("partition: %d of %zu moves from FuseOps's measured, %zu taken (each measured below %.2fx alone is judged in the model: "
                "those whose groups there beat the groups they replace are taken, the largest gain first)\n",
                tried, prep->moves.size(), prep->chosen.size(), po.alone_limit);
    print_measured_moves(prep->json());
    auto moved = apply_partition(*fused, partition_json(prep->chosen));
    if (!moved) return fail(moved.error());
    *fused = moved.take();
  }
  auto rep = tune(*fused, o);
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  if (tty) std::fprintf(stderr, "\n");
  if (!rep) return fail(rep.error());

  std::printf("\n%s on %s: %lld trials this run (%lld failed), %lld before, %lld confirmation measurements, %.0f s\n",
              args->get("model").c_str(), rep->target.c_str(), static_cast<long long>(rep->trials_run),
              static_cast<long long>(rep->failures_run), static_cast<long long>(rep->trials_before),
              static_cast<long long>(rep->confirmations), rep->elapsed_s);
  if (rep->spaces_measured)
    std::printf("no task had a schedule left to measure at %lld of the %lld trials asked for (each space measured through, or "
                "sampling found no new point): more trials would find nothing new\n",
                static_cast<long long>(rep->trials_before + rep->trials_run), static_cast<long long>(o.trials));
  if (rep->search == "evolutionary") {
    std::printf("search: evolutionary, cost model trained %d times (%.1f s), last on %lld records, held-out pairwise accuracy %s; "
                "search and prediction %.1f s, %lld points lowered in %.1f s\n",
                rep->model_trainings, rep->model_train_s, static_cast<long long>(rep->model_rows),
                rep->model_heldout_accuracy >= 0 ? std::to_string(rep->model_heldout_accuracy).substr(0, 5).c_str() : "-",
                rep->model_predict_s, static_cast<long long>(rep->points_lowered), rep->points_lower_s);
  } else {
    std::printf("search: random, %lld points lowered in %.1f s\n", static_cast<long long>(rep->points_lowered), rep->points_lower_s);
  }
  {
    // Where the wall time went: what makes a run long, and what a faster search would save.
    const Measurer::PhaseTimes &m = rep->measure_times;
    double known = m.lower_s + m.compile_s + m.prepare_s + m.run_s + rep->choose_s + rep->save_s;
    std::printf("time: choosing candidates %.1f s, lowering %.1f s, compiling %.1f s, baselines and packing %.1f s, measuring %.1f s, "
                "saving %.1f s, the rest %.1f s\n",
                rep->choose_s, m.lower_s, m.compile_s, m.prepare_s, m.run_s, rep->save_s, std::max(0.0, rep->elapsed_s - known));
  }
  // This run's near hand-off level (0 when it measured nothing): the summary below and the plan check read it.
  double near = near_handoff_ns(rep->handoff_ns);
  if (!rep->handoff_ns.empty()) {
    // A VM's host may run the cores near or far apart for minutes at a time, and kernels whose
    // stages pass data between threads slow down with the distance (docs/architecture.md, "Where
    // the cores are"): the user should know when a run's ratios were taken on two machines, in effect.
    size_t apart = 0;
    for (double h : rep->handoff_ns) apart += cores_apart(h, near);
    std::printf("cores: thread hand-off %.0f ns when near; %zu of %zu measurements taken with the cores apart (over %.0f ns)%s\n", near,
                apart, rep->handoff_ns.size(), kApartFactor * near,
                !apart                          ? ""
                : rep->search == "evolutionary" ? "; the plan's choice and the cost model keep the two modes apart"
                                                : "; the plan's choice keeps the two modes apart");
  }
  std::printf("%-5s %-30s %-20s %5s %7s %11s %11s %8s\n", "task", "ops", "output", "uses", "trials", "untuned ms", "tuned ms", "speedup");
  size_t timed = 0;  // tasks whose default ran correctly: the sums below are over these
  for (size_t i = 0; i < rep->tasks.size(); ++i) {
    const TaskReport &t = rep->tasks[i];
    double best = t.best_s();
    std::printf("%-5zu %-30s %-20s %5zu %7lld", i + 1, t.task.ops.substr(0, 30).c_str(), t.task.shape.c_str(), t.task.groups.size(),
                static_cast<long long>(t.trials));
    // A time not measured (the budget ended first, or nothing of it ran correctly) is '-', not 0.
    for (double s : {t.default_s, best}) s > 0 ? std::printf(" %11.3f", s * 1e3) : std::printf(" %11s", "-");
    t.default_s > 0 && best > 0 ? std::printf(" %7.2fx\n", t.default_s / best) : std::printf(" %8s\n", "-");
    timed += t.default_s > 0;
  }
  std::string over = timed == rep->tasks.size() ? "" : ", over the " + std::to_string(timed) + " of " + std::to_string(rep->tasks.size()) + " tasks measured";
  std::printf("kernel time of the whole model (sum over groups%s): untuned %.3f ms, tuned %.3f ms (%.2fx)\n", over.c_str(),
              rep->estimated_untuned_s() * 1e3, rep->estimated_tuned_s() * 1e3,
              rep->estimated_tuned_s() > 0 ? rep->estimated_untuned_s() / rep->estimated_tuned_s() : 0.0);
  if (rep->interrupted) {
    std::printf("interrupted: every measured record is saved in %s; run the same command again to resume\n", o.db_path.c_str());
    return 130;
  }
  // End to end, side by side: the model without and with the database, and every group's time in
  // the model; a group slower tuned than with its default in the model keeps the default in the plan.
  PlanCheckOptions pc;
  pc.db_path = o.db_path;
  pc.threads = o.measure.threads;
  // The check is taken near too, by the level of every trial the tuner ranked (a resumed run that
  // measured nothing new has none of its own, and a check near 0 would count every timing as near).
  pc.near_ns = rep->near_handoff_ns > 0 ? rep->near_handoff_ns : near;
  pc.runners_up = runners_up, pc.takes = check_takes;
  auto check = check_plan_in_model(*fused, pc);
  if (!check) return fail(check.error());
  size_t groups = fused->nodes.size();
  std::string takes = pc.takes > 1 ? ", the quieter of " + std::to_string(pc.takes) + " takes" : "";
  std::printf("end to end (median of 20 runs, alternating%s): untuned %.3f ms, tuned %.3f ms (%.2fx), %d of %zu groups "
              "tuned; thread hand-off %.0f ns (near %.0f)\n",
              takes.c_str(), check->untuned_ms, check->tuned_ms, check->untuned_ms / check->tuned_ms, check->tuned_groups, groups,
              check->handoff_ns, pc.near_ns);
  if (check->apart)
    std::printf("the cores stayed apart for the check (thread hand-off %.0f ns, near is %.0f; %d tries): no group is reverted, "
                "the plan keeps what the tuner chose from its measurements near\n",
                check->handoff_ns, pc.near_ns, check->tries);
  if (check->second_looked > 0)
    std::printf("second look in the model: %d groups gaining less than %.0f%% tried their tasks' confirmed runners-up (%d variants of the plan timed)\n",
                check->second_looked, (1 - pc.second_look) * 100, check->variants);
  if (!check->runners_up.empty()) {
    std::printf("in the model, %zu groups ran faster with a runner-up of their task; the saved plan takes it:\n", check->runners_up.size());
    for (const auto &r : check->runners_up)
      std::printf("  %%%zu %s %s: its task's schedule #%d, %.3f of the default in the model (alone %.3f), the plan's first choice %.3f\n", r.group,
                  r.ops.c_str(), r.shape.c_str(), r.rank, r.ratio, r.alone_ratio, r.tuned_ratio);
  }
  if (!check->reverted.empty())
    std::printf("in the model, %zu groups ran slower tuned than with their default schedule; the saved plan keeps their default:\n",
                check->reverted.size());
  for (const auto &r : check->reverted)
    std::printf("  %%%zu %s %s: default %.3f ms, tuned %.3f ms\n", r.group, r.ops.c_str(), r.shape.c_str(), r.default_ms, r.tuned_ms);
  if (!check->reverted.empty() || !check->runners_up.empty()) {
    std::printf("end to end with that plan (median of 20 runs, alternating): untuned %.3f ms, tuned %.3f ms (%.2fx), %d of %zu groups tuned%s\n",
                check->checked_untuned_ms, check->checked_ms, check->checked_untuned_ms / check->checked_ms, check->checked_tuned_groups, groups,
                check->checked_apart ? " (the cores were apart for this timing)" : "");
  }
  return 0;
}

const char *kDbHelp = R"(autotune db: look into and move tuning databases

Usage:
  autotune db ls     --db D                     workloads: records, successes, best time
  autotune db best   --db D [--model M.onnx]    the best schedule of each workload (or of each group of M)
  autotune db partitions --db D                 the fusion partitions the tuner chose: each move tried,
                                                its times apart and merged, the cost model's estimates
  autotune db export --db D [--output F.jsonl]  every record as JSON lines (stdout without --output)
  autotune db import --db D --input F.jsonl     add records from JSON lines (idempotent)
  autotune db merge  --db D --from OTHER.db     add every record of another database (idempotent)

Example:
  autotune db export --db t.db --output t.jsonl && autotune db import --db other.db --input t.jsonl
)";

int cmd_db(const std::vector<std::string> &argv) {
  if (argv.empty() || argv[0] == "--help") return std::fputs(kDbHelp, argv.empty() ? stderr : stdout), argv.empty() ? 1 : 0;
  std::string sub = argv[0];
  auto args = Args::parse("db " + sub, std::vector<std::string>(argv.begin() + 1, argv.end()),
                          {{"db", "model", "output", "input", "from"}, {"help"}, {}});
  if (!args) return fail(args.error());
  if (args->has("help")) return std::fputs(kDbHelp, stdout), 0;
  if (!args->has("db")) return fail(make_error("db " + sub + ": --db is required"));
  if (sub != "import" && sub != "merge" && !std::filesystem::exists(args->get("db")))
    return fail(make_error(args->get("db") + ": no such tuning database"));
  bool writes = sub == "import" || sub == "merge";
  auto db = TuningDb::open(args->get("db"), writes ? DbAccess::kReadWrite : DbAccess::kReadOnly);
  if (!db) return fail(db.error());
  if (sub == "ls") {
    auto ws = (*db)->workloads();
    if (!ws) return fail(ws.error());
    std::printf("%-16s %-34s %8s %6s %11s  %s\n", "workload", "target", "records", "ok", "best ms", "ops");
    for (const WorkloadInfo &w : *ws) {
      std::string ops;
      for (size_t p = 0; (p = w.ir.find(" = ", p)) != std::string::npos; p += 3) {
        size_t e = w.ir.find('(', p);
        ops += (ops.empty() ? "" : "+") + w.ir.substr(p + 3, e - p - 3);
      }
      std::printf("%-16s %-34s %8lld %6lld %11s  %s\n", w.hash.c_str(), w.target.c_str(), static_cast<long long>(w.records),
                  static_cast<long long>(w.ok_records), w.best_s ? std::to_string(*w.best_s * 1e3).substr(0, 8).c_str() : "-", ops.c_str());
    }
    return 0;
  }
  if (sub == "partitions") {
    auto ps = (*db)->partitions();
    if (!ps) return fail(ps.error());
    for (const TuningDb::SavedPartition &p : *ps) {
      std::printf("model %s on %s (%s): %s\n", p.model_hash.c_str(), p.target.c_str(), p.created_at.c_str(), p.moves.c_str());
      print_measured_moves(p.report);
    }
    if (ps->empty()) std::printf("no partition saved (autotune tune saves one per model and target)\n");
    return 0;
  }
  if (sub == "best") {
    auto ws = (*db)->workloads();
    if (!ws) return fail(ws.error());
    std::set<std::string> wanted;
    if (args->has("model")) {
      auto fused = load_graph(*args, "fused");
      if (!fused) return fail(fused.error());
      for (const Node &n : fused->nodes) wanted.insert(workload_hash(*n.body));
    }
    for (const WorkloadInfo &w : *ws) {
      if (!wanted.empty() && !wanted.count(w.hash)) continue;
      auto b = (*db)->best(w.hash, w.target);
      if (!b) return fail(b.error());
      if (*b) std::printf("%s %s %.4f ms %s\n", w.hash.c_str(), w.target.c_str(), (*b)->median_s * 1e3, (*b)->schedule.c_str());
      else std::printf("%s %s no successful record\n", w.hash.c_str(), w.target.c_str());
    }
    return 0;
  }
  if (sub == "export") {
    auto text = (*db)->export_jsonl();
    if (!text) return fail(text.error());
    if (!args->has("output")) return std::fwrite(text->data(), 1, text->size(), stdout), 0;
    std::string out = args->get("output");
    if (auto st = write_file_atomic(out, *text); !st) return fail(st.error());
    std::printf("exported %zu records to %s\n", static_cast<size_t>(std::count(text->begin(), text->end(), '\n')), out.c_str());
    return 0;
  }
  if (sub == "import" || sub == "merge") {
    std::string label = sub == "import" ? args->get("input") : args->get("from");
    if (label.empty()) return fail(make_error("db " + sub + ": --" + (sub == "import" ? "input" : "from") + " is required"));
    std::string text;
    if (sub == "import") {
      auto t = read_file(label);
      if (!t) return fail(t.error());
      text = t.take();
    } else {
      if (!std::filesystem::exists(label)) return fail(make_error(label + ": no such tuning database"));
      auto other = TuningDb::open(label, DbAccess::kReadOnly);
      if (!other) return fail(other.error());
      auto t = (*other)->export_jsonl();
      if (!t) return fail(t.error());
      text = t.take();
    }
    auto n = (*db)->import_jsonl(text, label);
    if (!n) return fail(n.error());
    std::printf("added %lld records to %s\n", static_cast<long long>(*n), args->get("db").c_str());
    return 0;
  }
  return fail(make_error("db: unknown subcommand '" + sub + "' (ls, best, partitions, export, import, merge)"));
}

const char *kCostModelHelp = R"(autotune costmodel eval: how well the cost model ranks held-out measurements

Usage:
  autotune costmodel eval --db D [--target T] [--train-model M.onnx] [--test-share F] [--seed K]
                          [--objective reg:squarederror|rank:pairwise|rank:ndcg] [--json]

Trains the cost model (XGBoost on the features of each record's lowered kernel, costmodel/) on
part of a database's successful records of the target and ranks the rest. Without
--train-model, a share F (default 0.2) of each task's schedules is held out (chosen by a hash of
workload, schedule and seed). With --train-model, it trains on the records of M's tasks and
tests on every other workload's records: transfer from one model to another. Reports pairwise
rank accuracy (over pairs of a task's schedules), top-1 and top-5 recall of each task's
measured best, record counts, and training and prediction times.

Examples:
  autotune costmodel eval --db r50.db
  autotune db merge --db both.db --from r18.db && autotune db merge --db both.db --from r50.db
  autotune costmodel eval --db both.db --train-model resnet18.onnx --json
)";

int cmd_costmodel(const std::vector<std::string> &argv) {
  if (argv.empty() || argv[0] == "--help") return std::fputs(kCostModelHelp, argv.empty() ? stderr : stdout), argv.empty() ? 1 : 0;
  if (argv[0] != "eval") return fail(make_error("costmodel: unknown subcommand '" + argv[0] + "' (eval)"));
  auto args = Args::parse("costmodel eval", std::vector<std::string>(argv.begin() + 1, argv.end()),
                          {{"db", "target", "train-model", "test-share", "seed", "objective"}, {"help", "json"}, {}});
  if (!args) return fail(args.error());
  if (args->has("help")) return std::fputs(kCostModelHelp, stdout), 0;
  if (!args->has("db")) return fail(make_error("costmodel eval: --db is required"));
  if (!std::filesystem::exists(args->get("db"))) return fail(make_error(args->get("db") + ": no such tuning database"));
  auto target = target_from_flags(*args);
  if (!target) return fail(target.error());
  double share = args->has("test-share") ? std::atof(args->get("test-share").c_str()) : 0.2;
  if (!(share > 0 && share < 1)) return fail(make_error("costmodel eval: --test-share must be between 0 and 1, got " + args->get("test-share")));
  auto seed_flag = args->get_int("seed", 0);
  if (!seed_flag) return fail(make_error("costmodel eval: " + seed_flag.error().message));
  uint64_t seed = static_cast<uint64_t>(*seed_flag);
  std::string objective = args->has("objective") ? args->get("objective") : CostModelOptions{}.objective;
  if (objective != "reg:squarederror" && objective != "rank:pairwise" && objective != "rank:ndcg")
    return fail(make_error("costmodel eval: --objective must be reg:squarederror, rank:pairwise or rank:ndcg, got '" + objective + "'"));
  auto db = TuningDb::open(args->get("db"), DbAccess::kReadOnly);
  if (!db) return fail(db.error());
  auto set = load_samples(**db, target->key(target->threads), *target);
  if (!set) return fail(set.error());
  std::set<std::string> train_workloads;
  if (args->has("train-model")) {
    auto g = import_onnx_file(args->get("train-model"));
    if (!g) return fail(g.error());
    auto fused = lower_to_stage(*g, Stage::kFused, PassContext{});
    if (!fused) return fail(fused.error());
    for (const Task &t : extract_tasks(*fused)) train_workloads.insert(t.hash);
  }
  std::vector<Sample> train, test;
  for (const Sample &s : set->samples) {
    bool held_out = args->has("train-model") ? !train_workloads.count(s.workload)
                                             : static_cast<double>(fnv1a(s.workload + s.schedule + std::to_string(seed)) % 10000) < share * 10000;
    (held_out ? test : train).push_back(s);
  }
  if (train.empty() || test.empty())
    return fail(make_error(args->get("db") + ": " + std::to_string(train.size()) + " training and " + std::to_string(test.size()) +
                           " test records of target " + target->key(target->threads) + "; both must be non-empty"));
  auto t0 = std::chrono::steady_clock::now();
  CostModelOptions mo;
  mo.threads = target->threads, mo.seed = seed;
  mo.objective = objective;
  auto model = train_on(train, mo);
  if (!model) return fail(model.error());
  double train_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto rep = evaluate(**model, test);
  if (!rep) return fail(rep.error());
  rep->records_train = static_cast<int64_t>(train.size()), rep->train_s = train_s;
  if (args->has("json")) {
    nlohmann::json j{{"pairwise_accuracy", rep->pairwise_accuracy}, {"top1_recall", rep->top1_recall}, {"top5_recall", rep->top5_recall},
                     {"records_train", rep->records_train}, {"records_test", rep->records_test}, {"tasks_test", rep->tasks_test},
                     {"pairs", rep->pairs}, {"records_skipped", set->skipped}, {"train_s", rep->train_s}, {"predict_s", rep->predict_s},
                     {"feature_version", kFeatureVersion}};
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("cost model (features v%d, %zu features): trained on %lld records in %.2f s, tested on %lld records of %lld tasks\n",
              kFeatureVersion, model_feature_names().size(), static_cast<long long>(rep->records_train), rep->train_s,
              static_cast<long long>(rep->records_test), static_cast<long long>(rep->tasks_test));
  std::printf("pairwise accuracy %.3f over %lld pairs; top-1 recall %.2f, top-5 recall %.2f; prediction %.3f s\n", rep->pairwise_accuracy,
              static_cast<long long>(rep->pairs), rep->top1_recall, rep->top5_recall, rep->predict_s);
  if (set->skipped) std::printf("%lld records skipped: their schedule no longer lowers\n", static_cast<long long>(set->skipped));
  return 0;
}

const char *kTargetHelp = R"(autotune target: what kernels are compiled, scheduled and measured for

Usage:
  autotune target [--target host|avx2|avx512|sm_80|sm_90|FILE] [--json] [--no-peak]

Prints the target: LLVM's CPU and features, the ISA, float lanes, vector registers, FMA units,
L1/L2/L3 sizes, cores and threads, and the fp32 FMA peak measured at the target's width (a
JIT-compiled kernel of FMA chains, on 1 thread and on all). --target narrows the host (avx2 on an
AVX-512 machine: no 512-bit code) or reads a JSON file with any of the fields --json prints;
run, bench and tune take the same flag, and tuning records are keyed by it. A GPU target
(sm_80, sm_90, or a file with "kind": "gpu") prints its description and, where the CUDA driver
sees a device, the device's own (its compute capability, SMs, limits), which run and bench use.

Examples:
  autotune target --json > my-target.json
  autotune target --target avx2
  autotune target --target sm_90
)";

const char *kCompileHelp = R"(autotune compile: every fused group of a model as PTX for an NVIDIA GPU

Usage:
  autotune compile --model M.onnx --target sm_80|sm_90|FILE --out DIR [--check] [pass options]

Each group of the fused graph is lowered under the GPU schedule and compiled by LLVM's NVPTX
backend: a conv, dense or matmul stage as a tiled kernel (blocks of bm x bn outputs, each thread
a tm x tn register tile, the operands staged through shared memory in chunks of bk), every other
stage one output element per thread. No GPU and no CUDA installation are needed. Writes
DIR/<k>_<ops>.ptx per group and DIR/launches.json: for each group its file, its schedule, its
arguments (the group's inputs, then its output, then temporaries) and its kernel entries in
launch order with their block and thread counts, shared memory, estimated registers per thread
and occupancy (with what bounds it). `run` and `bench --target` run these kernels on a device.

Options:
  --model M.onnx   the model
  --target T       a GPU description: sm_80, sm_90 (configs/targets) or a JSON file with "kind": "gpu"
  --out DIR        the directory to write (created if missing)
  --check          assemble each group's PTX with ptxas (found as $AUTOTUNE_PTXAS, on PATH or in
                   /usr/local/cuda/bin) and fail on the first it refuses; launches.json then gives
                   the registers and spills ptxas allocated, and the occupancy they allow

Example:
  autotune compile --model resnet50.onnx --target sm_90 --out resnet50_sm90 --check
)";

int cmd_compile(const std::vector<std::string> &argv) {
  auto args = Args::parse("compile", argv, with_pass_flags({{"model", "target", "out"}, {"help", "check"}, {}}));
  if (!args) return fail(args.error());
  if (args->has("help")) return std::fputs(kCompileHelp, stdout), 0;
  for (const char *need : {"model", "target", "out"})
    if (args->get(need).empty()) return fail(make_error(std::string("compile: --") + need + " is required (see 'autotune compile --help')"));
  auto gpu = resolve_gpu_target(args->get("target"));
  if (!gpu) return fail(gpu.error());
  std::string ptxas = args->has("check") ? find_ptxas() : "";
  if (args->has("check") && ptxas.empty()) return fail(make_error("compile --check: no ptxas ($AUTOTUNE_PTXAS, PATH, /usr/local/cuda/bin)"));
  auto g = load_graph(*args, "fused", "fused");
  if (!g) return fail(g.error());
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(args->get("out"), ec);
  if (ec) return fail(make_error(args->get("out") + ": " + ec.message()));
  nlohmann::json groups = nlohmann::json::array();
  int n = 0, total = 0, cached = 0;
  for (const Node &node : g->nodes) total += node.is_function();
  auto start = Clock::now();
  for (size_t i = 0; i < g->nodes.size(); ++i) {
    const Node &node = g->nodes[i];
    if (!node.is_function()) continue;
    std::string name = "k" + std::to_string(i) + "_" + kernel_name(*node.body);
    for (char &c : name)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
    auto k = lower_gpu(*node.body, name, *gpu);
    if (!k) return fail(make_error(args->get("model") + ": group %" + std::to_string(i) + ": " + k.error().message));
    auto ptx = emit_ptx(*k, *gpu, default_kernel_cache_dir());
    if (!ptx) return fail(make_error(args->get("model") + ": group %" + std::to_string(i) + ": " + ptx.error().message));
    cached += ptx->from_cache;
    std::vector<PtxasEntry> resources;
    if (!ptxas.empty()) {
      auto r = ptxas_resources(ptx->ptx, *gpu, ptxas);
      if (!r) return fail(make_error(args->get("model") + ": group %" + std::to_string(i) + ": " + r.error().message));
      resources = r.take();
    }
    std::string file = name + ".ptx";
    if (auto st = write_file_atomic((fs::path(args->get("out")) / file).string(), ptx->ptx); !st) return fail(st.error());
    nlohmann::json entry{{"group", "%" + std::to_string(i)}, {"file", file}};
    nlohmann::json argv_json = nlohmann::json::array(), launches = nlohmann::json::array();
    for (size_t b = 0; b < k->buffers.size(); ++b)
      argv_json.push_back({{"name", k->buffers[b]->name}, {"elements", k->buffers[b]->size},
                           {"role", static_cast<int>(b) < k->num_params ? "input" : static_cast<int>(b) == k->num_params ? "output" : "temporary"}});
    for (size_t l = 0; l < ptx->launches.size(); ++l) {
      // With --check, the registers ptxas allocated (and its spills); else the features' estimate.
      auto used = std::find_if(resources.begin(), resources.end(), [&](const PtxasEntry &e) { return e.entry == ptx->launches[l].entry; });
      GpuOccupancy o = gpu_occupancy(k->stages[l], *gpu, used != resources.end() ? used->registers : -1);
      nlohmann::json launch{{"entry", ptx->launches[l].entry}, {"blocks", ptx->launches[l].blocks}, {"threads", ptx->launches[l].threads},
                            {"shared_bytes", o.shared_bytes}, {"registers", o.registers}, {"registers_from", used != resources.end() ? "ptxas" : "estimate"},
                            {"occupancy", o.occupancy}, {"occupancy_limit", o.limit}};
      if (used != resources.end()) launch["spill_bytes"] = used->spill_store_bytes + used->spill_load_bytes;
      launches.push_back(launch);
    }
    entry["schedule"] = k->schedule;
    entry["arguments"] = argv_json;
    entry["launches"] = launches;
    groups.push_back(entry);
    ++n;
    if (isatty(2)) std::fprintf(stderr, "\r%d of %d groups compiled for %s%s", n, total, gpu->sm.c_str(), ptxas.empty() ? "" : ", ptxas accepts each");
  }
  nlohmann::json out{{"model", args->get("model")}, {"target", nlohmann::json::parse(gpu->to_json())}, {"groups", groups}};
  if (auto st = write_file_atomic((fs::path(args->get("out")) / "launches.json").string(), out.dump(2) + "\n"); !st) return fail(st.error());
  double s = std::chrono::duration<double>(Clock::now() - start).count();
  std::fprintf(stderr, "%swrote %d PTX files (%s, %d from the kernel cache%s) and launches.json to %s in %.1f s\n", isatty(2) ? "\n" : "", n,
               gpu->sm.c_str(), cached, ptxas.empty() ? "" : ", each accepted by ptxas", args->get("out").c_str(), s);
  return 0;
}

int cmd_target(const std::vector<std::string> &argv) {
  auto args = Args::parse("target", argv, {{"target"}, {"help", "json", "no-peak"}, {}});
  if (!args) return fail(args.error());
  if (args->has("help")) return std::fputs(kTargetHelp, stdout), 0;
  if (is_gpu_target(args->get("target"))) {
    auto gpu = resolve_gpu_target(args->get("target"));
    if (!gpu) return fail(gpu.error());
    auto driver = CudaDriver::open();
    auto device = driver ? (*driver)->device_target(0) : Expected<GpuTarget>(driver.error());
    if (args->has("json")) {
      nlohmann::json j{{"description", nlohmann::json::parse(gpu->to_json())}};
      if (device) j["device"] = nlohmann::json::parse(device->to_json());
      else j["device_error"] = device.error().message;
      return std::printf("%s\n", j.dump(2).c_str()), 0;
    }
    auto show = [](const char *what, const GpuTarget &t) {
      std::printf("%s %s: %s, %s; %d SMs, warp %d, %d threads per block at most (the GPU schedule uses %d)\n"
                  "  shared memory %s per block, %s per SM; %d registers per SM\n",
                  what, t.name.c_str(), t.sm.c_str(), t.ptx.c_str(), t.sm_count, t.warp_size, t.max_threads_per_block, t.threads_per_block,
                  format_bytes(static_cast<double>(t.shared_bytes_per_block)).c_str(), format_bytes(static_cast<double>(t.shared_bytes_per_sm)).c_str(),
                  t.registers_per_sm);
    };
    show("target", *gpu);
    if (device) show("device 0", *device);
    else std::printf("  no device: %s\n", device.error().message.c_str());
    return 0;
  }
  auto target = target_from_flags(*args);
  if (!target) return fail(target.error());
  double peak1 = 0, peak_all = 0;
  if (!args->has("no-peak")) {
    auto jit = Jit::create({"", *target});
    if (!jit) return fail(jit.error());
    auto p1 = measure_fma_peak(**jit, 1), pa = measure_fma_peak(**jit, target->threads);
    if (!p1 || !pa) return fail(p1 ? pa.error() : p1.error());
    peak1 = *p1, peak_all = *pa;
  }
  if (args->has("json")) {
    auto j = nlohmann::json::parse(target->to_json());
    if (!args->has("no-peak")) j["peak_gflops"] = peak_all, j["peak_gflops_per_thread"] = peak1;
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  const Target &t = *target;
  std::string wide = t.wide_fma_pipes ? "; 512-bit FMAs per cycle: " + std::to_string(t.wide_fma_pipes) : "";
  std::printf("target %s: %s, %s\n  isa %s, %d float lanes, %d vector registers, %d FMA units per core%s\n"
              "  L1d %s, L2 %s, L3 %s; %d cores, %d threads\n",
              t.name.c_str(), t.triple.c_str(), t.cpu.c_str(), t.isa.c_str(), t.lanes, t.vector_registers, t.fma_units, wide.c_str(),
              format_bytes(static_cast<double>(t.l1_bytes)).c_str(), format_bytes(static_cast<double>(t.l2_bytes)).c_str(),
              format_bytes(static_cast<double>(t.l3_bytes)).c_str(), t.cores, t.threads);
  if (!args->has("no-peak"))
    std::printf("  measured fp32 FMA peak: %.1f GFLOP/s on 1 thread, %.1f on %d\n", peak1, peak_all, t.threads);
  std::printf("  database key: %s\n", t.key(t.threads).c_str());
  return 0;
}

}  // namespace
}  // namespace autotune::cli

int main(int argc, char **argv) {
  using namespace autotune::cli;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 1 : 0;
  }
  std::string cmd = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (cmd == "inspect") return cmd_inspect(rest);
  if (cmd == "run") return cmd_run(rest);
  if (cmd == "bench") return cmd_bench(rest);
  if (cmd == "tune") return cmd_tune(rest);
  if (cmd == "db") return cmd_db(rest);
  if (cmd == "target") return cmd_target(rest);
  if (cmd == "compile") return cmd_compile(rest);
  if (cmd == "costmodel") return cmd_costmodel(rest);
  if (cmd.rfind("--", 0) == 0) return cmd_tune(args);  // autotune --model M --trials N
  return fail(autotune::make_error("unknown command '" + cmd + "' (see 'autotune --help')"));
}
