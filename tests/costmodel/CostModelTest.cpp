// The cost model on real kernels: features of lowered groups, and XGBoost trained on the records
// of a real tuning run (a real database file, real measurements) and ranking them back.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <thread>

#include "codegen/Lower.h"
#include "codegen/Schedule.h"
#include "costmodel/Dataset.h"
#include "costmodel/Features.h"
#include "ir/OnnxImport.h"
#include "ir/Parser.h"
#include "ir/Pass.h"
#include "search/Tuner.h"

namespace autotune {
namespace {

namespace fs = std::filesystem;

/** The body of the one group of `ir` (fused here). */
Graph group_of(const std::string &ir) {
  auto g = parse_text(ir);
  EXPECT_TRUE(static_cast<bool>(g)) << g.error().message;
  auto f = run_passes(*g, {"fuse-ops"}, PassContext{});
  EXPECT_TRUE(static_cast<bool>(f));
  return *f->nodes[0].body;
}

double feature(const std::vector<float> &v, const std::string &name) {
  const auto &names = feature_names();
  auto it = std::find(names.begin(), names.end(), name);
  EXPECT_NE(it, names.end()) << name;
  return v[static_cast<size_t>(it - names.begin())];
}

TEST(Features, CountWhatTheLoopNestDoes) {
  Graph conv = group_of(R"(def @main(%x: Tensor[(1, 32, 14, 14), float32]) -> Tensor[(1, 64, 14, 14), float32] {
    %w = constant(Tensor[(64, 32, 3, 3), float32]);
    %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1]);
    %1 = nn.relu(%0);
    return %1;
  })");
  // The AVX-512 description whatever the host (nothing runs here): its default splits this conv
  // into 2 channel blocks, which the thread counts below are about (AVX2's default splits it into 4).
  auto avx512 = resolve_target("avx512");
  ASSERT_TRUE(static_cast<bool>(avx512)) << avx512.error().message;
  Target t = *avx512;
  KernelSchedule s = default_schedule(conv, t);
  s.winograd = 0, s.steps.clear();  // the direct conv's knobs (they stand for the tile sketch's flat pixels)
  auto k = lower_group(conv, "k", s);
  ASSERT_TRUE(static_cast<bool>(k)) << k.error().message;
  std::vector<float> f = kernel_features(*k, t);
  ASSERT_EQ(f.size(), feature_names().size());
  for (size_t i = 0; i < f.size(); ++i) EXPECT_TRUE(std::isfinite(f[i])) << feature_names()[i];
  // 64 x 196 outputs x 288 multiply-adds, 2 flops each; relu is one max per output.
  double macs = 64.0 * 196 * 32 * 9;
  EXPECT_NEAR(feature(f, "log2 flops"), std::log2(1 + 2 * macs + 64 * 196), 0.01);
  EXPECT_GT(feature(f, "fma share"), 0.99);
  EXPECT_GT(feature(f, "vectorized flop share"), 0.99);
  EXPECT_GT(feature(f, "log2 prefetches"), 0);  // the weight stream is prefetched
  // Scalar code: the same conv with 1-lane vectors is not vectorized at all.
  s.vector_width = 1, s.oc_block = 0, s.pixel_epilogue = false;
  auto scalar = lower_group(conv, "k", s);
  ASSERT_TRUE(static_cast<bool>(scalar)) << scalar.error().message;
  std::vector<float> g = kernel_features(*scalar, t);
  EXPECT_EQ(feature(g, "vectorized flop share"), 0);
  EXPECT_NEAR(feature(g, "log2 flops"), feature(f, "log2 flops"), 0.01);
  // Twice the threads on its 2 channel blocks: the compute-bound estimate halves; four threads on
  // them leave two idle, no faster than two.
  Target one = t, two = t, four = t;
  one.threads = 1, two.threads = 2, four.threads = 4;
  auto cycles = [&](const Target &x) { return feature(kernel_features(*k, x), "log2 compute-bound cycles"); };
  EXPECT_NEAR(cycles(one) - cycles(two), 1.0, 0.01);
  EXPECT_NEAR(cycles(four), cycles(two), 0.01);
  EXPECT_NEAR(feature(kernel_features(*k, four), "parallel balance"), 0.5, 0.01);
}

