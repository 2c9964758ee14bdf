// autotune: the one CLI binary. Thin: it parses flags, calls the libraries, and turns their
// errors into one line on stderr and exit code 1.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "ir/Npy.h"
#include "ir/OnnxImport.h"
#include "ir/Pass.h"
#include "ir/Printer.h"
#include "ir/Reference.h"
#include "tools/Args.h"

namespace autotune::cli {
namespace {

const char *kUsage = R"(autotune: a cost-model-driven autotuner and benchmark harness for neural networks

Usage:
  autotune inspect --model M.onnx [--stage imported|optimized|fused] [--format text|dot|json] [pass options]
  autotune run     --model M.onnx [--input X.npy]... [--output Y.npy] [--stage S] [--executor reference]
  autotune <command> --help

Examples:
  autotune inspect --model resnet18.onnx                      # the graph IR, Relay-style text
  autotune inspect --model resnet18.onnx --stage fused        # fused groups as primitive functions
  autotune inspect --model resnet18.onnx --stage fused --format dot | dot -Tsvg > resnet18.svg
  autotune run --model resnet18.onnx --output logits.npy      # seeded random input
)";

const char *kPassOptions = R"(Pass options (inspect and run):
  --stage S            imported: as read from ONNX; optimized: after the graph passes
                       (infer-shapes, simplify, fold-constants, fold-batch-norm,
                       eliminate-common-subexpr, eliminate-dead-code); fused: then fuse-ops
  --opt-level N        run the passes whose opt level is <= N (default 3; TVM's levels:
                       fuse-ops 0, eliminate-dead-code 1, fold-constants 2,
                       eliminate-common-subexpr 3)
  --disable-pass P     never run pass P (repeatable)
  --print-after-all    print the IR after each pass to stderr
  --time-passes        print each pass's time to stderr
  --verify             run the reference executor before and after each pass on seeded
                       random inputs; report each pass's error on stderr and fail if a
                       pass changes the result beyond 1e-5 relative
)";

const char *kInspectHelp = R"(autotune inspect: import an ONNX model and print its graph IR

Usage:
  autotune inspect --model M.onnx [--stage imported|optimized|fused] [--format text|dot|json]
                   [--opt-level N] [--disable-pass P]... [--print-after-all] [--time-passes] [--verify]

Options:
  --model M.onnx   the model (ONNX opsets 1-17, static input shapes)
  --format F       text (default): Relay-style IR, read back by the parser; fused groups print
                   as primitive functions (fn)
                   dot: Graphviz, fused groups as clusters
                   json: nodes with op, inputs, attributes, output shape and dtype; at the
                   fused stage also "groups": [{"id", "ops", "pattern", "inputs", "outputs"}]
  --stage S        default: imported

Examples:
  autotune inspect --model resnet18.onnx --format json > resnet18.json
  autotune inspect --model resnet50.onnx --stage fused --verify --time-passes
)";

const char *kRunHelp = R"(autotune run: run a model on an input and write or summarize its output

Usage:
  autotune run --model M.onnx [--input X.npy]... [--output Y.npy] [--executor reference] [--seed K]
               [--stage imported|optimized|fused] [pass options]

Options:
  --model M.onnx     the model
  --input X.npy      one per model input, in order (float32 or int64, C order, exact shape);
                     without it, a seeded random input of the model's input shape
  --output Y.npy     where to write the output (a model with several outputs writes
                     Y.npy, Y.1.npy, ...); without it, only the summary is printed
  --executor E       reference (default and, for now, the only executor): the plain
                     float32 oracle every compiled kernel is checked against
  --seed K           seed of the random input (default 0)
  --stage S          the graph to execute (default: optimized)

Example:
  autotune run --model resnet18.onnx --input image.npy --output logits.npy
)";

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

int fail(const Error &e) {
  std::fprintf(stderr, "autotune: error: %s\n", e.message.c_str());
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
Expected<Graph> load_graph(const Args &args, const std::string &default_stage) {
  AT_ASSIGN(stage, parse_stage(args.get("stage", default_stage)));
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

int cmd_inspect(const std::vector<std::string> &argv) {
  auto args = Args::parse("inspect", argv, with_pass_flags({{"model", "format"}, {"help"}, {}}));
  if (!args) return fail(args.error());
  if (args->has("help")) return std::printf("%s\n%s", kInspectHelp, kPassOptions), 0;
  if (!args->has("model")) return fail(make_error("inspect: --model is required (see 'autotune inspect --help')"));
  std::string format = args->get("format", "text");
  if (format != "text" && format != "dot" && format != "json")
    return fail(make_error("inspect: --format must be text, dot or json, got '" + format + "'"));
  auto g = load_graph(*args, "imported");
  if (!g) return fail(g.error());
  std::string out = format == "text" ? print_text(*g) : format == "dot" ? print_dot(*g) : print_json(*g);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

int cmd_run(const std::vector<std::string> &argv) {
  auto args = Args::parse("run", argv, with_pass_flags({{"model", "input", "output", "executor", "seed"}, {"help"}, {"input"}}));
  if (!args) return fail(args.error());
  if (args->has("help")) return std::printf("%s\n%s", kRunHelp, kPassOptions), 0;
  if (!args->has("model")) return fail(make_error("run: --model is required (see 'autotune run --help')"));
  std::string executor = args->get("executor", "reference");
  if (executor != "reference") return fail(make_error("run: unknown --executor '" + executor + "' (available: reference)"));
  auto seed = args->get_int("seed", 0);
  if (!seed) return fail(seed.error());

  auto t0 = Clock::now();
  auto g = load_graph(*args, "optimized");
  if (!g) return fail(g.error());
  double import_ms = ms_since(t0);

  std::vector<Tensor> inputs;
  const auto &files = args->all("input");
  if (files.empty()) {
    inputs = random_inputs(*g, static_cast<uint64_t>(*seed));
  } else {
    if (files.size() != g->inputs.size())
      return fail(make_error("run: the model takes " + std::to_string(g->inputs.size()) + " inputs, " +
                             std::to_string(files.size()) + " --input files given"));
    for (size_t i = 0; i < files.size(); ++i) {
      auto t = read_npy(files[i]);
      if (!t) return fail(t.error());
      if (t->type() != g->inputs[i].type)
        return fail(make_error(files[i] + ": model input '" + g->inputs[i].name + "' must be " +
                               type_str(g->inputs[i].type) + ", file holds " + type_str(t->type())));
      inputs.push_back(t.take());
    }
  }
  auto t1 = Clock::now();
  auto outs = run_reference(*g, inputs);
  if (!outs) return fail(make_error(args->get("model") + ": " + outs.error().message));
  double run_ms = ms_since(t1);

  if (args->has("output"))
    for (size_t i = 0; i < outs->size(); ++i)
      if (auto st = write_npy(output_path(args->get("output"), i), (*outs)[i]); !st) return fail(st.error());
  for (size_t i = 0; i < outs->size(); ++i)
    std::printf("output %zu: %s\n", i, summary((*outs)[i]).c_str());
  std::printf("executor %s, %s graph: %zu nodes, import+passes %.1f ms, run %.1f ms\n", executor.c_str(),
              args->get("stage", "optimized").c_str(), g->nodes.size(), import_ms, run_ms);
  if (args->has("output")) std::printf("wrote %s\n", args->get("output").c_str());
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
  if (cmd.rfind("--", 0) == 0)
    return fail(autotune::make_error("the tuning job (autotune --model M --trials N) is not built yet; "
                                     "available commands: inspect, run (see 'autotune --help')"));
  return fail(autotune::make_error("unknown command '" + cmd + "' (see 'autotune --help')"));
}
