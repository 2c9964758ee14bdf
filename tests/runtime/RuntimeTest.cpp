// The runtime: memory planning, the thread pool, and whole models compiled and checked against
// the reference executor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <stdexcept>

#include "codegen/Lower.h"
#include "codegen/Schedule.h"
#include "codegen/Winograd.h"
#include "db/TuningDb.h"
#include "db/Workload.h"
#include "codegen/Jit.h"
#include "runtime/ThreadPool.h"
#include "ir/OnnxImport.h"
#include "ir/Partition.h"
#include "ir/Pass.h"
#include "ir/Reference.h"
#include "runtime/BoundKernel.h"
#include "runtime/Runtime.h"
#include "runtime/Traffic.h"
#include "tests/OnnxBuilder.h"
#include "tests/ir/TestUtil.h"

namespace autotune {
namespace {

std::string model_path(const std::string &name) { return std::string(AUTOTUNE_MODELS_DIR) + "/" + name + ".onnx"; }

CompileOptions test_options() {
  CompileOptions o;
  o.cache_dir = (std::filesystem::temp_directory_path() / "autotune_runtime_test_cache").string();
  return o;
}

TEST(MemoryPlan, LiveBuffersNeverOverlapAndDeadOnesShareSpace) {
  std::mt19937 rng(7);
  std::vector<size_t> bytes;
  std::vector<std::pair<int, int>> life;
  size_t sum = 0;
  for (int i = 0; i < 60; ++i) {
    bytes.push_back(64 + rng() % 10000);
    int a = static_cast<int>(rng() % 50);
    life.emplace_back(a, a + static_cast<int>(rng() % 5));
    sum += (bytes.back() + 63) / 64 * 64;
  }
  MemoryPlan p = plan_memory(bytes, life);
  for (size_t i = 0; i < bytes.size(); ++i) {
    EXPECT_EQ(p.offsets[i] % 64, 0u);
    for (size_t j = i + 1; j < bytes.size(); ++j) {
      bool live_together = life[i].first <= life[j].second && life[j].first <= life[i].second;
      bool overlap = p.offsets[i] < p.offsets[j] + bytes[j] && p.offsets[j] < p.offsets[i] + bytes[i];
      EXPECT_FALSE(live_together && overlap) << i << " and " << j;
    }
  }
  EXPECT_LT(p.total, sum / 2);
}

TEST(ThreadPool, EveryIndexRunsExactlyOnce) {
  ThreadPool pool(3);
  for (int64_t n : {1, 2, 3, 7, 1000}) {
    std::vector<std::atomic<int>> hits(n);
    for (int rep = 0; rep < 20; ++rep)
      pool.parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[i]++;
      });
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 20) << n;
  }
}

TEST(ThreadPool, AHandOffIsTimedOnlyWithOtherThreads) {
  // One thread hands nothing off: 0, the "unknown" of a record. Two threads: a positive time, below
  // the millisecond a worker spins before it sleeps (a wake-up is not a hand-off).
  EXPECT_EQ(ThreadPool(1).handoff_ns(), 0);
  ThreadPool two(2);
  double ns = two.handoff_ns();
  EXPECT_GT(ns, 0);
  EXPECT_LT(ns, 1e6);
  EXPECT_EQ(two.handoff_ns(0), 0);
}

TEST(ThreadPool, ForEachIndexRunsEveryIndexOnceAndRethrows) {
  for (int threads : {0, 1, 2, 3})
    for (size_t n : {size_t{0}, size_t{1}, size_t{5}, size_t{1000}}) {
      std::vector<std::atomic<int>> hits(n);
      for_each_index(n, threads, [&](size_t i) { hits[i]++; });
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << n << " on " << threads;
    }
  for (int threads : {1, 2})
    EXPECT_THROW(for_each_index(100, threads, [](size_t i) {
      if (i == 37) throw std::runtime_error("item 37");
    }), std::runtime_error) << threads;
}

TEST(PackCache, SharesEachPackingAndStaysWithinItsBudget) {
  TensorType t{DType::kFloat32, {48, 20, 3, 3}};
  Tensor w = random_tensor(t, 1), w2 = random_tensor(t, 2);
  WeightPacking direct{1, WeightPacking::kOIHWToOIHWo, 16, 0}, wino{1, WeightPacking::kWinograd, 16, 4};
  auto same_bytes = [](const Tensor &a, const Tensor &b) {
    return a.type() == b.type() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
  };
  PackCache cache(size_t{1} << 30);
  Tensor a = cache.get(w, direct);
  EXPECT_TRUE(same_bytes(a, pack_weight(w, direct)));
  EXPECT_EQ(cache.get(w, direct).raw(), a.raw());   // the same packing of the same weight: shared
  EXPECT_NE(cache.get(w2, direct).raw(), a.raw());  // another weight of the same shape: its own
  EXPECT_TRUE(same_bytes(cache.get(w2, direct), pack_weight(w2, direct)));
  // Winograd F(4x4): U[xi][o/B][c][o%B] = (G g G^T)[xi] for g = w[o][c], against the definition.
  Tensor u = cache.get(w, wino);
  ASSERT_EQ(u.nbytes(), size_t{36} * 48 * 20 * 4);
  const WinogradMatrices &m = winograd_matrices(4);
  double worst = 0;
  for (int64_t o = 0; o < 48; ++o)
    for (int64_t c = 0; c < 20; ++c)
      for (int i = 0; i < 6; ++i)
        for (int j = 0; j < 6; ++j) {
          double want = 0;
          for (int k = 0; k < 3; ++k)
            for (int l = 0; l < 3; ++l) want += m.g[i][k] * w.f32()[((o * 20 + c) * 3 + k) * 3 + l] * m.g[j][l];
          double got = u.f32()[(((i * 6 + j) * 3 + o / 16) * 20 + c) * 16 + o % 16];
          worst = std::max(worst, std::abs(got - want));
        }
  EXPECT_LT(worst, 1e-5);
  EXPECT_EQ(cache.entries(), 3u);
  EXPECT_EQ(cache.bytes(), 2 * a.nbytes() + u.nbytes());
  // A budget of one direct packing: the least recently used goes, and comes back packed anew.
  PackCache small(a.nbytes());
  Tensor first = small.get(w, direct);
  small.get(w2, direct);
  EXPECT_EQ(small.entries(), 1u);
  EXPECT_EQ(small.bytes(), a.nbytes());
  Tensor again = small.get(w, direct);
  EXPECT_NE(again.raw(), first.raw());
  EXPECT_TRUE(same_bytes(again, first));
}

