#pragma once
// Helpers shared by the tests (the ir tests, and header-only helpers the others include too).
#include <gtest/gtest.h>

#include <string>

#include "ir/Graph.h"
#include "ir/OnnxImport.h"
#include "ir/Parser.h"
#include "ir/Pass.h"

namespace autotune::testing {

inline std::string model_path(const std::string &name) { return std::string(AUTOTUNE_MODELS_DIR) + "/" + name + ".onnx"; }

/**
 * Passes with nchwc-layout off: the model in NCHW throughout, the layout the NCHW partition moves
 * (prologues, chain and expand tiles) apply to.
 */
inline PassContext nchw_throughout() {
  PassContext ctx;
  ctx.disabled.insert("nchwc-layout");
  return ctx;
}

/** Imports a generated test model; fails the test with the importer's message otherwise. */
inline Graph load_model(const std::string &name) {
  auto g = import_onnx_file(model_path(name));
  EXPECT_TRUE(static_cast<bool>(g)) << (g ? "" : g.error().message);
  return g ? g.take() : Graph{};
}

/** Parses IR text that a test expects to be valid. */
inline Graph parse_ok(const std::string &text) {
  auto g = parse_text(text);
  EXPECT_TRUE(static_cast<bool>(g)) << (g ? "" : g.error().message);
  return g ? g.take() : Graph{};
}

/** The message of an expected failure, or "" (and a test failure) when it succeeded. */
template <typename T>
std::string error_of(const Expected<T> &e) {
  EXPECT_FALSE(static_cast<bool>(e)) << "expected an error";
  return e ? "" : e.error().message;
}

/** Runs a shell command, returning its exit code and capturing stdout+stderr in `out`. */
int run_command(const std::string &cmd, std::string *out);

}  // namespace autotune::testing
