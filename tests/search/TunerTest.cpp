// The tuning loop end to end on a real model and a real database file.
#include <gtest/gtest.h>

#include <filesystem>

#include "db/TuningDb.h"
#include "ir/OnnxImport.h"
#include "ir/Pass.h"
#include "ir/Reference.h"
#include "runtime/Runtime.h"
#include "search/Tuner.h"

namespace autotune {
namespace {

namespace fs = std::filesystem;

class Tuner : public ::testing::Test {
 protected:
  void SetUp() override {
    db_ = (fs::temp_directory_path() / ("autotune_tuner_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".db")).string();
    fs::remove(db_);
    auto g = import_onnx_file(std::string(AUTOTUNE_MODELS_DIR) + "/tiny_cnn.onnx");
    ASSERT_TRUE(static_cast<bool>(g));
    auto f = lower_to_stage(*g, Stage::kFused, PassContext{});
    ASSERT_TRUE(static_cast<bool>(f));
    fused_ = f.take();
  }
  void TearDown() override {
    for (const char *suffix : {"", "-wal", "-shm"}) fs::remove(db_ + suffix);
  }
  TuneOptions options(int64_t trials) {
    TuneOptions o;
    o.trials = trials;
    o.db_path = db_;
    o.measure.min_time_s = 0.002;
    o.batch = 4;
    return o;
  }
  /** Records of one phase ("trial" or "confirmation") in the database file. */
  int64_t records(const std::string &phase = "trial") {
    auto db = TuningDb::open(db_);
    EXPECT_TRUE(static_cast<bool>(db));
    auto text = (*db)->export_jsonl();
    EXPECT_TRUE(static_cast<bool>(text));
    int64_t n = 0;
    for (size_t p = 0; (p = text->find("\"phase\":\"" + phase + "\"", p)) != std::string::npos; ++p) ++n;
    return n;
  }
  std::string db_;
  Graph fused_;
};

TEST_F(Tuner, MeasuresEveryTasksDefaultThenSpendsTheBudget) {
  auto rep = tune(fused_, options(25));
  ASSERT_TRUE(static_cast<bool>(rep)) << rep.error().message;
  EXPECT_EQ(rep->trials_run, 25);
  EXPECT_EQ(rep->trials_before, 0);
  EXPECT_FALSE(rep->interrupted);
  ASSERT_EQ(rep->tasks.size(), 13u);
  for (const TaskReport &t : rep->tasks) {
    EXPECT_GT(t.default_s, 0.0) << t.task.ops;
    EXPECT_GT(t.baselines, 0) << t.task.ops;
    EXPECT_GT(t.best_ratio, 0.0) << t.task.ops;
    EXPECT_FALSE(t.best_schedule.empty()) << t.task.ops;
  }
  EXPECT_EQ(records(), 25);
  EXPECT_EQ(records("confirmation"), rep->confirmations);
  EXPECT_GT(rep->confirmations, 0);
}

TEST_F(Tuner, RunningAgainResumesWithTheRecordsAlreadyThere) {
  ASSERT_TRUE(static_cast<bool>(tune(fused_, options(20))));
  auto rep = tune(fused_, options(30));
  ASSERT_TRUE(static_cast<bool>(rep)) << rep.error().message;
  EXPECT_EQ(rep->trials_before, 20);
  EXPECT_EQ(rep->trials_run, 10);
  EXPECT_EQ(records(), 30);
  auto again = tune(fused_, options(30));  // the budget is spent: nothing more to measure
  ASSERT_TRUE(static_cast<bool>(again));
  EXPECT_EQ(again->trials_run, 0);
}

TEST_F(Tuner, AStopRequestEndsTheRunWithEveryMeasurementSaved) {
  std::atomic<bool> stop{false};
  int seen = 0;
  TuneOptions o = options(100);
  o.stop = &stop;
  o.progress = [&](const std::string &) {
    if (++seen == 7) stop = true;  // as Ctrl-C would, in the middle of a batch
  };
  auto rep = tune(fused_, o);
  ASSERT_TRUE(static_cast<bool>(rep)) << rep.error().message;
  EXPECT_TRUE(rep->interrupted);
  EXPECT_EQ(rep->trials_run, 7);
  EXPECT_EQ(records(), 7);
}

TEST_F(Tuner, TheRuntimeCompilesWithTheTunedSchedulesAndStaysCorrect) {
  ASSERT_TRUE(static_cast<bool>(tune(fused_, options(30))));
  CompileOptions co;
  co.db_path = db_;
  co.cache_dir = "";
  auto m = CompiledModel::compile(fused_, co);
  ASSERT_TRUE(static_cast<bool>(m)) << m.error().message;
  EXPECT_EQ((*m)->tuned_groups(), 13);
  auto inputs = random_inputs(fused_, 3);
  auto got = (*m)->run(inputs);
  auto expected = run_reference(fused_, inputs);
  ASSERT_TRUE(got && expected);
  EXPECT_LT(compare((*got)[0], (*expected)[0])->relative(), 1e-5);
  // A database without this model's workloads: every group falls back to its default, and says why.
  fs::remove(db_ + ".other");
  ASSERT_TRUE(static_cast<bool>(TuningDb::open(db_ + ".other")));  // an empty tuning database (a deploy opens it read-only)
  co.db_path = db_ + ".other";
  auto plain = CompiledModel::compile(fused_, co);
  ASSERT_TRUE(static_cast<bool>(plain));
  EXPECT_EQ((*plain)->tuned_groups(), 0);
  EXPECT_EQ((*plain)->groups()[0].untuned_reason.rfind("no record for this workload on ", 0), 0u);
  for (const char *suffix : {"", "-wal", "-shm"}) fs::remove(db_ + ".other" + suffix);
}

}  // namespace
}  // namespace autotune
