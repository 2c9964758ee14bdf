// Whole generated models through the importer, the reference executor and the CLI.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <csignal>
#include <sys/wait.h>
#include <unistd.h>

#include "ir/Npy.h"
#include "ir/Reference.h"
#include "tests/ir/TestUtil.h"

namespace autotune {
namespace {

namespace fs = std::filesystem;
using testing::load_model;
using testing::model_path;
using testing::run_command;

std::vector<Tensor> run_ok(const Graph &g, uint64_t seed) {
  auto out = run_reference(g, random_inputs(g, seed));
  EXPECT_TRUE(static_cast<bool>(out)) << (out ? "" : out.error().message);
  return out ? out.take() : std::vector<Tensor>{};
}

bool all_finite(const Tensor &t) {
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(t.f32()[i])) return false;
  return true;
}

TEST(Models, SmallModelsRunWithFiniteOutputs) {
  for (const char *name : {"tiny_cnn", "mlp", "shape_ops", "legacy", "transformer", "vit_tiny", "modern_cnn"}) {
    SCOPED_TRACE(name);
    Graph g = load_model(name);
    for (const Tensor &t : run_ok(g, 3)) EXPECT_TRUE(all_finite(t));
  }
}

TEST(Models, SoftmaxOutputsSumToOne) {
  auto out = run_ok(load_model("tiny_cnn"), 5);
  ASSERT_EQ(out.size(), 1u);
  double sum = 0;
  for (int64_t i = 0; i < out[0].numel(); ++i) sum += out[0].f32()[i];
  EXPECT_NEAR(sum, 1.0, 1e-6);
}

/** The folded and unfolded forms carry the same weights, so they must compute the same function. */
void expect_forms_agree(const std::string &depth) {
  Graph folded = load_model("resnet" + depth), kept = load_model("resnet" + depth + "_bn");
  auto a = run_ok(folded, 7), b = run_ok(kept, 7);
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(a[0].shape(), (Shape{1, 1000}));
  EXPECT_TRUE(all_finite(a[0]));
  auto d = compare(a[0], b[0]);
  ASSERT_TRUE(static_cast<bool>(d));
  EXPECT_LT(d->relative(), 1e-4) << "max abs " << d->max_abs << " of " << d->max_ref;
  EXPECT_GT(d->max_ref, 0.0);
}

TEST(Models, ResNet18FoldedAndUnfoldedBatchNormAgree) { expect_forms_agree("18"); }
TEST(Models, ResNet50FoldedAndUnfoldedBatchNormAgree) { expect_forms_agree("50"); }

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("autotune_cli_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string cli(const std::string &args, int *code) {
    std::string out;
    *code = run_command(std::string(AUTOTUNE_CLI) + " " + args, &out);
    return out;
  }
  std::string path(const std::string &name) { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(Cli, RunWritesTheModelsOutput) {
  Graph g = load_model("tiny_cnn");
  Tensor x = random_tensor(g.inputs[0].type, 42);
  ASSERT_TRUE(static_cast<bool>(write_npy(path("x.npy"), x)));
  auto expected = run_reference(g, {x});
  ASSERT_TRUE(static_cast<bool>(expected));
  // The reference executor reproduces itself exactly; the compiled one within float rounding.
  for (const std::string executor : {"reference", "compiled"}) {
    int code;
    std::string out = cli("run --model " + model_path("tiny_cnn") + " --input " + path("x.npy") + " --output " +
                              path("y.npy") + " --executor " + executor, &code);
    ASSERT_EQ(code, 0) << out;
    EXPECT_NE(out.find("output 0: Tensor[(1, 10), float32]"), std::string::npos) << out;
    EXPECT_NE(out.find("executor " + executor), std::string::npos) << out;
    auto y = read_npy(path("y.npy"));
    ASSERT_TRUE(static_cast<bool>(y)) << y.error().message;
    auto d = compare(*y, (*expected)[0]);
    ASSERT_TRUE(static_cast<bool>(d));
    if (executor == "reference") EXPECT_EQ(d->max_abs, 0.0);
    else EXPECT_LT(d->relative(), 1e-5);
  }
}

TEST_F(Cli, SeveralOutputsGoToNumberedFiles) {
  int code;
  std::string out = cli("run --model " + model_path("shape_ops") + " --output " + path("o.npy"), &code);
  ASSERT_EQ(code, 0) << out;
  auto a = read_npy(path("o.npy")), b = read_npy(path("o.1.npy"));
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->shape(), (Shape{2, 67}));
  EXPECT_EQ(b->shape(), (Shape{2, 3}));
}

TEST_F(Cli, InputOfTheWrongShapeIsOneLineAndWritesNothing) {
  ASSERT_TRUE(static_cast<bool>(write_npy(path("bad.npy"), random_tensor({DType::kFloat32, {1, 3, 16, 16}}, 1))));
  int code;
  std::string out = cli("run --model " + model_path("tiny_cnn") + " --input " + path("bad.npy") + " --output " + path("y.npy"), &code);
  EXPECT_EQ(code, 1);
  EXPECT_EQ(out, "autotune: error: " + path("bad.npy") +
                     ": model input 'input' must be Tensor[(1, 3, 32, 32), float32], file holds Tensor[(1, 3, 16, 16), float32]\n");
  EXPECT_FALSE(fs::exists(path("y.npy")));
}

TEST_F(Cli, InputOfTheWrongDtypeIsRejected) {
  ASSERT_TRUE(static_cast<bool>(write_npy(path("i.npy"), random_tensor({DType::kInt64, {1, 3, 32, 32}}, 1, 0, 5))));
  int code;
  std::string out = cli("run --model " + model_path("tiny_cnn") + " --input " + path("i.npy"), &code);
  EXPECT_EQ(code, 1);
  EXPECT_NE(out.find("file holds Tensor[(1, 3, 32, 32), int64]"), std::string::npos) << out;
}

TEST_F(Cli, BadModelsAndFlagsExitOneWithOneLine) {
  std::ofstream(path("junk.onnx")) << "not a model";
  for (const std::string &args : {"run --model " + path("junk.onnx"), "inspect --model " + path("missing.onnx"),
                                  "run --model " + model_path("mlp") + " --bogus", "inspect --model " + model_path("mlp") + " --format svg",
                                  std::string("frobnicate")}) {
    int code;
    std::string out = cli(args, &code);
    EXPECT_EQ(code, 1) << args;
    EXPECT_EQ(out.rfind("autotune: error: ", 0), 0u) << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  }
}

TEST_F(Cli, InspectJsonListsNodesWithShapes) {
  int code;
  std::string out = cli("inspect --model " + model_path("tiny_cnn") + " --format json", &code);
  ASSERT_EQ(code, 0);
  auto j = nlohmann::json::parse(out);
  ASSERT_FALSE(j["nodes"].empty());
  EXPECT_EQ(j["nodes"][0]["op"], "nn.conv2d");
  EXPECT_EQ(j["nodes"][0]["shape"], nlohmann::json({1, 8, 32, 32}));
  EXPECT_EQ(j["nodes"][0]["dtype"], "float32");
  EXPECT_EQ(j["nodes"][0]["inputs"][0], "%input");
}

TEST_F(Cli, InspectDotAndHelp) {
  int code;
  std::string out = cli("inspect --model " + model_path("mlp") + " --format dot", &code);
  ASSERT_EQ(code, 0);
  EXPECT_EQ(out.rfind("digraph main {", 0), 0u);
  EXPECT_NE(out.find("nn.dense"), std::string::npos);
  for (const char *cmd : {"--help", "run --help", "inspect --help"}) {
    out = cli(cmd, &code);
    EXPECT_EQ(code, 0);
    EXPECT_NE(out.find("Example"), std::string::npos) << cmd;
  }
}

TEST_F(Cli, BenchJsonReportsLatencyAndEveryGroup) {
  int code;
  std::string out = cli("bench --model " + model_path("tiny_cnn") + " --runs 3 --warmup 1 --json", &code);
  ASSERT_EQ(code, 0) << out;
  auto j = nlohmann::json::parse(out);
  EXPECT_GT(j["median_ms"].get<double>(), 0.0);
  EXPECT_LE(j["min_ms"].get<double>(), j["median_ms"].get<double>());
  EXPECT_GE(j["max_ms"].get<double>(), j["median_ms"].get<double>());
  EXPECT_EQ(j["runs"], 3);
  ASSERT_EQ(j["groups"].size(), 13u);  // the 13 fused groups of tiny_cnn, softmax last
  for (const auto &g : j["groups"]) EXPECT_TRUE(g["compiled"].get<bool>()) << g["ops"];
  // The roofline's ceiling for the target it ran on, and each group's share of it.
  double peak = j["peak_gflops"].get<double>();
  EXPECT_GT(peak, 0.0);
  EXPECT_FALSE(j["isa"].get<std::string>().empty());
  for (const auto &g : j["groups"])
    EXPECT_NEAR(g["share_of_peak"].get<double>(), g["gflops_per_s"].get<double>() / peak, 1e-3) << g["ops"];
  out = cli("bench --model " + model_path("tiny_cnn") + " --runs 0", &code);
  EXPECT_EQ(code, 1);
  EXPECT_EQ(out, "autotune: error: bench: --runs must be at least 1\n");
}

TEST_F(Cli, BenchSaysWhetherEachGroupsThreadsSplitRowsOrChannels) {
  // On two threads MobileNetV2's cut (codegen/ThreadRows) moves groups to rows beyond those whose
  // default alone splits rows (--thread-split group).
  auto rows = [&](const std::string &flags) {
    int code;
    std::string out = cli("bench --model " + model_path("mobilenet_v2") + " --runs 1 --warmup 0 --threads 2 --json" + flags, &code);
    EXPECT_EQ(code, 0) << out;
    int n = 0;
    auto j = nlohmann::json::parse(out);
    for (const auto &g : j["groups"]) {
      std::string split = g["threads_split"].get<std::string>();
      EXPECT_TRUE(split == "rows" || split == "channels") << split;
      n += split == "rows";
    }
    return n;
  };
  int model = rows(""), group = rows(" --thread-split group");
  EXPECT_GT(group, 0);
  EXPECT_GT(model, group);
  int code;
  std::string out = cli("bench --model " + model_path("mobilenet_v2") + " --thread-split rows", &code);
  EXPECT_EQ(code, 1);
  EXPECT_EQ(out, "autotune: error: --thread-split: model or group, got 'rows'\n");
}

TEST_F(Cli, TuneThenBenchAndRunUseTheDatabase) {
  int code;
  std::string db = path("t.db");
  std::string out = cli("--model " + model_path("tiny_cnn") + " --trials 16 --db " + db + " --min-time 0.002", &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("16 trials this run (0 failed), 0 before, "), std::string::npos) << out;
  size_t at = out.find(" confirmation measurements");
  ASSERT_NE(at, std::string::npos) << out;
  int confirmations = std::stoi(out.substr(out.rfind(", ", at) + 2));
  std::string records = std::to_string(16 + confirmations);
  EXPECT_NE(out.find("end to end (median of 20 runs, alternating): untuned"), std::string::npos) << out;
  EXPECT_NE(out.find("[   16/16 trials]"), std::string::npos) << out;  // the progress lines (stderr)
  // tiny_cnn's one prologue is the flatten before its classifier (a reshape the dense layer can
  // read in place); its chains are not measured. The move is taken where it gains in the model.
  // The count the tune output gives after a phrase (-1 where the phrase is not in it).
  auto count_after = [&out](const std::string &phrase) {
    size_t at = out.find(phrase);
    return at == std::string::npos ? -1 : std::stoi(out.substr(at + phrase.size()));
  };
  int taken = count_after("moves from FuseOps's measured, ");
  ASSERT_TRUE(taken == 0 || taken == 1) << out;
  int groups = 13 - taken;
  // The plan check keeps a group on its default when it ran slower tuned in the model (timings:
  // on a busy machine a group can lose by noise); the tune command lists how many.
  int reverted = std::max(0, count_after("in the model, "));
  std::string tuned = std::to_string(groups - reverted) + " of " + std::to_string(groups) + " groups tuned";
  out = cli("bench --model " + model_path("tiny_cnn") + " --db " + db + " --runs 3 --json", &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("tuning database " + db + ": " + tuned), std::string::npos) << out;  // stderr
  auto bench_json = nlohmann::json::parse(out.substr(out.find('{')));
  EXPECT_EQ(bench_json["tuned_groups"], groups - reverted);
  std::string partition = "searched (the database's): " + std::to_string(taken) + " groups recomputed in the groups that read them, 0 joined to the group that reads them";
  EXPECT_EQ(bench_json["partition"], partition);
  // The planned stage is the saved partition's groups: FuseOps's "groups" list, or with the
  // flatten recomputed, the same less the flatten's group, the dense layer's reading it.
  std::string fused_json = cli("inspect --model " + model_path("tiny_cnn") + " --stage fused --format json", &code);
  ASSERT_EQ(code, 0) << fused_json;
  std::string planned_json = cli("inspect --model " + model_path("tiny_cnn") + " --stage planned --db " + db + " --format json", &code);
  ASSERT_EQ(code, 0) << planned_json;
  EXPECT_NE(planned_json.find(partition.substr(0, partition.find(" in the groups"))), std::string::npos) << planned_json;  // stderr
  nlohmann::json planned_groups = nlohmann::json::parse(planned_json.substr(planned_json.find('{')))["groups"];
  nlohmann::json fused_groups = nlohmann::json::parse(fused_json)["groups"];
  if (taken == 0) {
    EXPECT_EQ(planned_groups, fused_groups);
  } else {
    ASSERT_EQ(planned_groups.size(), fused_groups.size() - 1);
    EXPECT_EQ(fused_groups[10]["ops"], nlohmann::json::array({"reshape"}));
    EXPECT_EQ(planned_groups[10]["ops"], nlohmann::json::array({"reshape", "nn.dense", "add"}));
  }
  out = cli("db partitions --db " + db, &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find(taken == 0 ? ": {\"moves\":[]}" : ": {\"moves\":[10]}"), std::string::npos) << out;  // one saved partition
  out = cli("inspect --model " + model_path("tiny_cnn") + " --stage planned", &code);
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("--stage planned needs --db"), std::string::npos) << out;
  out = cli("run --model " + model_path("tiny_cnn") + " --db " + db, &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find(tuned), std::string::npos) << out;
  out = cli("db ls --db " + db, &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), groups + 1);  // a header and a workload per group
  out = cli("db export --db " + db + " --output " + path("t.jsonl"), &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(out, "exported " + records + " records to " + path("t.jsonl") + "\n");
  out = cli("db import --db " + path("u.db") + " --input " + path("t.jsonl"), &code);
  EXPECT_EQ(out, "added " + records + " records to " + path("u.db") + "\n");
  out = cli("db merge --db " + path("u.db") + " --from " + db, &code);
  EXPECT_EQ(out, "added 0 records to " + path("u.db") + "\n");
}