/** Seeded random inputs of `g` (the imported graph) and the reference executor's outputs for them. */
struct Checked {
  std::vector<Tensor> inputs, expected;
};

/** Runs `m` on seeded random inputs and expects every output within 1e-4 of the reference executor's on `g`. */
Checked expect_matches_reference(const Graph &g, CompiledModel &m) {
  Checked c;
  c.inputs = random_inputs(g, 5);
  auto expected = run_reference(g, c.inputs);
  auto got = m.run(c.inputs);
  EXPECT_TRUE(expected && got) << (got ? expected ? "" : expected.error().message : got.error().message);
  if (!expected || !got) return c;
  for (size_t i = 0; i < got->size(); ++i) {
    auto d = compare((*got)[i], (*expected)[i]);
    EXPECT_TRUE(static_cast<bool>(d));
    if (!d) continue;
    EXPECT_LT(d->relative(), 1e-4) << "output " << i;
    EXPECT_GT(d->max_ref, 0.0);
  }
  c.expected = expected.take();
  return c;
}

void expect_model_matches(const std::string &name) {
  SCOPED_TRACE(name);
  auto m = CompiledModel::load(model_path(name), test_options());
  ASSERT_TRUE(static_cast<bool>(m)) << m.error().message;
  for (const GroupInfo &g : (*m)->groups()) EXPECT_EQ(g.fallback, "") << g.ops;
  auto g = import_onnx_file(model_path(name));
  ASSERT_TRUE(static_cast<bool>(g));
  expect_matches_reference(*g, **m);
}

TEST(CompiledModel, SmallModelsMatchTheReference) {
  for (const char *name : {"tiny_cnn", "mlp", "shape_ops", "legacy", "transformer", "vit_tiny", "modern_cnn"}) expect_model_matches(name);
}
TEST(CompiledModel, ResNet18MatchesTheReference) { expect_model_matches("resnet18_bn"); }
TEST(CompiledModel, ResNet50MatchesTheReference) { expect_model_matches("resnet50"); }

// With two threads the runtime splits rows where the model's cut says so (codegen/ThreadRows):
// depthwise convs, 1x1 convs and layout changes taking runs of rows, every channel of them. The
// outputs are the reference's.
TEST(CompiledModel, GroupsSplittingRowsOverTwoThreadsMatchTheReference) {
  for (const char *name : {"mobilenet_v2", "efficientnet_b0"}) {
    SCOPED_TRACE(name);
    CompileOptions o = test_options();
    o.threads = 2;
    auto m = CompiledModel::load(model_path(name), o);
    ASSERT_TRUE(static_cast<bool>(m)) << m.error().message;
    int rows = 0;
    for (const GroupInfo &g : (*m)->groups()) rows += g.split_rows;
    EXPECT_GE(rows, 10);
    auto g = import_onnx_file(model_path(name));
    ASSERT_TRUE(static_cast<bool>(g));
    expect_matches_reference(*g, **m);
  }
}

// A tuned step list whose threads split channels takes the model's row split too where its list
// can (with_rows_split): MobileNetV2's 28x28 depthwise conv "tuned" to its channel default in a
// real database still splits rows in the model, and not with --thread-split group's option.
TEST(CompiledModel, ATunedListTakesTheModelsRowSplit) {
  CompileOptions o = test_options();
  o.threads = 2;
  auto m = CompiledModel::load(model_path("mobilenet_v2"), o);
  ASSERT_TRUE(static_cast<bool>(m)) << m.error().message;
  const Graph &fused = (*m)->graph();
  int dw = -1;
  for (size_t i = 0; i < fused.nodes.size() && dw < 0; ++i) {
    const Graph &body = *fused.nodes[i].body;
    bool depthwise = is_conv_op(body.nodes[0].op) && body.nodes[0].attrs.i("groups") > 1 && body.nodes[0].type.shape[2] == 28;
    if (depthwise && (*m)->groups()[i].split_rows && !splits_rows(body, default_schedule(body, o.target))) dw = static_cast<int>(i);
  }
  ASSERT_GE(dw, 0) << "no 28x28 depthwise conv moved to rows";
  const Graph &body = *fused.nodes[dw].body;
  std::string db_path = (std::filesystem::temp_directory_path() / "autotune_runtime_rows.db").string();
  for (const char *suffix : {"", "-wal", "-shm"}) std::filesystem::remove(db_path + suffix);
  {
    auto db = TuningDb::open(db_path);
    ASSERT_TRUE(static_cast<bool>(db)) << db.error().message;
    std::string target = o.target.key(o.threads), hash = workload_hash(body);
    ASSERT_TRUE(static_cast<bool>((*db)->upsert_workload(hash, target, "ir", 1)));
    for (int k = 0; k < kConfirmations; ++k) {
      TuningRecord r;
      r.workload_hash = hash, r.target = target, r.status = "ok", r.runs = 10;
      r.schedule = schedule_to_json(default_schedule(body, o.target));
      r.median_s = r.min_s = 0.9e-4, r.baseline_s = 1e-4;
      ASSERT_TRUE(static_cast<bool>((*db)->add_record(r)));
    }
  }
  o.db_path = db_path;
  auto g = import_onnx_file(model_path("mobilenet_v2"));
  ASSERT_TRUE(static_cast<bool>(g));
  for (bool split : {true, false}) {
    o.split_rows = split;
    auto tuned = CompiledModel::load(model_path("mobilenet_v2"), o);
    ASSERT_TRUE(static_cast<bool>(tuned)) << tuned.error().message;
    const GroupInfo &info = (*tuned)->groups()[dw];
    EXPECT_TRUE(info.tuned) << info.untuned_reason;
    EXPECT_EQ(info.split_rows, split) << info.schedule;
    if (split) expect_matches_reference(*g, **tuned);
  }
  for (const char *suffix : {"", "-wal", "-shm"}) std::filesystem::remove(db_path + suffix);
}

