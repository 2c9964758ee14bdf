// ONNX's own backend conformance data (Debian's libonnx-testdata) checks the reference executor
// and the compiled path: every node and pytorch-converted test whose ops autotune supports is
// imported and run on the reference executor, then optimized, fused, JIT-compiled and run again;
// each output must match ONNX's expected output within 1e-4 relative to its largest magnitude.
// Tests that cannot be imported are listed as skipped with the importer's reason; groups the
// compiler leaves to the reference executor are counted and listed. A test that imports only
// with its int64 inputs constant (a Slice's starts, a Split's sizes) runs with them bound into
// the model: autotune compiles static shapes. A test written in float64 alone (Einsum's) runs
// narrowed to float32, its data converted, and is held to the same 1e-4.
#include <gtest/gtest.h>

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include <unistd.h>

#include "ir/OnnxImport.h"
#include "ir/Reference.h"
#include "runtime/Runtime.h"

namespace autotune {
namespace {

namespace fs = std::filesystem;

struct CaseResult {
  std::string name;
  bool ran = false;
  std::string skip_reason;
  std::string failure;
  int groups = 0, fallbacks = 0;
  std::string fallback_reasons;
};

/** Checks outputs against the expected ones; "" when they match. */
std::string check(const std::string &what, const std::vector<Tensor> &outs, const std::vector<Tensor> &expected) {
  if (outs.size() != expected.size()) return what + ": output count differs";
  for (size_t i = 0; i < expected.size(); ++i) {
    auto d = compare(outs[i], expected[i]);
    if (!d) return what + " output " + std::to_string(i) + ": " + d.error().message;
    if (d->nan_mismatch || d->relative() > 1e-4)
      return what + " output " + std::to_string(i) + ": relative error " + std::to_string(d->relative()) + " at element " +
             std::to_string(d->first_index);
  }
  return "";
}

/** Sorted files named prefix_<k>.pb in dir. */
std::vector<fs::path> numbered(const fs::path &dir, const std::string &prefix) {
  std::vector<fs::path> out;
  for (int k = 0; fs::exists(dir / (prefix + "_" + std::to_string(k) + ".pb")); ++k)
    out.push_back(dir / (prefix + "_" + std::to_string(k) + ".pb"));
  return out;
}

std::string slurp(const fs::path &p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

/**
 * The model with its int64 inputs bound to this data set's values as initializers: autotune
 * compiles static shapes, so a Slice's starts, a Split's sizes or an Expand's shape are
 * constants of the model it compiles (ONNX's tests feed them as inputs). Returns the model's
 * bytes and, per input file, whether it is bound.
 */
std::pair<std::string, std::vector<bool>> bind_int64_inputs(const std::string &model_bytes, const std::vector<fs::path> &inputs) {
  std::vector<bool> bound_files(inputs.size(), false);
  onnx::ModelProto m;
  if (!m.ParseFromString(model_bytes)) return {model_bytes, bound_files};
  auto *g = m.mutable_graph();
  google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> kept;
  int k = 0;
  for (const auto &in : g->input()) {
    bool is_init = false;
    for (const auto &init : g->initializer()) is_init |= init.name() == in.name();
    if (is_init) {
      *kept.Add() = in;
      continue;
    }
    onnx::TensorProto t;
    bool bound = false;
    if (k < static_cast<int>(inputs.size()) && in.type().tensor_type().elem_type() == onnx::TensorProto::INT64 && t.ParseFromString(slurp(inputs[k]))) {
      t.set_name(in.name());
      *g->add_initializer() = t;
      bound = true;
    }
    if (bound) bound_files[k] = true;
    else *kept.Add() = in;
    ++k;
  }
  *g->mutable_input() = kept;
  return {m.SerializeAsString(), bound_files};
}

/** A float64 tensor's values as a float32 TensorProto (other types unchanged). */
onnx::TensorProto narrowed(onnx::TensorProto t) {
  if (t.data_type() != onnx::TensorProto::DOUBLE) return t;
  std::vector<double> v(t.double_data().begin(), t.double_data().end());
  if (t.has_raw_data()) {
    v.resize(t.raw_data().size() / sizeof(double));
    std::memcpy(v.data(), t.raw_data().data(), v.size() * sizeof(double));
  }
  std::vector<float> f(v.begin(), v.end());
  t.clear_double_data();
  t.set_data_type(onnx::TensorProto::FLOAT);
  t.set_raw_data(std::string(reinterpret_cast<const char *>(f.data()), f.size() * sizeof(float)));
  return t;
}

/** The model with every float64 value and initializer made float32, or "" when it has none or casts. */
std::string narrow_doubles(const std::string &model_bytes) {
  onnx::ModelProto m;
  if (!m.ParseFromString(model_bytes)) return "";
  auto *g = m.mutable_graph();
  bool any = false;
  for (auto *list : {g->mutable_input(), g->mutable_output(), g->mutable_value_info()})
    for (auto &vi : *list)
      if (vi.type().tensor_type().elem_type() == onnx::TensorProto::DOUBLE)
        vi.mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT), any = true;
  for (auto &init : *g->mutable_initializer())
    if (init.data_type() == onnx::TensorProto::DOUBLE) init = narrowed(init), any = true;
  // A cast's test is about its types: narrowed, it would check nothing.
  for (const auto &node : g->node())
    if (node.op_type() == "Cast" || node.op_type() == "CastLike") return "";
  return any ? m.SerializeAsString() : "";
}

/** A test data file, narrowed to float32 when `narrow` (written beside the other temporaries). */
Expected<Tensor> load_data(const fs::path &p, bool narrow) {
  if (!narrow) return load_tensor_pb(p.string());
  onnx::TensorProto t;
  if (!t.ParseFromString(slurp(p))) return make_error(p.string() + ": not a TensorProto");
  fs::path tmp = fs::temp_directory_path() / ("autotune_conformance_" + std::to_string(::getpid()) + ".pb");
  std::ofstream(tmp, std::ios::binary) << narrowed(t).SerializeAsString();
  auto out = load_tensor_pb(tmp.string());
  fs::remove(tmp);
  return out;
}

CaseResult run_case(const fs::path &dir) {
  CaseResult r;
  r.name = dir.parent_path().filename().string() + "/" + dir.filename().string();
  std::string model_bytes = slurp(dir / "model.onnx");
  for (const auto &set : fs::directory_iterator(dir)) {
    if (!set.is_directory() || set.path().filename().string().rfind("test_data_set", 0) != 0) continue;
    std::vector<fs::path> input_files = numbered(set.path(), "input");
    // As ONNX wrote it first; where that needs constants, with the int64 inputs bound.
    std::vector<bool> bound(input_files.size(), false);
    auto g = import_onnx_bytes(model_bytes, (dir / "model.onnx").string());
    bool narrow = false;
    if (!g)
      if (std::string bytes = narrow_doubles(model_bytes); !bytes.empty()) {
        g = import_onnx_bytes(bytes, (dir / "model.onnx").string());  // on failure, the narrowed model's reason
        narrow = static_cast<bool>(g);
      }
    if (!g) {
      auto [bytes, b] = bind_int64_inputs(model_bytes, input_files);
      if (std::find(b.begin(), b.end(), true) != b.end()) g = import_onnx_bytes(bytes, (dir / "model.onnx").string()), bound = b;
    }
    if (!g) {
      std::string msg = g.error().message;
      r.skip_reason = msg.substr(msg.find(": ") + 2);
      return r;
    }
    std::vector<Tensor> inputs, expected;
    for (size_t i = 0; i < input_files.size(); ++i) {
      if (bound[i]) continue;
      auto t = load_data(input_files[i], narrow);
      if (!t) return r.skip_reason = t.error().message, r;
      inputs.push_back(t.take());
    }
    for (const auto &p : numbered(set.path(), "output")) {
      auto t = load_data(p, narrow);
      if (!t) return r.skip_reason = t.error().message, r;
      expected.push_back(t.take());
    }
    // Inputs the model folded to constants at import (e.g. shape tensors) are not graph inputs.
    if (inputs.size() != g->inputs.size()) return r.skip_reason = "test feeds inputs the model holds as initializers", r;
    auto outs = run_reference(*g, inputs);
    r.ran = true;
    if (!outs) return r.failure = outs.error().message, r;
    if (r.failure = check("reference", *outs, expected); !r.failure.empty()) return r;
    // The compiled path: the default passes, fusion, one JIT-compiled kernel per group.
    CompileOptions options;
    options.cache_dir = (fs::temp_directory_path() / "autotune_conformance_cache").string();
    auto fused = lower_to_stage(*g, Stage::kFused, PassContext{});
    if (!fused) return r.failure = "passes: " + fused.error().message, r;
    auto m = CompiledModel::compile(*fused, options);
    if (!m) return r.failure = "compile: " + m.error().message, r;
    for (const GroupInfo &gi : (*m)->groups()) {
      ++r.groups;
      if (!gi.fallback.empty()) ++r.fallbacks, r.fallback_reasons += " [" + gi.ops + ": " + gi.fallback + "]";
    }
    auto compiled = (*m)->run(inputs);
    if (!compiled) return r.failure = "compiled run: " + compiled.error().message, r;
    if (r.failure = check("compiled", *compiled, expected); !r.failure.empty()) return r;
  }
  return r;
}

TEST(OnnxConformance, SupportedNodeTestsMatchExpectedOutputs) {
  const fs::path root = AUTOTUNE_ONNX_TESTDATA;
  if (!fs::exists(root / "node")) GTEST_SKIP() << root << " not found: install Debian's libonnx-testdata";
  std::vector<CaseResult> results;
  for (const char *suite : {"node", "pytorch-converted", "pytorch-operator", "simple"}) {
    if (!fs::exists(root / suite)) continue;
    std::vector<fs::path> dirs;
    for (const auto &e : fs::directory_iterator(root / suite))
      if (fs::exists(e.path() / "model.onnx")) dirs.push_back(e.path());
    std::sort(dirs.begin(), dirs.end());
    for (const auto &d : dirs) results.push_back(run_case(d));
  }
  int ran = 0, passed = 0, groups = 0, fallbacks = 0;
  std::map<std::string, int> skip_counts;
  for (const auto &r : results) {
    if (!r.ran) {
      ++skip_counts[r.skip_reason.substr(0, r.skip_reason.find(" (", 40))];
      std::printf("skip %s: %s\n", r.name.c_str(), r.skip_reason.c_str());
      continue;
    }
    ++ran;
    groups += r.groups;
    fallbacks += r.fallbacks;
    if (r.failure.empty()) {
      ++passed;
      std::printf("pass %s%s\n", r.name.c_str(), r.fallback_reasons.empty() ? "" : (" (reference executor for" + r.fallback_reasons + ")").c_str());
    } else {
      ADD_FAILURE() << r.name << ": " << r.failure;
    }
  }
  std::printf("ONNX conformance: %d run, %d passed (reference and compiled), %zu skipped (of %zu); "
              "%d compiled groups, %d left to the reference executor\n",
              ran, passed, results.size() - ran, results.size(), groups - fallbacks, fallbacks);
  // The suite must really exercise the executor: the supported ops cover well over a hundred tests.
  EXPECT_GE(ran, 100);
}

}  // namespace
}  // namespace autotune
