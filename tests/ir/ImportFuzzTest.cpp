// Truncated and bit-flipped copies of real models: each must import into a valid graph or end
// in a clean one-line error naming the file, never a crash, hang or huge allocation.
#include <gtest/gtest.h>

#include "ir/Files.h"
#include "ir/Reference.h"
#include "tests/ir/TestUtil.h"

namespace autotune {
namespace {

struct Outcome {
  int valid = 0, errors = 0;
};

void check_variant(const std::string &bytes, const std::string &label, Outcome &o) {
  auto g = import_onnx_bytes(bytes, label);
  if (!g) {
    const std::string &msg = g.error().message;
    EXPECT_EQ(msg.rfind(label + ": ", 0), 0u) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    ++o.errors;
    return;
  }
  auto ok = verify_graph(*g);
  EXPECT_TRUE(static_cast<bool>(ok)) << label << ": " << ok.error().message;
  // A graph that imports must also run (small models only: the variants come from them).
  auto out = run_reference(*g, random_inputs(*g, 1));
  EXPECT_TRUE(static_cast<bool>(out)) << label << ": " << (out ? "" : out.error().message);
  ++o.valid;
}

TEST(ImportFuzz, TruncatedAndBitFlippedModelsFailCleanly) {
  uint64_t state = 12345;
  auto next = [&state] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return state >> 33;
  };
  Outcome total;
  int variants = 0;
  for (const char *name : {"tiny_cnn", "mlp", "shape_ops"}) {
    auto bytes = read_file(testing::model_path(name));
    ASSERT_TRUE(static_cast<bool>(bytes));
    const std::string &orig = *bytes;
    for (int i = 0; i < 60; ++i, ++variants) {  // truncations at spread-out lengths
      size_t len = orig.size() * static_cast<size_t>(i) / 60 + next() % 7;
      check_variant(orig.substr(0, std::min(len, orig.size() - 1)), std::string(name) + ".trunc" + std::to_string(i), total);
    }
    for (int i = 0; i < 120; ++i, ++variants) {  // one to three flipped bits each
      std::string v = orig;
      for (int k = 0, flips = 1 + static_cast<int>(next() % 3); k < flips; ++k)
        v[next() % v.size()] ^= static_cast<char>(1u << (next() % 8));
      check_variant(v, std::string(name) + ".flip" + std::to_string(i), total);
    }
  }
  std::printf("fuzz: %d variants, %d imported and ran, %d clean errors\n", variants, total.valid, total.errors);
  EXPECT_EQ(variants, 540);
  EXPECT_GT(total.errors, 100);  // the corruption is real: many variants must be rejected
}

}  // namespace
}  // namespace autotune