// Every squeeze-excitation multiply of the generated EfficientNet recomputed in the 1x1 conv
// that reads it (ir/Partition): compiled, no group on the reference executor, the 1x1 convs with
// a prologue still on pixel lanes, and the output the reference's. In NCHW throughout, where every
// multiply is a plain one (in NCHW16c, from 14x14 on, it takes its scale's layout change: below).
TEST(CompiledModel, ProloguePartitionMatchesTheReference) {
  auto g = import_onnx_file(model_path("efficientnet_b0"));
  ASSERT_TRUE(static_cast<bool>(g));
  auto f = lower_to_stage(*g, Stage::kFused, testing::nchw_throughout());
  ASSERT_TRUE(static_cast<bool>(f));
  std::vector<int> legal;
  int multiplies = 0;  // the squeeze-excitation's (the others: the classifier's flatten)
  for (const PartitionMove &m : partition_moves(*f))
    if (m.why_not.empty() && m.kind == PartitionMove::kPrologue) {
      legal.push_back(m.producer);
      multiplies += f->nodes[m.producer].body->nodes.size() == 1 && f->nodes[m.producer].body->nodes[0].op == "multiply";
    }
  ASSERT_GE(multiplies, 10);
  auto all = apply_partition(*f, partition_json(legal));
  ASSERT_TRUE(static_cast<bool>(all)) << all.error().message;
  Graph merged = all.take();
  auto m = CompiledModel::compile(merged, test_options());
  ASSERT_TRUE(static_cast<bool>(m)) << m.error().message;
  int prologues = 0, pixel_lanes = 0;
  for (const GroupInfo &gi : (*m)->groups()) {
    EXPECT_EQ(gi.fallback, "") << gi.ops;
    if (gi.ops.rfind("multiply+nn.conv2d", 0) != 0) continue;
    ++prologues;
    pixel_lanes += gi.schedule.find("vectorize pl") != std::string::npos;
  }
  EXPECT_EQ(prologues, multiplies);
  EXPECT_GT(pixel_lanes, 0) << "a 1x1 conv over enough pixels keeps its pixel lanes with a prologue";
  Checked checked = expect_matches_reference(*g, **m);
  ASSERT_FALSE(checked.expected.empty());

  // Saved in a tuning database for FuseOps's partition, the moves are what a deploy runs: the
  // same groups as above, unless FuseOps's partition is asked for.
  std::string db_path = (std::filesystem::temp_directory_path() / "autotune_runtime_partition.db").string();
  std::filesystem::remove(db_path);
  CompileOptions o = test_options();
  {
    auto db = TuningDb::open(db_path);
    ASSERT_TRUE(static_cast<bool>(db)) << db.error().message;
    std::string target = o.target.key(o.threads);
    ASSERT_TRUE(static_cast<bool>((*db)->save_partition(model_hash(*f), target, partition_json(legal), "")));
  }
  o.db_path = db_path;
  auto deployed = CompiledModel::compile(*f, o);
  ASSERT_TRUE(static_cast<bool>(deployed)) << deployed.error().message;
  EXPECT_EQ((*deployed)->groups().size(), merged.nodes.size());
  EXPECT_EQ((*deployed)->partition().rfind("searched", 0), 0u) << (*deployed)->partition();
  auto again = (*deployed)->run(checked.inputs);
  ASSERT_TRUE(static_cast<bool>(again));
  EXPECT_LT(compare((*again)[0], checked.expected[0])->relative(), 1e-4);
  o.fuseops_partition = true;
  auto plain = CompiledModel::compile(*f, o);
  ASSERT_TRUE(static_cast<bool>(plain)) << plain.error().message;
  EXPECT_EQ((*plain)->groups().size(), f->nodes.size());
  for (const char *suffix : {"", "-wal", "-shm"}) std::filesystem::remove(db_path + suffix);
}

/** Generated model `name` as imported (g) and with FuseOps's partition (f); with `plain`, in NCHW throughout (the chain tiles' layout). */
void import_and_fuse(const char *name, std::optional<Graph> &g, std::optional<Graph> &f, bool plain = false) {
  auto imported = import_onnx_file(model_path(name));
  ASSERT_TRUE(static_cast<bool>(imported)) << imported.error().message;
  auto fused = lower_to_stage(*imported, Stage::kFused, plain ? testing::nchw_throughout() : PassContext{});
  ASSERT_TRUE(static_cast<bool>(fused)) << fused.error().message;
  g = imported.take(), f = fused.take();
}

/**
 * A group of two convs run as one kernel at a tile: steps on the joined nests placing one at a
 * block of the other (not a chain of segments, whose stem segment computes its patches at a block
 * of rows too).
 */
bool tiled_chain(const GroupInfo &gi) {
  size_t convs = 0;
  for (size_t at = gi.ops.find("nn.conv2d"); at != std::string::npos; at = gi.ops.find("nn.conv2d", at + 1)) ++convs;
  return convs >= 2 && gi.schedule.rfind("chain of 2", 0) != 0 &&
         (gi.schedule.find("compute_at yo;") != std::string::npos || gi.schedule.find("compute_at co;") != std::string::npos);
}