TEST(Features, TheModelSeesAKernelAndItsDifferencesFromTheTasksDefault) {
  Graph conv = group_of(R"(def @main(%x: Tensor[(1, 16, 14, 14), float32]) -> Tensor[(1, 32, 14, 14), float32] {
    %w = constant(Tensor[(32, 16, 3, 3), float32]);
    %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1]);
    return %0;
  })");
  Target t = host_target();
  KernelSchedule s = default_schedule(conv, t);
  auto k = lower_group(conv, "k", s);
  ASSERT_TRUE(static_cast<bool>(k)) << k.error().message;
  std::vector<float> def = default_features(conv, t);
  EXPECT_EQ(def, kernel_features(*k, t));
  const size_t n = feature_names().size();
  ASSERT_EQ(model_feature_names().size(), 2 * n);
  // The default against itself: its own features, no difference.
  std::vector<float> same = model_features(def, def);
  ASSERT_EQ(same.size(), 2 * n);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(same[i], def[i]);
    EXPECT_EQ(same[n + i], 0.0f) << model_feature_names()[n + i];
  }
  // A scalar direct conv against it: less vectorized than the default, by exactly the difference.
  s.winograd = 0, s.steps.clear(), s.vector_width = 1, s.oc_block = 0, s.pixel_epilogue = false;
  auto scalar = lower_group(conv, "k", s);
  ASSERT_TRUE(static_cast<bool>(scalar)) << scalar.error().message;
  std::vector<float> g = kernel_features(*scalar, t), m = model_features(g, def);
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(m[n + i], g[i] - def[i]) << model_feature_names()[n + i];
  size_t vec = static_cast<size_t>(std::find(model_feature_names().begin(), model_feature_names().end(), "vectorized flop share - default's") -
                                   model_feature_names().begin());
  ASSERT_LT(vec, 2 * n);
  EXPECT_LT(m[vec], -0.9);
}

TEST(CostModel, LearnsTheRecordsOfARealTuningRun) {
  std::string db = (fs::temp_directory_path() / ("autotune_costmodel_" + std::to_string(::getpid()) + ".db")).string();
  auto g = import_onnx_file(std::string(AUTOTUNE_MODELS_DIR) + "/tiny_cnn.onnx");
  ASSERT_TRUE(static_cast<bool>(g));
  auto fused = lower_to_stage(*g, Stage::kFused, PassContext{});
  ASSERT_TRUE(static_cast<bool>(fused));
  TuneOptions o;
  o.trials = 96, o.db_path = db, o.measure.min_time_s = 0.002, o.batch = 8, o.confirm_top = 0;
  auto rep = tune(*fused, o);
  ASSERT_TRUE(static_cast<bool>(rep)) << rep.error().message;
  auto handle = TuningDb::open(db, DbAccess::kReadOnly);
  ASSERT_TRUE(static_cast<bool>(handle));
  Target t = host_target();
  auto set = load_samples(**handle, rep->target, t);
  ASSERT_TRUE(static_cast<bool>(set)) << set.error().message;
  EXPECT_GE(set->samples.size(), 60u);
  EXPECT_EQ(set->skipped, 0);
  for (const Sample &smp : set->samples) ASSERT_EQ(smp.x.size(), model_feature_names().size());
  if (std::thread::hardware_concurrency() > 1) {
    for (const Sample &smp : set->samples) ASSERT_GT(smp.handoff_ns, 0) << "each record says where the cores were";
  }
  auto model = train_on(set->samples);
  ASSERT_TRUE(static_cast<bool>(model)) << model.error().message;
  // On the records it was trained on, the model must rank far better than chance (0.5).
  auto fit = evaluate(**model, set->samples);
  ASSERT_TRUE(static_cast<bool>(fit));
  EXPECT_GT(fit->pairs, 100);
  EXPECT_GT(fit->pairwise_accuracy, 0.75);
  // Saved and loaded, it predicts the same; a model of other features is refused.
  auto bytes = (*model)->save();
  ASSERT_TRUE(static_cast<bool>(bytes));
  auto back = CostModel::load(*bytes);
  ASSERT_TRUE(static_cast<bool>(back)) << back.error().message;
  std::vector<std::vector<float>> x;
  for (const Sample &s : set->samples) x.push_back(s.x);
  EXPECT_EQ(*(*model)->predict(x), *(*back)->predict(x));
  std::string other = *bytes;
  other.replace(other.find(" v") + 2, 1, "9");
  EXPECT_NE(CostModel::load(other).error().message.find("trained on features v9"), std::string::npos);
  EXPECT_FALSE(static_cast<bool>(CostModel::load("not a model")));
  for (const char *suffix : {"", "-wal", "-shm"}) fs::remove(db + suffix);
}

