// autotune: the one CLI binary. Thin: it parses flags, calls the libraries, and turns their
// errors into one line on stderr and exit code 1.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "ir/Npy.h"
#include "ir/OnnxImport.h"
#include "ir/Printer.h"
#include "ir/Reference.h"
#include "tools/Args.h"

namespace autotune::cli {
namespace {

const char *kUsage = R"(autotune: a cost-model-driven autotuner and benchmark harness for neural networks

Usage:
  autotune inspect --model M.onnx [--format text|dot|json]
  autotune run     --model M.onnx [--input X.npy]... [--output Y.npy] [--executor reference] [--seed K]
  autotune <command> --help

Examples:
  autotune inspect --model resnet18.onnx                 # the graph IR, Relay-style text
  autotune inspect --model resnet18.onnx --format dot | dot -Tsvg > resnet18.svg
  autotune run --model resnet18.onnx --output logits.npy # seeded random input
)";

const char *kInspectHelp = R"(autotune inspect: import an ONNX model and print its graph IR

Usage:
  autotune inspect --model M.onnx [--format text|dot|json]

Options:
  --model M.onnx   the model (ONNX opsets 7-17, static input shapes)
  --format F       text (default): Relay-style IR, read back by the parser
                   dot: Graphviz; json: nodes with op, inputs, attributes, output shape and dtype

Example:
  autotune inspect --model resnet18.onnx --format json > resnet18.json
)";

const char *kRunHelp = R"(autotune run: run a model on an input and write or summarize its output

Usage:
  autotune run --model M.onnx [--input X.npy]... [--output Y.npy] [--executor reference] [--seed K]

Options:
  --model M.onnx     the model
  --input X.npy      one per model input, in order (float32 or int64, C order, exact shape);
                     without it, a seeded random input of the model's input shape
  --output Y.npy     where to write the output (a model with several outputs writes
                     Y.npy, Y.1.npy, ...); without it, only the summary is printed
  --executor E       reference (default and, for now, the only executor): the plain
                     float32 oracle every compiled kernel is checked against
  --seed K           seed of the random input (default 0)

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

int cmd_inspect(const std::vector<std::string> &argv) {
  auto args = Args::parse("inspect", argv, {{"model", "format"}, {"help"}, {}});
  if (!args) return fail(args.error());
  if (args->has("help")) return std::fputs(kInspectHelp, stdout), 0;
  if (!args->has("model")) return fail(make_error("inspect: --model is required (see 'autotune inspect --help')"));
  std::string format = args->get("format", "text");
  if (format != "text" && format != "dot" && format != "json")
    return fail(make_error("inspect: --format must be text, dot or json, got '" + format + "'"));
  auto g = import_onnx_file(args->get("model"));
  if (!g) return fail(g.error());
  std::string out = format == "text" ? print_text(*g) : format == "dot" ? print_dot(*g) : print_json(*g);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

int cmd_run(const std::vector<std::string> &argv) {
  auto args = Args::parse("run", argv, {{"model", "input", "output", "executor", "seed"}, {"help"}, {"input"}});
  if (!args) return fail(args.error());
  if (args->has("help")) return std::fputs(kRunHelp, stdout), 0;
  if (!args->has("model")) return fail(make_error("run: --model is required (see 'autotune run --help')"));
  std::string executor = args->get("executor", "reference");
  if (executor != "reference") return fail(make_error("run: unknown --executor '" + executor + "' (available: reference)"));
  auto seed = args->get_int("seed", 0);
  if (!seed) return fail(seed.error());

  auto t0 = Clock::now();
  auto g = import_onnx_file(args->get("model"));
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
  std::printf("executor %s: %zu nodes, import %.1f ms, run %.1f ms\n", executor.c_str(), g->nodes.size(), import_ms, run_ms);
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