TEST_F(Cli, TuningIntoAFileThatIsNotADatabaseFailsWithoutTouchingIt) {
  std::ofstream(path("notes.db")) << "precious";
  int code;
  std::string out = cli("--model " + model_path("tiny_cnn") + " --trials 5 --db " + path("notes.db"), &code);
  EXPECT_EQ(code, 1);
  EXPECT_EQ(out.rfind("autotune: error: " + path("notes.db") + ": not a tuning database", 0), 0u) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  std::ifstream in(path("notes.db"));
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), {}), "precious");
}

/**
 * Runs the CLI with `args`, its output in `log`, until the output holds `lines` lines (or a
 * minute passes), then interrupts it as a user would (SIGINT); returns the exit status.
 */
int run_and_interrupt(const std::string &args, const std::string &log, int lines) {
  std::string cmd = std::string(AUTOTUNE_CLI) + args;
  pid_t pid = fork();
  std::ofstream(log).close();  // empty; both streams append to it, so neither overwrites the other
  if (pid == 0) {
    freopen(log.c_str(), "a", stdout);
    freopen(log.c_str(), "a", stderr);
    execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), nullptr);
    _exit(127);
  }
  for (int i = 0; i < 600; ++i) {
    std::ifstream in(log);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    if (std::count(text.begin(), text.end(), '\n') >= lines) break;
    usleep(100000);
  }
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

