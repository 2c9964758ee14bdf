// Targets: host detection, named ISAs and description files, what the host can run, the code
// each target gets (no 512-bit registers for avx2 on any host), and its measured peak.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "codegen/Jit.h"
#include "codegen/Lower.h"
#include "codegen/Peak.h"
#include "ir/Parser.h"
#include "ir/Pass.h"

namespace autotune {
namespace {

namespace fs = std::filesystem;

std::string write_temp(const std::string &name, const std::string &text) {
  std::string path = (fs::temp_directory_path() / ("autotune_target_" + std::to_string(::getpid()) + "_" + name)).string();
  std::ofstream(path) << text;
  return path;
}

TEST(Target, HostDetectionFillsEveryField) {
  const Target &h = host_target();
  EXPECT_EQ(h.name, "host");
  EXPECT_FALSE(h.triple.empty());
  EXPECT_FALSE(h.cpu.empty());
  if (h.isa == "avx512") {
    EXPECT_EQ(h.lanes, 16);
    EXPECT_EQ(h.vector_registers, 32);
  } else if (h.isa == "avx2") {
    EXPECT_EQ(h.lanes, 8);
    EXPECT_EQ(h.vector_registers, 16);
  }
  EXPECT_GE(h.l1_bytes, 16 << 10);
  EXPECT_GE(h.l2_bytes, h.l1_bytes);
  EXPECT_GE(h.threads, 1);
  EXPECT_GE(h.threads, h.cores);
  EXPECT_TRUE(static_cast<bool>(h.runnable_here()));
  // 512-bit FMAs a cycle: measured on an AVX-512 host (1 or 2), unknown elsewhere.
  if (h.isa == "avx512") {
    EXPECT_TRUE(h.wide_fma_pipes == 1 || h.wide_fma_pipes == 2) << h.wide_fma_pipes;
  } else {
    EXPECT_EQ(h.wide_fma_pipes, 0);
  }
}

TEST(Target, NamedIsasResolveOnTopOfTheHost) {
  auto avx2 = resolve_target("avx2");
  ASSERT_TRUE(static_cast<bool>(avx2)) << avx2.error().message;
  EXPECT_EQ(avx2->isa, "avx2");
  EXPECT_EQ(avx2->lanes, 8);
  EXPECT_EQ(avx2->vector_registers, 16);
  EXPECT_EQ(avx2->l2_bytes, host_target().l2_bytes);  // what the name does not say is the host's
  auto avx512 = resolve_target("avx512");
  ASSERT_TRUE(static_cast<bool>(avx512));
  EXPECT_EQ(avx512->lanes, 16);
  if (host_target().isa == "avx512") {
    // The host's own ISA by name keys the same records; a narrower ISA keys its own.
    EXPECT_EQ(avx512->key(2), host_target().key(2));
    EXPECT_NE(avx2->key(2), host_target().key(2));
  }
  EXPECT_EQ(resolve_target("host")->key(2), host_target().key(2));
  EXPECT_EQ(resolve_target("neon").error().message, "unknown target 'neon' (host, avx2, avx512, or a JSON file)");
}

TEST(Target, ADescriptionFileOverridesTheFieldsItNames) {
  std::string path = write_temp("small.json", R"({"l2_bytes": 1048576, "threads": 1, "fma_units": 1, "wide_fma_pipes": 1})");
  auto t = resolve_target(path);
  ASSERT_TRUE(static_cast<bool>(t)) << t.error().message;
  EXPECT_EQ(t->l2_bytes, 1 << 20);
  EXPECT_EQ(t->threads, 1);
  EXPECT_EQ(t->fma_units, 1);
  EXPECT_EQ(t->wide_fma_pipes, 1);
  EXPECT_EQ(t->lanes, host_target().lanes);
  EXPECT_EQ(t->name, "autotune_target_" + std::to_string(::getpid()) + "_small");
  // What `autotune target --json` prints reads back as the same target.
  std::string round = write_temp("round.json", host_target().to_json());
  EXPECT_EQ(resolve_target(round)->key(2), host_target().key(2));
  fs::remove(path), fs::remove(round);
}

TEST(Target, BadDescriptionsAreErrorsNamingTheFile) {
  for (const auto &[text, why] : std::vector<std::pair<std::string, std::string>>{
           {R"({"lanes": 3})", "lanes must be 4, 8 or 16"},
           {R"({"wide_fma_pipes": 9})", "wide_fma_pipes must be between 0 (unknown) and 4"},
           {R"({"vector_width": 8})", "unknown field 'vector_width'"},
           {R"({"l1_bytes": "big"})", "type must be number"},
           {"not json", "not a JSON object"}}) {
    std::string path = write_temp("bad.json", text);
    auto t = resolve_target(path);
    ASSERT_FALSE(static_cast<bool>(t)) << text;
    EXPECT_EQ(t.error().message.rfind(path + ": ", 0), 0u) << t.error().message;
    EXPECT_NE(t.error().message.find(why), std::string::npos) << t.error().message;
    fs::remove(path);
  }
}

TEST(Target, ATargetTheHostCannotRunIsRefusedByName) {
  // A feature this host lacks (the host's own string says which it has not).
  std::string missing;
  for (const char *f : {"amx-fp16", "avx512vp2intersect", "avx512f", "avx2"})
    if (host_target().features.find(std::string("+") + f) == std::string::npos) {
      missing = f;
      break;
    }
  if (missing.empty()) GTEST_SKIP() << "this host has every feature the test knows to ask for";
  std::string path = write_temp("future.json", "{\"features\": \"+" + missing + "\"}");
  auto t = resolve_target(path);
  ASSERT_TRUE(static_cast<bool>(t)) << t.error().message;
  auto jit = Jit::create({"", *t});
  ASSERT_FALSE(static_cast<bool>(jit));
  EXPECT_NE(jit.error().message.find("needs the CPU feature " + missing + ", which this machine"), std::string::npos) << jit.error().message;
  fs::remove(path);
}

/** The assembly of a conv group lowered with `target`'s default schedule. */
std::string conv_assembly(const Target &target) {
  auto g = parse_text(R"(def @main(%x: Tensor[(1, 32, 8, 8), float32]) -> Tensor[(1, 64, 8, 8), float32] {
    %w = constant(Tensor[(64, 32, 3, 3), float32]);
    %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1]);
    %1 = nn.relu(%0);
    return %1;
  })");
  EXPECT_TRUE(static_cast<bool>(g));
  auto f = run_passes(*g, {"fuse-ops"}, PassContext{});
  EXPECT_TRUE(static_cast<bool>(f));
  const Graph &body = *f->nodes[0].body;
  auto k = lower_group(body, "conv", default_schedule(body, target));
  EXPECT_TRUE(static_cast<bool>(k));
  auto jit = Jit::create({"", target});
  EXPECT_TRUE(static_cast<bool>(jit)) << jit.error().message;
  auto text = (*jit)->assembly(*k);
  EXPECT_TRUE(static_cast<bool>(text));
  return text ? *text : "";
}