TEST(CostModel, RatiosTakenWithTheCoresApartAreComparedOnlyWithEachOther) {
  // Three schedules of a task timed with the cores near (250 ns hand-offs), two with them apart
  // (1000 ns, where the default ran 1.4x slower and every ratio looked better): 3 + 1 pairs, not 10.
  size_t n = model_feature_names().size();
  std::vector<Sample> samples;
  for (int i = 0; i < 5; ++i) {
    std::vector<float> x(n, 0.0f);
    x[0] = static_cast<float>(i);
    samples.push_back({"w", "s" + std::to_string(i), x, 0.1f * static_cast<float>(i) + (i >= 3 ? 0.5f : 0.0f), i >= 3 ? 1000.0 : 250.0});
  }
  CostModelOptions o;
  o.rounds = 4;
  auto model = train_on(samples, o);
  ASSERT_TRUE(static_cast<bool>(model)) << model.error().message;
  auto rep = evaluate(**model, samples);
  ASSERT_TRUE(static_cast<bool>(rep)) << rep.error().message;
  EXPECT_EQ(rep->pairs, 4);
  EXPECT_EQ(rep->tasks_test, 2);
  // Without hand-offs (older records), one mode: every pair.
  for (Sample &smp : samples) smp.handoff_ns = 0;
  rep = evaluate(**model, samples);
  ASSERT_TRUE(static_cast<bool>(rep));
  EXPECT_EQ(rep->pairs, 10);
  EXPECT_EQ(rep->tasks_test, 1);
}

TEST(CostModel, AModeDoesNotPassForASchedulesSpeed) {
  // The task's default took 1.0 ms with the cores near and 1.4 ms apart. Near, schedule A ran at
  // log2 speedup 0.0 and B at 0.2; apart, A came out at 0.5 three times and C, never timed near, at
  // 0.735 twice. Less the default's slowdown apart (log2 1.4 = 0.485): C 0.25 > B 0.2 > A 0.0.
  size_t n = model_feature_names().size();
  std::vector<float> a(n, 0.0f), b(n, 0.0f), c(n, 0.0f);
  b[0] = 1, c[0] = 2;
  auto samples_with = [&](double apart_ns) {
    std::vector<Sample> s{{"w", "A", a, 0.0f, 250.0, 1e-3}, {"w", "B", b, 0.2f, 250.0, 1e-3}};
    for (int i = 0; i < 3; ++i) s.push_back({"w", "A", a, 0.5f, apart_ns, 1.4e-3});
    for (int i = 0; i < 2; ++i) s.push_back({"w", "C", c, 0.735f, apart_ns, 1.4e-3});
    return s;
  };
  CostModelOptions o;
  o.rounds = 30;
  auto modes = train_on(samples_with(1000.0), o);
  ASSERT_TRUE(static_cast<bool>(modes)) << modes.error().message;
  auto p = (*modes)->predict({a, b, c});
  ASSERT_TRUE(static_cast<bool>(p));
  EXPECT_GT((*p)[1], (*p)[0]);
  EXPECT_GT((*p)[2], (*p)[1]);
  // Taken as one mode (the same hand-offs), A's 0.5s say A is faster than B: the test can tell.
  auto one = train_on(samples_with(250.0), o);
  ASSERT_TRUE(static_cast<bool>(one));
  p = (*one)->predict({a, b, c});
  ASSERT_TRUE(static_cast<bool>(p));
  EXPECT_LT((*p)[1], (*p)[0]);
}

}  // namespace
}  // namespace autotune