TEST_F(Cli, CtrlCStopsCleanlyAndTheSameCommandResumes) {
  std::string db = path("t.db"), log = path("tune.log");
  std::string job = " --model " + model_path("resnet18") + " --db " + db + " --min-time 0.002 --trials ";
  // Wait for a few measurements, then interrupt.
  int status = run_and_interrupt(job + "400", log, 5);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130);
  std::ifstream in(log);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(text.find("interrupted: every measured record is saved"), std::string::npos) << text;
  size_t at = text.find(" trials this run");
  ASSERT_NE(at, std::string::npos) << text;
  int done = std::stoi(text.substr(text.rfind(':', at) + 2));
  EXPECT_GT(done, 0);
  int code;
  std::string again = cli("--model " + model_path("tiny_cnn") + " --trials 1 --db " + db, &code);  // another model, same file: opens fine
  EXPECT_EQ(code, 0) << again;
  std::string resumed = cli(job + std::to_string(done + 2), &code);
  EXPECT_EQ(code, 0) << resumed;
  EXPECT_NE(resumed.find("2 trials this run (0 failed), " + std::to_string(done) + " before, "), std::string::npos) << resumed;
}

TEST_F(Cli, CtrlCDuringThePartitionSearchSavesNoPartition) {
  // The generated EfficientNet has squeeze-excitation prologues: the search measures them first.
  std::string db = path("p.db"), log = path("partition.log");
  int status = run_and_interrupt(" --model " + model_path("efficientnet_b0") + " --db " + db + " --min-time 0.002 --trials 50", log, 1);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130);
  std::ifstream in(log);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(text.find("partition [1/"), std::string::npos) << text;  // progress counts the moves it measures
  EXPECT_NE(text.find("interrupted while searching the partition: nothing saved"), std::string::npos) << text;
  EXPECT_EQ(text.find(" trials this run"), std::string::npos) << text;  // no schedule was measured
  int code;
  std::string planned = cli("inspect --model " + model_path("efficientnet_b0") + " --stage planned --db " + db + " --format json", &code);
  EXPECT_EQ(code, 0) << planned;
  EXPECT_NE(planned.find("FuseOps's (none saved for this model)"), std::string::npos) << planned.substr(0, 300);
  std::string saved = cli("db partitions --db " + db, &code);
  EXPECT_EQ(code, 0) << saved;
  EXPECT_EQ(saved, "no partition saved (autotune tune saves one per model and target)\n");
}