// Prologues with index moves, in NCHW16c as nchwc-layout leaves the generated models: every
// squeeze-excitation multiply of EfficientNet-B0 from 14x14 on, which takes its per-channel
// scale's layout change (nn.to_nchwc+multiply), and the layout changes MobileNetV2 and
// EfficientNet-B0 read into a conv, each recomputed at the reads of the blocked (or plain) conv
// after it: compiled, none on the reference executor, the output the reference's.
TEST(CompiledModel, ProloguesWithLayoutChangesMatchTheReference) {
  for (const char *name : {"efficientnet_b0", "mobilenet_v2"}) {
    SCOPED_TRACE(name);
    std::optional<Graph> g, f;
    ASSERT_NO_FATAL_FAILURE(import_and_fuse(name, g, f));
    std::vector<int> legal;
    int scales = 0, changes = 0;
    for (const PartitionMove &m : partition_moves(*f)) {
      if (!m.why_not.empty() || m.kind != PartitionMove::kPrologue) continue;
      legal.push_back(m.producer);
      std::string ops;
      for (const Node &n : f->nodes[m.producer].body->nodes) ops += n.op + "+";
      scales += ops.rfind("nn.to_nchwc+multiply+", 0) == 0;  // with its product changed back to NCHW at 28x28
      changes += ops == "nn.to_nchwc+" || ops == "nn.from_nchwc+";
    }
    if (std::string(name) == "efficientnet_b0") {
      EXPECT_GE(scales, 10) << "each squeeze-excitation multiply in NCHW16c is a prologue";
    }
    EXPECT_GE(changes, 2) << "a layout change read by a conv is a prologue";
    auto merged = apply_partition(*f, partition_json(legal));
    ASSERT_TRUE(static_cast<bool>(merged)) << merged.error().message;
    auto m = CompiledModel::compile(*merged, test_options());
    ASSERT_TRUE(static_cast<bool>(m)) << m.error().message;
    // Each move takes a group away (a prologue of a prologue joins the conv with it: EfficientNet-B0's
    // 28x28 multiply and the change of its product back to NCHW).
    EXPECT_EQ((*m)->groups().size(), f->nodes.size() - legal.size());
    int recomputed = 0;
    for (const GroupInfo &gi : (*m)->groups()) {
      EXPECT_EQ(gi.fallback, "") << gi.ops;
      recomputed += gi.ops.rfind("nn.to_nchwc+multiply+", 0) == 0 && gi.ops.find("nn.conv2d") != std::string::npos;
    }
    EXPECT_EQ(recomputed, scales);
    expect_matches_reference(*g, **m);
  }
}

// Chains: a group of one anchor run in the kernel of the group that reads it (codegen's
// segments, one after another, or where it fits the chain tile: the depthwise conv per block of
// the 1x1 conv's rows). Every chain move of the generated MobileNetV2 (a depthwise conv and the
// 1x1 conv after it) and EfficientNet (squeeze-excitation's pool and convs), applied where the
// ones before leave it legal: compiled, none on the reference executor, the output the
// reference's. The chain tiles are NCHW's: MobileNetV2 in NCHW throughout (nchwc-layout blocks
// its convs from 28x28 down, which leaves it two chains at a tile).
TEST(CompiledModel, ChainPartitionsMatchTheReference) {
  for (const char *name : {"mobilenet_v2", "efficientnet_b0"}) {
    SCOPED_TRACE(name);
    std::optional<Graph> g, f;
    ASSERT_NO_FATAL_FAILURE(import_and_fuse(name, g, f, true));
    std::vector<int> chains;
    for (const PartitionMove &m : partition_moves(*f))
      if (m.why_not.empty() && m.kind == PartitionMove::kChain) chains.push_back(m.producer);
    ASSERT_GE(chains.size(), 3u);
    std::sort(chains.rbegin(), chains.rend());
    Graph merged = *f;
    int applied = 0;
    for (int p : chains) {
      auto next = apply_move(merged, p);
      if (!next) {
        EXPECT_NE(next.error().message.find("chain already"), std::string::npos) << next.error().message;
        continue;
      }
      merged = next.take();
      ++applied;
    }
    EXPECT_GE(applied, 3);
    auto m = CompiledModel::compile(merged, test_options());
    ASSERT_TRUE(static_cast<bool>(m)) << m.error().message;
    int chained = 0, tiled = 0;
    for (const GroupInfo &gi : (*m)->groups()) {
      EXPECT_EQ(gi.fallback, "") << gi.ops;
      chained += gi.schedule.rfind("chain of 2", 0) == 0;
      tiled += tiled_chain(gi);
    }
    EXPECT_EQ(chained + tiled, applied);
    if (std::string(name) == "mobilenet_v2") {
      EXPECT_GE(tiled, 4);
    }
    // A tiled chain's schedule is steps on the joined nests, a chain's otherwise one per segment:
    // JSON both ways, validated (the steps replayed; the segments against the segments).
    for (const Node &n : merged.nodes) {
      if (!is_chain(*n.body)) continue;
      KernelSchedule s = default_schedule(*n.body);
      if (s.steps.empty()) continue;
      auto back = schedule_from_json(schedule_to_json(s));
      ASSERT_TRUE(static_cast<bool>(back)) << back.error().message;
      EXPECT_EQ(*back, s);
      EXPECT_TRUE(static_cast<bool>(validate_schedule(*n.body, s)));
      break;
    }
    for (const Node &n : merged.nodes) {
      auto segs = split_segments(*n.body);
      ASSERT_TRUE(static_cast<bool>(segs)) << segs.error().message;
      if (segs->size() < 2) continue;
      KernelSchedule s = default_schedule(*n.body);
      if (!s.steps.empty()) continue;
      ASSERT_EQ(s.segments.size(), 2u);
      auto back = schedule_from_json(schedule_to_json(s));
      ASSERT_TRUE(static_cast<bool>(back)) << back.error().message;
      EXPECT_EQ(*back, s);
      EXPECT_TRUE(static_cast<bool>(validate_schedule(*n.body, s)));
      KernelSchedule one = s;
      one.segments.pop_back();
      auto st = validate_schedule(*n.body, one);
      ASSERT_FALSE(static_cast<bool>(st));
      EXPECT_NE(st.error().message.find("2 segments, the schedule 1"), std::string::npos) << st.error().message;
      break;
    }
    expect_matches_reference(*g, **m);
  }
}

/**
 * The chain moves `producers` of fused graph `f` (they share no group) applied at once, compiled
 * for the host's target and AVX2's where the host runs it: each a tiled chain, no group on the
 * reference executor, the model's output the reference's on `g`.
 */
void expect_tiled_chains_match_reference(const Graph &g, const Graph &f, std::vector<int> producers) {
  std::sort(producers.rbegin(), producers.rend());
  Graph merged = f;
  for (int p : producers) {
    auto next = apply_move(merged, p);
    ASSERT_TRUE(static_cast<bool>(next)) << next.error().message;
    merged = next.take();
  }
  std::vector<Target> targets{host_target()};
  if (auto avx2 = resolve_target("avx2"); avx2 && avx2->runnable_here()) targets.push_back(*avx2);
  for (const Target &t : targets) {
    SCOPED_TRACE(t.isa);
    CompileOptions o = test_options();
    o.target = t;
    auto m = CompiledModel::compile(merged, o);
    ASSERT_TRUE(static_cast<bool>(m)) << m.error().message;
    size_t tiled = 0;
    for (const GroupInfo &gi : (*m)->groups()) {
      EXPECT_EQ(gi.fallback, "") << gi.ops;
      tiled += tiled_chain(gi);
    }
    EXPECT_EQ(tiled, producers.size());
    expect_matches_reference(g, **m);
  }
}