TEST(Target, Avx2CodeHasNo512BitRegistersOnAnyHost) {
  auto avx2 = resolve_target("avx2");
  ASSERT_TRUE(static_cast<bool>(avx2));
  if (auto st = avx2->runnable_here(); !st) GTEST_SKIP() << st.error().message;
  std::string text = conv_assembly(*avx2);
  EXPECT_NE(text.find("vfmadd"), std::string::npos);
  EXPECT_NE(text.find("%ymm"), std::string::npos);
  EXPECT_EQ(text.find("%zmm"), std::string::npos);
}

TEST(Target, Avx512CodeUses512BitRegisters) {
  auto avx512 = resolve_target("avx512");
  ASSERT_TRUE(static_cast<bool>(avx512));
  if (auto st = avx512->runnable_here(); !st) GTEST_SKIP() << st.error().message;
  std::string text = conv_assembly(*avx512);
  EXPECT_NE(text.find("vfmadd"), std::string::npos);
  EXPECT_NE(text.find("%zmm"), std::string::npos);
}

TEST(Target, TheMeasuredPeakIsWithinWhatTheHardwareAllows) {
  // Not a speed assertion: a bound that an FMA loop LLVM had folded away (it once was: an
  // absurd peak) or an unrun kernel cannot meet. At most lanes x 2 flops x FMA units x 6 GHz.
  for (const char *name : {"avx2", "avx512"}) {
    auto t = resolve_target(name);
    ASSERT_TRUE(static_cast<bool>(t));
    if (!t->runnable_here()) continue;
    auto jit = Jit::create({"", *t});
    ASSERT_TRUE(static_cast<bool>(jit));
    auto peak = measure_fma_peak(**jit, 1);
    ASSERT_TRUE(static_cast<bool>(peak)) << peak.error().message;
    EXPECT_GT(*peak, 1.0) << name;
    EXPECT_LT(*peak, t->lanes * 2.0 * t->fma_units * 6.0) << name;
  }
}

}  // namespace
}  // namespace autotune