TEST_F(Cli, InspectFusedJsonListsGroups) {
  int code;
  std::string out = cli("inspect --model " + model_path("resnet18_bn") + " --stage fused --format json", &code);
  ASSERT_EQ(code, 0) << out;
  auto j = nlohmann::json::parse(out);
  // 23 convs' groups (the stem's first), pool, dense; nchwc-layout's change in, the global pool's
  // mean of the blocked planes, its values changed back with the flatten
  ASSERT_EQ(j["groups"].size(), 25u);
  const auto &g = j["groups"][0];
  EXPECT_EQ(g["id"], "%0");
  EXPECT_EQ(g["ops"], nlohmann::json({"nn.conv2d", "nn.relu"}));
  EXPECT_EQ(g["pattern"], "OutEWiseFusable");
  EXPECT_EQ(g["inputs"][0], "%input");
  EXPECT_EQ(g["outputs"], nlohmann::json({"%0"}));
}

TEST_F(Cli, VerifyReportsEveryPassAndDisablePassIsHonoured) {
  int code;
  std::string out = cli("inspect --model " + model_path("tiny_cnn") + " --stage fused --verify --disable-pass fold-batch-norm", &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("verify fuse-ops"), std::string::npos);
  EXPECT_EQ(out.find("verify fold-batch-norm"), std::string::npos);
  EXPECT_NE(out.find("nn.batch_norm"), std::string::npos);  // kept, since its pass was disabled
  out = cli("inspect --model " + model_path("tiny_cnn") + " --stage fused --disable-pass fold-everything", &code);
  EXPECT_EQ(code, 1);
  EXPECT_NE(out.find("unknown pass 'fold-everything'"), std::string::npos) << out;
}