TEST(CompiledModel, ExpansionsComputedPerBlockOfTheDepthwiseConvMatchTheReference) {
  // Every chain of a 1x1 conv and the stride-1 depthwise conv after it (MobileNetV2's and
  // EfficientNet-B0's expansions) whose default is the expand tile, applied at once (they share
  // no group), compiled and run against the reference executor: in NCHW throughout (the NCHW
  // tile: blocks of channels and rows), and as the models fuse by default, NCHW16c from 28x28 or
  // 14x14 down (the blocked tile: units of channel blocks, every row).
  for (auto [name, nchw] : {std::pair{"mobilenet_v2", true}, {"efficientnet_b0", true}, {"mobilenet_v2", false}, {"efficientnet_b0", false}}) {
    SCOPED_TRACE(std::string(name) + (nchw ? " in NCHW" : " as fused by default"));
    std::optional<Graph> g, f;
    ASSERT_NO_FATAL_FAILURE(import_and_fuse(name, g, f, nchw));
    std::vector<int> expansions;
    for (const PartitionMove &m : partition_moves(*f)) {
      if (!m.why_not.empty() || m.kind != PartitionMove::kChain) continue;
      auto one = apply_move(*f, m.producer);
      ASSERT_TRUE(static_cast<bool>(one)) << m.producer;
      KernelSchedule d = default_schedule(*one->nodes[m.consumers[0] - 1].body);
      bool expand = std::any_of(d.steps.begin(), d.steps.end(), [](const Step &st) { return st.op == "compute_at" && st.producer == "s1_pad"; });
      if (expand) expansions.push_back(m.producer);
    }
    EXPECT_GE(expansions.size(), 4u);
    // On the host's target, and on AVX2's where the host runs it (16 registers: 4 channels x 3
    // vectors of 8 per tile).
    expect_tiled_chains_match_reference(*g, *f, expansions);
  }
}

TEST(CompiledModel, ProjectionsReadingTheDepthwiseResultPerRowMatchTheReference) {
  // Every chain of a depthwise conv2d_nchwc and the 1x1 conv2d_nchwc after it (MobileNetV2's
  // projections in NCHW16c as it fuses by default: its first block's, then from 28x28 down) whose default is the blocked chain tile,
  // applied at once (they share no group): one kernel per block of output rows, the depthwise
  // result in a box, compiled for the host and AVX2 (where it runs) and run against the reference.
  std::optional<Graph> g, f;
  ASSERT_NO_FATAL_FAILURE(import_and_fuse("mobilenet_v2", g, f, false));
  std::vector<int> projections;
  for (const PartitionMove &m : partition_moves(*f)) {
    if (!m.why_not.empty() || m.kind != PartitionMove::kChain) continue;
    auto one = apply_move(*f, m.producer);
    ASSERT_TRUE(static_cast<bool>(one)) << m.producer;
    const Graph &body = *one->nodes[m.consumers[0] - 1].body;
    if (!std::any_of(body.nodes.begin(), body.nodes.end(), [](const Node &n) { return n.op == "nn.conv2d_nchwc" && n.attrs.i("groups") > 1; }))
      continue;
    KernelSchedule d = default_schedule(body);
    if (std::any_of(d.steps.begin(), d.steps.end(), [](const Step &st) { return st.op == "compute_at" && st.loop == "yo" && st.producer == "s0_conv2d"; }))
      projections.push_back(m.producer);
  }
  EXPECT_GE(projections.size(), 10u);  // the stride-1 and stride-2 depthwise convs from 112x112 (32 channels) to 7x7
  expect_tiled_chains_match_reference(*g, *f, projections);
}

/**
 * Einsum by its definition, independently of the importer's decomposition: every assignment of
 * the equation's letters (explicit output, no ellipsis) adds the product of the operands'
 * elements to the output element it names.
 */
Tensor einsum_by_definition(const std::string &equation, const std::vector<Tensor> &xs, const Shape &out_shape) {
  std::string lhs = equation.substr(0, equation.find("->")), out = equation.substr(equation.find("->") + 2);
  std::vector<std::string> terms;
  for (size_t at = 0, comma; at <= lhs.size(); at = comma + 1) {
    comma = lhs.find(',', at);
    if (comma == std::string::npos) comma = lhs.size();
    terms.push_back(lhs.substr(at, comma - at));
  }
  std::map<char, int64_t> size;
  for (size_t i = 0; i < terms.size(); ++i)
    for (size_t d = 0; d < terms[i].size(); ++d) size[terms[i][d]] = xs[i].shape()[d];
  std::string letters;
  for (const auto &[c, n] : size) letters += c;
  std::vector<double> acc(static_cast<size_t>(std::max<int64_t>(TensorType{DType::kFloat32, out_shape}.numel(), 1)), 0.0);
  std::map<char, int64_t> at;
  std::function<void(size_t)> visit = [&](size_t l) {
    if (l < letters.size()) {
      for (at[letters[l]] = 0; at[letters[l]] < size[letters[l]]; ++at[letters[l]]) visit(l + 1);
      return;
    }
    double p = 1;
    for (size_t i = 0; i < terms.size(); ++i) {
      int64_t flat = 0;
      for (char c : terms[i]) flat = flat * size[c] + at[c];
      p *= xs[i].f32()[flat];
    }
    int64_t o = 0;
    for (char c : out) o = o * size[c] + at[c];
    acc[o] += p;
  };
  visit(0);
  Tensor t(TensorType{DType::kFloat32, out_shape});
  for (size_t i = 0; i < acc.size(); ++i) t.f32()[i] = static_cast<float>(acc[i]);
  return t;
}

