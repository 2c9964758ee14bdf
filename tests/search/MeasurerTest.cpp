// The measurer runs candidates in child processes: a crash, a hang and a wrong answer are
// recorded statuses, and the measuring process carries on. The bad kernels are written by hand
// in loop IR, so nothing in the product has a switch for misbehaving.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "ir/OnnxImport.h"
#include "ir/Parser.h"
#include "ir/Reference.h"
#include "db/Workload.h"
#include "ir/Pass.h"
#include "codegen/Transform.h"
#include "search/Measurer.h"
#include "search/Task.h"

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

/** A kernel `name` over (p0[64] -> out[64]) whose stage body `make_body(p0, out)` builds, compiled. */
std::pair<LoweredKernel, CompiledKernel> handmade(Fixture &f, const std::string &name, const std::function<Stmt(Buffer, Buffer)> &make_body) {
  LoweredKernel k;
  k.name = name;
  Buffer in = make_buffer("p0", Type::kF32, 64, BufferScope::kParam), out = make_buffer("out", Type::kF32, 64, BufferScope::kParam);
  k.buffers = {in, out};
  k.num_params = 1;
  k.stages.push_back({"s", "r", 1, make_body(in, out)});
  auto ck = f.jit->compile(k);
  EXPECT_TRUE(static_cast<bool>(ck)) << (ck ? "" : ck.error().message);
  return {std::move(k), ck.take()};
}

/** A kernel over (p0[64] -> out[64]) whose stage body `make_body(out)` builds, measured alone. */
MeasureResult run_kernel(Fixture &f, const std::function<Stmt(Buffer)> &make_body, MeasureOptions o = {}) {
  auto [k, ck] = handmade(f, "handmade", [&](Buffer, Buffer out) { return make_body(out); });
  o.min_time_s = 0.01;
  return Measurer(*f.jit, o).run(k, ck, f.data);
}

/** A loop of 2^60 iterations: runs until killed. */
Stmt hang_forever(Buffer out) {
  return for_loop("i", int_imm(0), int_imm(int64_t{1} << 60), ForKind::kSerial, store(out, var("i") % int_imm(64), cast(Type::kF32, var("i"))));
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
  if (std::thread::hardware_concurrency() > 1) {
    EXPECT_GT(results[0].handoff_ns, 0.0);  // where the cores were (the default options use every hardware thread)
  }
  MeasureOptions one;
  one.threads = 1;
  auto alone = Measurer(*f.jit, one).measure(f.body, f.data, {default_schedule(f.body)});
  ASSERT_EQ(alone.size(), 1u);
  EXPECT_EQ(alone[0].status, MeasureStatus::kOk) << alone[0].error;
  EXPECT_EQ(alone[0].handoff_ns, 0.0);  // one thread hands nothing off: unknown
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
  MeasureResult r = run_kernel(f, hang_forever, o);
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
  s.steps.clear();  // the template's knobs (an elementwise group's default is a step list, which ignores them)
  s.vector_width = 3;
  auto results = Measurer(*f.jit, MeasureOptions{}).measure(f.body, f.data, {s});
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].status, MeasureStatus::kInvalid);
  EXPECT_EQ(results[0].error, "illegal schedule: vector_width 3 is not 1, 2, 4, 8 or 16");
}

/** The pids of `pid`'s children (Linux: /proc/PID/task/PID/children). */
std::vector<pid_t> children_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  std::vector<pid_t> out;
  for (pid_t c; in >> c;) out.push_back(c);
  return out;
}

TEST(Measurer, ACandidateDiesWithItsTuner) {
  // A "tuner" process measures a hanging candidate with a long timeout and is then killed, as a
  // second Ctrl-C, a SIGTERM or a crash would. The candidate's process must not outlive it.
  prctl(PR_SET_CHILD_SUBREAPER, 1);  // orphans come to this test, which can then wait for them
  pid_t tuner = fork();
  if (tuner == 0) {
    Fixture f = make();
    MeasureOptions o;
    o.timeout_s = 600;
    run_kernel(f, hang_forever, o);
    _exit(0);
  }
  pid_t candidate = 0;
  for (int i = 0; i < 300 && !candidate; ++i) {  // the tuner compiles, then forks the candidate
    auto kids = children_of(tuner);
    if (!kids.empty()) candidate = kids[0];
    else usleep(20000);
  }
  ASSERT_GT(candidate, 0) << "the tuner never started its candidate";
  kill(tuner, SIGKILL);
  waitpid(tuner, nullptr, 0);
  bool gone = false;
  for (int i = 0; i < 500 && !gone; ++i) {  // PR_SET_PDEATHSIG delivers SIGKILL at once; allow 10 s
    int status = 0;
    pid_t r = waitpid(candidate, &status, WNOHANG);
    if (r == candidate) {
      gone = true;
      EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    } else {
      usleep(20000);
    }
  }
  if (!gone) kill(candidate, SIGKILL), waitpid(candidate, nullptr, 0);
  prctl(PR_SET_CHILD_SUBREAPER, 0);
  EXPECT_TRUE(gone) << "the candidate outlived its tuner";
}