TEST_F(Cli, RunExecutesTheOptimizedGraphByDefaultAndEveryStageAgrees) {
  Graph g = load_model("resnet18_bn");
  ASSERT_TRUE(static_cast<bool>(write_npy(path("x.npy"), random_tensor(g.inputs[0].type, 8))));
  std::vector<Tensor> outs;
  for (const char *stage : {"", " --stage imported", " --stage fused"}) {
    int code;
    std::string out = cli("run --executor reference --model " + model_path("resnet18_bn") + " --input " + path("x.npy") +
                              " --output " + path("y.npy") + stage, &code);
    ASSERT_EQ(code, 0) << out;
    if (*stage == '\0') {  // BN folded: 20 convs, 17 relus, 8 adds, pool, reshape, dense, bias add; nchwc-layout's to and from
      EXPECT_NE(out.find("optimized graph: 52 nodes"), std::string::npos) << out;
    }
    auto y = read_npy(path("y.npy"));
    ASSERT_TRUE(static_cast<bool>(y));
    outs.push_back(y.take());
  }
  for (size_t i = 1; i < outs.size(); ++i) {
    auto d = compare(outs[i], outs[0]);
    ASSERT_TRUE(static_cast<bool>(d));
    EXPECT_LT(d->relative(), 1e-5);
  }
}

}  // namespace
}  // namespace autotune