TEST(CompiledModel, EinsumMatchesItsDefinition) {
  // The common forms (attention's two products, a weight contracted as a dense layer, an outer
  // product, a full sum, three operands, a reduction of one operand's own index), imported, run
  // on the reference executor and compiled, each against the definition. Then one written with
  // an ellipsis and an implicit output, against its explicit twin; and the refusals.
  struct Case {
    std::string equation;
    std::vector<Shape> shapes;
    Shape out;
    bool weight = false;  // the last operand an initializer
  };
  std::vector<Case> cases{
      {"bhid,bhjd->bhij", {{2, 3, 5, 4}, {2, 3, 6, 4}}, {2, 3, 5, 6}},
      {"bhij,bhjd->bhid", {{2, 3, 5, 6}, {2, 3, 6, 4}}, {2, 3, 5, 4}},
      {"bsh,hd->bsd", {{2, 7, 16}, {16, 12}}, {2, 7, 12}, true},
      {"bh,dh->db", {{3, 16}, {12, 16}}, {12, 3}, true},
      {"h,hd->d", {{16}, {16, 12}}, {12}, true},
      {"i,j->ij", {{5}, {3}}, {5, 3}},
      {"ijk->", {{2, 3, 4}}, {}},
      {"ij,jk,kl->li", {{3, 4}, {4, 5}, {5, 2}}, {2, 3}},
      {"abc,cd->da", {{2, 3, 4}, {4, 5}}, {5, 2}},
  };
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const Case &c : cases) {
    SCOPED_TRACE(c.equation);
    testing::OnnxBuilder b;
    std::vector<std::string> names;
    std::vector<Tensor> given;
    for (size_t i = 0; i < c.shapes.size(); ++i) {
      names.push_back("x" + std::to_string(i));
      Tensor t(TensorType{DType::kFloat32, c.shapes[i]});
      for (int64_t k = 0; k < t.numel(); ++k) t.f32()[k] = u(rng);
      given.push_back(t);
      if (c.weight && i + 1 == c.shapes.size())
        b.initializer_f32(names.back(), c.shapes[i], std::vector<float>(t.f32(), t.f32() + t.numel()));
      else
        b.input(names.back(), onnx::TensorProto::FLOAT, c.shapes[i]);
    }
    b.node("Einsum", names, {"y"}, "einsum").string_attr("equation", c.equation).output("y", onnx::TensorProto::FLOAT, c.out);
    auto g = import_onnx_bytes(b.bytes(), "einsum.onnx");
    ASSERT_TRUE(static_cast<bool>(g)) << g.error().message;
    bool dense = std::any_of(g->nodes.begin(), g->nodes.end(), [](const Node &n) { return n.op == "nn.dense"; });
    EXPECT_EQ(dense, c.weight);
    std::vector<Tensor> inputs(given.begin(), given.end() - (c.weight ? 1 : 0));
    Tensor want = einsum_by_definition(c.equation, given, c.out);
    auto ref = run_reference(*g, inputs);
    ASSERT_TRUE(static_cast<bool>(ref)) << ref.error().message;
    EXPECT_LE(compare((*ref)[0], want)->relative(), 1e-6);
    auto m = CompiledModel::compile(*g, test_options());
    ASSERT_TRUE(static_cast<bool>(m)) << m.error().message;
    auto got = (*m)->run(inputs);
    ASSERT_TRUE(static_cast<bool>(got)) << got.error().message;
    EXPECT_LE(compare((*got)[0], want)->relative(), 1e-5);
  }
  // "...ij,...jk" (implicit: "...ik") is the batched matmul "zij,zjk->zik".
  auto twin = [](const std::string &eq) {
    testing::OnnxBuilder b;
    b.input("a", onnx::TensorProto::FLOAT, {3, 4, 5}).input("c", onnx::TensorProto::FLOAT, {3, 5, 2});
    b.node("Einsum", {"a", "c"}, {"y"}, "e").string_attr("equation", eq).output("y", onnx::TensorProto::FLOAT, {3, 4, 2});
    return import_onnx_bytes(b.bytes(), "e.onnx");
  };
  auto implicit = twin("...ij,...jk"), explicit_ = twin("zij,zjk->zik");
  ASSERT_TRUE(implicit && explicit_) << (implicit ? explicit_.error().message : implicit.error().message);
  auto in = random_inputs(*explicit_, 5);
  auto r1 = run_reference(*implicit, in), r2 = run_reference(*explicit_, in);
  ASSERT_TRUE(r1 && r2);
  EXPECT_EQ(compare((*r1)[0], (*r2)[0])->max_abs, 0.0);
  // A diagonal, and an index of two sizes, are one-line errors naming the node.
  auto refused = [](const std::string &eq, const Shape &sa, const Shape &sc) {
    testing::OnnxBuilder b;
    b.input("a", onnx::TensorProto::FLOAT, sa).input("c", onnx::TensorProto::FLOAT, sc);
    b.node("Einsum", {"a", "c"}, {"y"}, "bad").string_attr("equation", eq).output("y", onnx::TensorProto::FLOAT, {3});
    auto g = import_onnx_bytes(b.bytes(), "bad.onnx");
    return g ? std::string("(imported)") : g.error().message;
  };
  EXPECT_EQ(refused("ii,i->i", {3, 3}, {3}), "bad.onnx: node 'bad' (Einsum): index 'i' repeats in operand 0 (a diagonal), which is not supported");
  EXPECT_EQ(refused("ij,j->i", {3, 4}, {5}), "bad.onnx: node 'bad' (Einsum): index 'j' has size 4 in one operand and 5 in another");
}