TEST(Measurer, APipeThatCannotBeMadeIsAHostErrorNotTheCandidates) {
  // Out of file descriptors: the measuring process's own resources. Measured in a child process
  // so the lowered limit stays there; the result comes back as the exit code.
  pid_t pid = fork();
  if (pid == 0) {
    Fixture f = make();
    MeasureOptions o;
    o.host_retries = 1;
    // Every descriptor in use: a low limit, then /dev/null opened into every free slot below it.
    rlimit lim{64, 64};
    setrlimit(RLIMIT_NOFILE, &lim);
    while (open("/dev/null", O_RDONLY) >= 0) {
    }
    MeasureResult r = run_kernel(f, [](Buffer out) { return store(out, int_imm(0), float_imm(1)); }, o);
    bool ok = r.status == MeasureStatus::kHostError && r.error == "socketpair: Too many open files (after 2 attempts)" &&
              std::string(status_name(r.status)) == "host_error";
    if (!ok) std::fprintf(stderr, "got %s: %s\n", status_name(r.status), r.error.c_str());
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(Measurer, ACompileBeyondTheLimitIsKilledAndRecorded) {
  // A kernel LLVM takes long to compile (64 x 64 stores unrolled, each with two inline exps: about
  // 4096 x 50 instructions through O3; 3.2 s in process on the Zen 5 host) among ones it compiles
  // at once, in children with a 0.3 s limit that take the kernels from one queue: the slow one is
  // killed and refused with the reason, the quick ones compiled into the cache, where the parent
  // then finds them. With one child, a new child takes the queue on after the kill; with two, the
  // other child compiles the quick ones while the first is stuck.
  auto kernel = [](const std::string &name, bool slow) {
    LoweredKernel k;
    k.name = name;
    Buffer in = make_buffer("p0", Type::kF32, 64, BufferScope::kParam), out = make_buffer("out", Type::kF32, 64, BufferScope::kParam);
    k.buffers = {in, out};
    k.num_params = 1;
    Expr x = load(in, var("j"));
    Stmt body = store(out, var("j"), slow ? call("exp", {call("exp", {x * cast(Type::kF32, var("i"))}) + cast(Type::kF32, var("i"))}) : max(x, float_imm(0)));
    Stmt nest = for_loop("j", int_imm(0), int_imm(64), slow ? ForKind::kUnrolled : ForKind::kSerial, body);
    k.stages.push_back({"s", "i", slow ? 64 : 1, slow ? for_loop("i2", int_imm(0), int_imm(64), ForKind::kUnrolled, substitute(nest, "i", var("i") + var("i2"))) : nest});
    return k;
  };
  LoweredKernel slow = kernel("guard_slow", true);
  std::vector<LoweredKernel> quick;
  for (int i = 0; i < 4; ++i) quick.push_back(kernel("guard_quick" + std::to_string(i), false));
  for (int threads : {1, 2}) {
    SCOPED_TRACE("compile children: " + std::to_string(threads));
    std::string cache = (std::filesystem::temp_directory_path() / ("autotune_compile_guard_" + std::to_string(getpid()))).string();
    std::filesystem::remove_all(cache);
    auto jit = Jit::create({cache});
    ASSERT_TRUE(static_cast<bool>(jit));
    MeasureOptions o;
    o.compile_timeout_s = 0.3;
    o.threads = threads;
    Measurer m(**jit, o);
    std::vector<const LoweredKernel *> kernels = {&quick[0], &slow, &quick[1], &quick[2], &quick[3]};
    std::vector<double> seconds(kernels.size(), 0);
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::string> refused = m.compile_guarded(kernels, seconds);
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(refused[1], "compiling took longer than 0.3 s (killed; LLVM stalled on this schedule); not measured");
    EXPECT_GE(seconds[1], 0.3);
    EXPECT_LT(wall, 5.0);  // the limit held (LLVM alone takes far longer on the slow kernel)
    // Every quick kernel's object is in the cache: the parent's compile loads it.
    for (size_t i : {0, 2, 3, 4}) {
      EXPECT_EQ(refused[i], "") << i;
      EXPECT_GT(seconds[i], 0) << i;
      auto ck = (*jit)->compile(*kernels[i]);
      ASSERT_TRUE(static_cast<bool>(ck)) << ck.error().message;
      EXPECT_TRUE(ck->from_cache) << i;
    }
    std::filesystem::remove_all(cache);
  }
}

TEST(Measurer, OneChildMeasuresABatchAndANewOneFollowsAFailure) {
  // A batch runs in one child process (a fork, exit and wait per candidate was 8% of a tuning
  // run). A crash ends the child and the next candidate gets a new one; a candidate that fails in
  // a child that measured others first is measured again in a fresh child, so a kernel that
  // corrupts its input (and still computes its own answer first) is not blamed on the next one.
  Fixture f = make();
  auto relu = [](Buffer in, Buffer out) { return for_loop("i", int_imm(0), int_imm(64), ForKind::kSerial, store(out, var("i"), max(load(in, var("i")), float_imm(0)))); };
  auto crash = [](Buffer, Buffer out) { return store(out, int_imm(int64_t{1} << 38), float_imm(1)); };
  auto corrupt = [&](Buffer in, Buffer out) { return seq({relu(in, out), for_loop("i", int_imm(0), int_imm(64), ForKind::kSerial, store(in, var("i"), float_imm(1e9)))}); };
  auto wrong = [](Buffer, Buffer out) { return for_loop("i", int_imm(0), int_imm(64), ForKind::kSerial, store(out, var("i"), float_imm(7))); };
  std::vector<std::pair<LoweredKernel, CompiledKernel>> kernels;
  kernels.push_back(handmade(f, "batch_a", relu));
  kernels.push_back(handmade(f, "batch_b", relu));
  kernels.push_back(handmade(f, "batch_crash", crash));
  kernels.push_back(handmade(f, "batch_c", relu));
  kernels.push_back(handmade(f, "batch_corrupt", corrupt));
  kernels.push_back(handmade(f, "batch_d", relu));
  kernels.push_back(handmade(f, "batch_wrong", wrong));
  std::vector<Measurer::Candidate> candidates;
  for (auto &[k, ck] : kernels) candidates.push_back({&k, &ck});
  MeasureOptions o;
  o.min_time_s = 0.005;
  std::vector<MeasureStatus> status;
  std::vector<std::vector<pid_t>> alive;  // the measuring children after each candidate
  size_t done = Measurer(*f.jit, o).run_batch(candidates, f.data, {nullptr, nullptr}, [&](size_t, const MeasureResult *r) {
    EXPECT_NE(r, nullptr);
    status.push_back(r ? r->status : MeasureStatus::kHostError);
    alive.push_back(children_of(getpid()));
    return true;
  });
  ASSERT_EQ(done, kernels.size());
  EXPECT_EQ(status, (std::vector<MeasureStatus>{MeasureStatus::kOk, MeasureStatus::kOk, MeasureStatus::kCrash, MeasureStatus::kOk,
                                                MeasureStatus::kOk, MeasureStatus::kOk, MeasureStatus::kWrongResult}));
  ASSERT_EQ(alive.size(), kernels.size());
  EXPECT_EQ(alive[0].size(), 1u);
  EXPECT_EQ(alive[0], alive[1]);  // one child for both
  EXPECT_TRUE(alive[2].empty());  // the crash ended it
  ASSERT_EQ(alive[3].size(), 1u);
  EXPECT_NE(alive[3], alive[1]);
  EXPECT_EQ(alive[4], alive[3]);
  ASSERT_EQ(alive[5].size(), 1u);
  EXPECT_NE(alive[5], alive[4]);  // measured again, in a fresh child, after the corrupted input gave it a wrong answer
  EXPECT_TRUE(children_of(getpid()).empty());  // the last child left with the batch
}

TEST(Measurer, OptionsOutOfRangeAreRejected) {
  EXPECT_TRUE(static_cast<bool>(MeasureOptions{}.validate()));
  std::vector<std::pair<std::function<void(MeasureOptions &)>, std::string>> bad = {
      {[](MeasureOptions &o) { o.max_runs = 0; }, "max_runs must be between 1 and 100000000, got 0"},
      {[](MeasureOptions &o) { o.timeout_s = 0; }, "the timeout must be between 0.001 and 86400 seconds, got 0.000000"},
      {[](MeasureOptions &o) { o.timeout_s = std::nan(""); }, "the timeout must be between 0.001 and 86400 seconds, got nan"},
      {[](MeasureOptions &o) { o.timeout_s = 3e6; }, "the timeout must be between 0.001 and 86400 seconds, got 3000000.000000"},
      {[](MeasureOptions &o) { o.min_time_s = -1; }, "min_time_s must be between 0 and 3600 seconds, got -1.000000"},
      {[](MeasureOptions &o) { o.threads = -2; }, "threads must be between 0 (all) and 4096, got -2"},
  };
  for (auto &[mutate, message] : bad) {
    MeasureOptions o;
    mutate(o);
    Status st = o.validate();
    ASSERT_FALSE(static_cast<bool>(st)) << message;
    EXPECT_EQ(st.error().message, message);
  }
}

TEST(Measurer, OnResultReturningFalseStopsTheBatch) {
  // The tuner's saver returns false when a result cannot be saved: nothing after it is measured.
  Fixture f = make();
  KernelSchedule s = default_schedule(f.body);
  int calls = 0;
  auto results = Measurer(*f.jit, MeasureOptions{}).measure(f.body, f.data, {s, s, s}, [&](size_t, const MeasureResult &) {
    ++calls;
    return false;
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(results.size(), 1u);
}

/** The generated ResNet-18 fused with the default passes; an empty graph if it does not load. */
Graph resnet18_fused() {
  auto g = import_onnx_file(std::string(AUTOTUNE_MODELS_DIR) + "/resnet18.onnx");
  EXPECT_TRUE(static_cast<bool>(g)) << g.error().message;
  if (!g) return {};
  auto fused = lower_to_stage(*g, Stage::kFused, PassContext{});
  EXPECT_TRUE(static_cast<bool>(fused)) << fused.error().message;
  return fused ? fused.take() : Graph{};
}

/** Its tasks; none if it does not load. */
std::vector<Task> resnet18_tasks() { return extract_tasks(resnet18_fused()); }

TEST(Measurer, WeightsAreMarkedAndEvictedWithoutChangingTheAnswer) {
  // The model's weights are flushed from cache before each timed run (a whole inference evicts
  // them between two uses); their packed copies are what the kernel reads, so those are flushed.
  std::vector<Task> tasks = resnet18_tasks();
  ASSERT_GE(tasks.size(), 2u);
  const Task &conv = tasks[0];  // the stem: conv(input, weight) + bias + relu
  ASSERT_EQ(conv.ops.rfind("nn.conv2d", 0), 0u) << conv.ops;
  ASSERT_EQ(conv.constant.size(), conv.body.inputs.size());
  EXPECT_FALSE(conv.constant[0]);  // the image
  EXPECT_TRUE(conv.constant[1]);   // the conv's weight
  auto jit = Jit::create({""});
  ASSERT_TRUE(static_cast<bool>(jit));
  auto d = TaskData::make(conv.body, 3);
  ASSERT_TRUE(static_cast<bool>(d)) << d.error().message;
  d->cold = conv.constant;
  MeasureOptions o;
  o.min_time_s = 0.01;
  ASSERT_TRUE(o.cold_weights);  // the default
  KernelSchedule s = default_schedule(conv.body, (*jit)->target());
  auto results = Measurer(**jit, o).measure(conv.body, *d, {s});
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].status, MeasureStatus::kOk) << results[0].error;
  EXPECT_GE(results[0].runs, 3);
}

TEST(Measurer, TheGroupsThatWriteATasksInputsRunBeforeEachTimedRun) {
  // In the model a kernel's input was just written by the group before it, each part in the cache
  // of the core that wrote it; timed alone, it finds its input as its own last run left it.
  Graph fused = resnet18_fused();
  std::vector<Task> tasks = extract_tasks(fused);
  ASSERT_GE(tasks.size(), 3u);
  EXPECT_TRUE(tasks[0].producers.empty());  // the stem reads the model's input
  const Task *with_add = nullptr;
  for (const Task &t : tasks) {
    for (const GroupProducer &p : t.producers) {
      // Each writes a parameter that is not a weight, of its own output's type.
      ASSERT_LT(static_cast<size_t>(p.writes), t.body.inputs.size());
      EXPECT_FALSE(t.constant[static_cast<size_t>(p.writes)]) << t.ops;
      EXPECT_EQ(p.body.type_of(p.body.outputs[0]), t.body.inputs[static_cast<size_t>(p.writes)].type) << t.ops;
    }
    if (!with_add && t.ops.find("add") != std::string::npos && t.producers.size() == 2) with_add = &t;
  }
  // The max pool after the stem: one producer, the stem's group.
  ASSERT_EQ(tasks[1].ops, "nn.max_pool2d");
  ASSERT_EQ(tasks[1].producers.size(), 1u);
  EXPECT_EQ(workload_hash(tasks[1].producers[0].body), tasks[0].hash);
  // A producer runs on the model's own weights (random ones in [-1, 1] make outputs that grow
  // with the fan-in, and a SiLU of them denormals: the consumer then timed microcode assists);
  // its other inputs are seeded when the task's data is made.
  const GroupProducer &sp = tasks[1].producers[0];
  const Node &pool = fused.nodes[static_cast<size_t>(tasks[1].groups[0])];
  const Node &stem = fused.nodes[static_cast<size_t>(pool.inputs[static_cast<size_t>(sp.writes)].index)];
  ASSERT_EQ(workload_hash(*stem.body), tasks[0].hash);
  ASSERT_EQ(sp.args.size(), stem.inputs.size());
  std::vector<GroupProducer> seeded;
  {
    TaskData d;
    d.add_producers(tasks[1].producers, 5);
    ASSERT_EQ(d.producers.size(), 1u);
    seeded = d.producers;
  }
  for (size_t k = 0; k < stem.inputs.size(); ++k) {
    const Tensor &given = sp.args[k], &used = seeded[0].args[k];
    ASSERT_NE(used.raw(), nullptr) << k;
    EXPECT_EQ(used.type(), sp.body.inputs[k].type) << k;
    if (stem.inputs[k].kind == ValueId::Kind::kConstant) {
      const Tensor &weight = fused.constants[static_cast<size_t>(stem.inputs[k].index)].value;
      EXPECT_EQ(given.raw(), weight.raw()) << k;
      EXPECT_EQ(used.raw(), weight.raw()) << k;
    } else {
      EXPECT_EQ(given.raw(), nullptr) << k;  // the image: seeded
    }
  }
  // A residual block's second conv reads the first conv's result and the block's input: both run.
  ASSERT_NE(with_add, nullptr);
  auto jit = Jit::create({""});
  ASSERT_TRUE(static_cast<bool>(jit));
  for (bool producers : {true, false}) {
    auto d = TaskData::make(with_add->body, 3);
    ASSERT_TRUE(static_cast<bool>(d)) << d.error().message;
    d->cold = with_add->constant;
    d->add_producers(with_add->producers, 5);
    MeasureOptions o;
    o.min_time_s = 0.01;
    o.producers = producers;
    // Three candidates in one child: the inputs the producers overwrote are put back after each,
    // so the next one's check passes where it is (a failed check is measured again in a new child).
    KernelSchedule s = default_schedule(with_add->body, (*jit)->target());
    std::vector<std::vector<pid_t>> alive;
    auto results = Measurer(**jit, o).measure(with_add->body, *d, {s, s, s}, [&](size_t, const MeasureResult &) {
      alive.push_back(children_of(getpid()));
      return true;
    });
    ASSERT_EQ(results.size(), 3u);
    for (const MeasureResult &r : results) {
      ASSERT_EQ(r.status, MeasureStatus::kOk) << r.error;
      EXPECT_EQ(r.producers, producers ? 2 : 0);
      EXPECT_GE(r.runs, 3);
    }
    ASSERT_EQ(alive.size(), 3u);
    ASSERT_EQ(alive[0].size(), 1u);
    EXPECT_EQ(alive[1], alive[0]);
    EXPECT_EQ(alive[2], alive[0]);
  }
}

}  // namespace
}  // namespace autotune
