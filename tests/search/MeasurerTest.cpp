// The measurer runs candidates in child processes: a crash, a hang and a wrong answer are
// recorded statuses, and the measuring process carries on. The bad kernels are written by hand
// in loop IR, so nothing in the product has a switch for misbehaving.
#include <gtest/gtest.h>

#include <functional>

#include "ir/Parser.h"
#include "search/Measurer.h"

namespace autotune {
namespace {

using namespace loop;

struct Fixture {
  std::unique_ptr<Jit> jit;
  TaskData data;
  Graph body;
};

Fixture make() {
  Fixture f;
  auto j = Jit::create({""});
  EXPECT_TRUE(static_cast<bool>(j));
  f.jit = j.take();
  auto g = parse_text("def @main(%p0: Tensor[(64), float32]) -> Tensor[(64), float32] {\n  %0 = nn.relu(%p0);\n  return %0;\n}");
  EXPECT_TRUE(static_cast<bool>(g));
  f.body = g.take();
  auto d = TaskData::make(f.body, 1);
  EXPECT_TRUE(static_cast<bool>(d));
  f.data = d.take();
  return f;
}

/** A kernel over (p0[64] -> out[64]) whose stage body `make_body(out)` builds. */
MeasureResult run_kernel(Fixture &f, const std::function<Stmt(Buffer)> &make_body, MeasureOptions o = {}) {
  LoweredKernel k;
  k.name = "handmade";
  Buffer out = make_buffer("out", Type::kF32, 64, BufferScope::kParam);
  k.buffers = {make_buffer("p0", Type::kF32, 64, BufferScope::kParam), out};
  k.num_params = 1;
  k.stages.push_back({"s", "r", 1, make_body(out)});
  auto ck = f.jit->compile(k);
  EXPECT_TRUE(static_cast<bool>(ck)) << (ck ? "" : ck.error().message);
  o.min_time_s = 0.01;
  return Measurer(*f.jit, o).run(k, *ck, f.data);
}

TEST(Measurer, MeasuresACorrectKernel) {
  Fixture f = make();
  auto results = Measurer(*f.jit, MeasureOptions{}).measure(f.body, f.data, {default_schedule(f.body)});
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].status, MeasureStatus::kOk) << results[0].error;
  EXPECT_GE(results[0].runs, 3);
  EXPECT_GT(results[0].median_s, 0.0);
  EXPECT_LE(results[0].min_s, results[0].median_s);
  EXPECT_GT(results[0].compile_s, 0.0);
  EXPECT_GT(results[0].baseline_s, 0.0);  // the default schedule, timed alongside
}

TEST(Measurer, ACrashingCandidateIsRecorded) {
  Fixture f = make();
  // A store a terabyte past the buffer: SIGSEGV in the child.
  MeasureResult r = run_kernel(f, [](Buffer out) { return store(out, int_imm(int64_t{1} << 38), float_imm(1)); });
  EXPECT_EQ(r.status, MeasureStatus::kCrash);
  EXPECT_NE(r.error.find("killed by signal 11"), std::string::npos) << r.error;
}

TEST(Measurer, AHangingCandidateTimesOut) {
  Fixture f = make();
  MeasureOptions o;
  o.timeout_s = 0.5;
  MeasureResult r = run_kernel(f, [](Buffer out) {
    return for_loop("i", int_imm(0), int_imm(int64_t{1} << 60), ForKind::kSerial, store(out, var("i") % int_imm(64), cast(Type::kF32, var("i"))));
  }, o);
  EXPECT_EQ(r.status, MeasureStatus::kTimeout);
  EXPECT_NE(r.error.find("killed"), std::string::npos) << r.error;
}

TEST(Measurer, AWrongAnswerIsRecordedBeforeAnyTiming) {
  Fixture f = make();
  MeasureResult r = run_kernel(f, [](Buffer out) { return for_loop("i", int_imm(0), int_imm(64), ForKind::kSerial, store(out, var("i"), float_imm(7))); });
  EXPECT_EQ(r.status, MeasureStatus::kWrongResult);
  EXPECT_EQ(r.runs, 0);
  EXPECT_NE(r.error.find("differs from the reference"), std::string::npos) << r.error;
}

TEST(Measurer, AnIllegalScheduleIsRecordedNotCompiled) {
  Fixture f = make();
  KernelSchedule s = default_schedule(f.body);
  s.vector_width = 3;
  auto results = Measurer(*f.jit, MeasureOptions{}).measure(f.body, f.data, {s});
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].status, MeasureStatus::kInvalid);
  EXPECT_EQ(results[0].error, "illegal schedule: vector_width 3 is not 1, 2, 4, 8 or 16");
}

}  // namespace
}  // namespace autotune