TEST(CompiledModel, AnAttentionMaskComputedAtRunTimeMatchesTheReference) {
  // A bool mask input (int64 0/1 inside autotune), negated, selecting -10000 or the scores, then
  // the softmax: compiled and reference agree, and masked keys get no weight.
  testing::OnnxBuilder b;
  std::vector<float> big{-10000.0f};
  b.input("scores", onnx::TensorProto::FLOAT, {2, 4, 6, 6})
      .input("mask", onnx::TensorProto::BOOL, {2, 1, 1, 6})
      .initializer_f32("neg", {}, big)
      .node("Not", {"mask"}, {"masked"}, "not")
      .node("Where", {"masked", "neg", "scores"}, {"s2"}, "where")
      .node("Softmax", {"s2"}, {"p"}, "softmax", {{"axis", -1}})
      .output("p", onnx::TensorProto::FLOAT, {2, 4, 6, 6});
  auto g = import_onnx_bytes(b.bytes(), "mask.onnx");
  ASSERT_TRUE(static_cast<bool>(g)) << g.error().message;
  EXPECT_EQ(g->inputs[1].type.dtype, DType::kInt64);
  auto inputs = random_inputs(*g, 3);
  auto ref = run_reference(*g, inputs);
  ASSERT_TRUE(static_cast<bool>(ref)) << ref.error().message;
  auto fused = lower_to_stage(*g, Stage::kFused, PassContext{});
  ASSERT_TRUE(static_cast<bool>(fused));
  auto m = CompiledModel::compile(*fused, test_options());
  ASSERT_TRUE(static_cast<bool>(m)) << m.error().message;
  for (const GroupInfo &gi : (*m)->groups()) EXPECT_EQ(gi.fallback, "") << gi.ops;
  auto got = (*m)->run(inputs);
  ASSERT_TRUE(static_cast<bool>(got)) << got.error().message;
  EXPECT_LE(compare((*got)[0], (*ref)[0])->relative(), 1e-6);
  int masked = 0;
  for (int64_t i = 0; i < (*got)[0].numel(); ++i) {
    int64_t batch = i / (4 * 6 * 6), key = i % 6;
    if (inputs[1].i64()[batch * 6 + key] != 0) continue;
    EXPECT_LT((*got)[0].f32()[i], 1e-30f);
    ++masked;
  }
  EXPECT_GT(masked, 0);
}

// The partition bound (runtime/Traffic): the values between groups priced at given rates.
TEST(TrafficBound, StreamRatesInterpolateOnTheLogOfTheSizeAndClampAtTheEnds) {
  StreamRates r{{size_t{1} << 20, size_t{4} << 20}, {10, 40}, {20, 80}};
  EXPECT_NEAR(r.write_ms(size_t{2} << 20), (2 << 20) / 25e6, 1e-12);  // halfway on log2: 1 MiB -> 4 MiB
  EXPECT_NEAR(r.read_ms(size_t{2} << 20), (2 << 20) / 50e6, 1e-12);
  EXPECT_NEAR(r.write_ms(size_t{1} << 16), (1 << 16) / 10e6, 1e-12);  // below the smallest: its rate
  EXPECT_NEAR(r.read_ms(size_t{64} << 20), (64 << 20) / 80e6, 1e-12);  // above the largest: its rate
}

TEST(TrafficBound, PricesEveryValueBetweenGroupsAndKeepsWhatAGlobalPoolReducesForAnotherGroup) {
  StreamRates flat{{size_t{1} << 16, size_t{1} << 25}, {10, 10}, {20, 20}};  // ms = bytes / 1e7 written, / 2e7 read
  for (const char *name : {"efficientnet_b0", "resnet18"}) {
    SCOPED_TRACE(name);
    auto g = import_onnx_file(model_path(name));
    ASSERT_TRUE(static_cast<bool>(g));
    auto f = lower_to_stage(*g, Stage::kFused, PassContext{});
    ASSERT_TRUE(static_cast<bool>(f)) << f.error().message;
    size_t n = f->nodes.size();
    // Each group's output and how many groups read it, counted here from the inputs.
    double written = 0, read = 0;
    for (size_t i = 0; i < n; ++i) {
      bool output = false;
      for (ValueId v : f->outputs) output = output || v == ValueId::node(static_cast<int>(i));
      int readers = 0;
      for (const Node &c : f->nodes) readers += std::count(c.inputs.begin(), c.inputs.end(), ValueId::node(static_cast<int>(i))) > 0;
      if (output || readers == 0) continue;
      written += static_cast<double>(f->nodes[i].type.nbytes());
      read += readers * static_cast<double>(f->nodes[i].type.nbytes());
    }
    ASSERT_GT(written, 0);
    std::vector<double> group_ms(n, 90.0 / static_cast<double>(n));  // the groups sum to 90 ms of a 100 ms run
    TrafficBound t = traffic_bound(*f, group_ms, 100.0, 1000.0, flat);
    EXPECT_EQ(t.groups, static_cast<int>(n));
    EXPECT_NEAR(t.written_mb, written / 1e6, 1e-9);
    EXPECT_NEAR(t.read_mb, read / 1e6, 1e-9);
    EXPECT_NEAR(t.traffic_ms, written / 1e7 + read / 2e7, 1e-9);
    EXPECT_NEAR(t.handoff_ms, static_cast<double>(n - 1) * 1e-3, 1e-9);
    EXPECT_NEAR(t.dispatch_ms, 10.0, 1e-9);
    EXPECT_NEAR(t.floor_ms, 100.0 - (t.traffic_ms - t.kept_ms) - t.handoff_ms - 10.0, 1e-9);
    EXPECT_NEAR(t.bound, 100.0 / t.floor_ms, 1e-9);
    // EfficientNet-B0's 16 squeeze-excitation blocks each pool their depthwise conv's result
    // while the multiply after waits on that pool: 16 values stay stored; ResNet-18 has none.
    EXPECT_EQ(t.kept_values, std::string(name) == "efficientnet_b0" ? 16 : 0);
    EXPECT_EQ(t.kept_ms > 0, t.kept_values > 0);
  }
}

TEST(TrafficBound, StreamRatesAreMeasuredOnThePoolsThreadsForEverySize) {
  auto jit = Jit::create({""});
  ASSERT_TRUE(static_cast<bool>(jit)) << jit.error().message;
  ThreadPool pool(2);
  auto r = measure_stream_rates(**jit, pool, 3);
  ASSERT_TRUE(static_cast<bool>(r)) << r.error().message;
  ASSERT_EQ(r->bytes.size(), 10u);  // 64 KiB to 32 MiB
  EXPECT_EQ(r->bytes.front(), size_t{64} << 10);
  EXPECT_EQ(r->bytes.back(), size_t{32} << 20);
  for (size_t k = 0; k < r->bytes.size(); ++k) {
    // Finite and within what any memory does (not a kernel that did nothing in no time).
    EXPECT_GT(r->write_gbs[k], 0.5) << r->bytes[k];
    EXPECT_LT(r->write_gbs[k], 5000) << r->bytes[k];
    EXPECT_GT(r->read_gbs[k], 0.5) << r->bytes[k];
    EXPECT_LT(r->read_gbs[k], 5000) << r->bytes[k];
  }
}

TEST(CompiledModel, ArenaIsCloseToThePeakOfLiveActivations) {
  auto m = CompiledModel::load(model_path("resnet18"), test_options());
  ASSERT_TRUE(static_cast<bool>(m));
  const Graph &g = (*m)->graph();
  // The lower bound: the most bytes alive at once (a node's inputs, its output and its kernel's
  // temporaries together: since nchwc-layout, ResNet-18's 56x56 convs run Winograd F(2x2) in
  // NCHW16c, whose transformed tensors are 6.4 MB against 4 MB of live activations).
  std::vector<int> last(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    last[i] = static_cast<int>(i);
    for (ValueId v : g.nodes[i].inputs)
      if (v.kind == ValueId::Kind::kNode) last[v.index] = static_cast<int>(i);
  }
  size_t all = 0, peak = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    all += static_cast<size_t>(g.nodes[i].type.numel()) * 4;
    size_t live = (*m)->groups()[i].temp_bytes;
    all += live;
    for (size_t j = 0; j <= i; ++j)
      if (last[j] >= static_cast<int>(i) && g.outputs[0].index != static_cast<int>(j)) live += static_cast<size_t>(g.nodes[j].type.numel()) * 4;
    peak = std::max(peak, live);
  }
  EXPECT_GE((*m)->arena_bytes(), peak);
  EXPECT_LE((*m)->arena_bytes(), peak + peak / 2) << "peak " << peak;
  EXPECT_LT((*m)->arena_bytes(), all / 2);
}

TEST(CompiledModel, RepeatedRunsGiveIdenticalResults) {
  auto m = CompiledModel::load(model_path("tiny_cnn"), test_options());
  ASSERT_TRUE(static_cast<bool>(m));
  auto inputs = random_inputs((*m)->graph(), 9);
  auto a = (*m)->run(inputs), b = (*m)->run(inputs);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(compare((*a)[0], (*b)[0])->max_abs, 0.0);
}

TEST(CompiledModel, BadInputsAreErrors) {
  EXPECT_FALSE(static_cast<bool>(CompiledModel::load("/nonexistent.onnx", test_options())));
  auto m = CompiledModel::load(model_path("tiny_cnn"), test_options());
  ASSERT_TRUE(static_cast<bool>(m));
  auto r = (*m)->run({random_tensor({DType::kFloat32, {1, 3, 8, 8}}, 1)});
  ASSERT_FALSE(static_cast<bool>(r));
  EXPECT_EQ(r.error().message, "input 'input' must be Tensor[(1, 3, 32, 32), float32], got Tensor[(1, 3, 8, 8), float32]");
}

/** The review's int64 model, imported and compiled on one thread (the arena is one thread's either way). */
struct Int64Model {
  Graph graph;
  std::unique_ptr<CompiledModel> model;
  static Int64Model make(int64_t n) {
    Int64Model m;
    auto g = import_onnx_bytes(testing::int64_crossing_groups_model(n).bytes(), "int64.onnx");
    EXPECT_TRUE(static_cast<bool>(g)) << g.error().message;
    m.graph = g.take();
    CompileOptions o = test_options();
    o.threads = 1;
    auto fused = lower_to_stage(m.graph, Stage::kFused, PassContext{});
    EXPECT_TRUE(static_cast<bool>(fused));
    auto c = CompiledModel::compile(*fused, o);
    EXPECT_TRUE(static_cast<bool>(c)) << c.error().message;
    m.model = c.take();
    return m;
  }
};

TEST(CompiledModel, Int64ValuesCrossingGroupsGiveTheReferencesAnswer) {
  // The doubled indices are an int64 group on the reference executor whose result lives in the
  // arena: sized as float32 it was half as large as the copy into it (a heap overflow).
  Int64Model m = Int64Model::make(4096);
  ASSERT_TRUE(m.model);
  int crossing = 0;
  for (const Node &n : m.model->graph().nodes) crossing += n.type.dtype == DType::kInt64;
  EXPECT_EQ(crossing, 1);
  // Both live at once in the arena: the doubled indices (4096 x 8 bytes) and the rows the softmax reads (4096 x 4 floats).
  EXPECT_GE(m.model->arena_bytes(), size_t{4096} * 8 + size_t{4096} * 4 * 4);
  std::vector<int64_t> idx(4096);
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int64_t>(i % 5) - 2;  // doubled: -4..4, all in range
  std::vector<Tensor> in{tensor_i64({4096}, idx)};
  auto got = m.model->run(in);
  auto want = run_reference(m.graph, in);
  ASSERT_TRUE(got && want) << (got ? want.error().message : got.error().message);
  EXPECT_EQ(compare((*got)[0], (*want)[0])->max_abs, 0.0);  // gathered rows: exact
  EXPECT_LT(compare((*got)[1], (*want)[1])->relative(), 1e-6);
}

TEST(CompiledModel, GatherIndicesOutOfRangeAreAnErrorLikeTheReferences) {
  // The compiled take clamps in-kernel; the runtime checks its index argument first.
  Int64Model m = Int64Model::make(8);
  ASSERT_TRUE(m.model);
  for (int64_t bad : {int64_t{3}, int64_t{-3}, int64_t{1} << 40}) {  // doubled: 6, -6, 2^41
    std::vector<Tensor> in{tensor_i64({8}, {0, 1, 2, bad, 0, 0, 0, 0})};
    auto got = m.model->run(in);
    auto want = run_reference(m.graph, in);
    ASSERT_FALSE(static_cast<bool>(got));
    ASSERT_FALSE(static_cast<bool>(want));
    std::string reason = "index " + std::to_string(2 * bad) + " is out of range [-5, 5)";
    EXPECT_EQ(got.error().message, "group %1 (take 'gather_rows'): " + reason);
    EXPECT_EQ(want.error().message, "node %1 'gather_rows' (take): " + reason);
  }
}

}  // namespace
}  // namespace autotune
