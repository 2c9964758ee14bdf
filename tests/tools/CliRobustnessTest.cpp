// The review's triggers, run through the CLI as a user would, under a 4 GB address-space limit
// (ulimit -v): each ends in exit code 1 and one printable line on stderr naming the file and the
// reason, never a signal; the int64 model gives the reference executor's answer. Every triggering
// file is generated here.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "db/TuningDb.h"
#include "db/Workload.h"
#include "ir/Hash.h"
#include "ir/Npy.h"
#include "ir/OnnxImport.h"
#include "ir/Partition.h"
#include "ir/Pass.h"
#include "codegen/Gpu.h"
#include "runtime/Cuda.h"
#include "ir/Reference.h"
#include "tests/OnnxBuilder.h"

namespace autotune {
namespace {

namespace fs = std::filesystem;
using testing::OnnxBuilder;

std::string model_path(const std::string &name) { return std::string(AUTOTUNE_MODELS_DIR) + "/" + name + ".onnx"; }

std::string slurp(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

struct Outcome {
  int code = -1;    // exit code, or -signal
  std::string out, err;
};

class CliRobustness : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("autotune_cli_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string &n) const { return (dir_ / n).string(); }

  /** Runs `autotune ARGS` under ulimit -v 4 GiB, with stdout and stderr kept apart. */
  Outcome cli(const std::string &args) const { return cli_env("", args); }
  /** The same with environment assignments ("NAME=value ") before the command. */
  Outcome cli_env(const std::string &env, const std::string &args) const {
    std::string out = path("stdout.txt"), err = path("stderr.txt");
    std::string cmd = "ulimit -v 4194304; exec env " + env + std::string(AUTOTUNE_CLI) + " " + args + " >" + out + " 2>" + err;
    int status = std::system(("/bin/bash -c '" + cmd + "'").c_str());
    Outcome o;
    o.code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    o.out = slurp(out), o.err = slurp(err);
    return o;
  }
  /** The review's standard for bad input: exit 1, one printable line naming `file` and containing `reason`. */
  void expect_one_line_error(const Outcome &o, const std::string &file, const std::string &reason) const {
    EXPECT_EQ(o.code, 1) << o.err;
    EXPECT_EQ(o.err.rfind("autotune: error: " + file + ": ", 0), 0u) << o.err;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
    EXPECT_EQ(o.err.back(), '\n');
    for (char c : o.err.substr(0, o.err.size() - 1)) EXPECT_TRUE(c >= 0x20 || c < 0) << "control byte in: " << o.err;
    EXPECT_NE(o.err.find(reason), std::string::npos) << o.err;
  }
  fs::path dir_;
};

TEST_F(CliRobustness, Int64ValuesCrossingGroupsGiveTheReferencesAnswer) {
  std::string model = testing::int64_crossing_groups_model(4096).save(path("int64.onnx"));
  std::vector<int64_t> idx(4096);
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int64_t>(i * 7 % 5) - 2;
  ASSERT_TRUE(static_cast<bool>(write_npy(path("idx.npy"), tensor_i64({4096}, idx))));
  Outcome c = cli("run --threads 1 --model " + model + " --input " + path("idx.npy") + " --output " + path("c.npy"));
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(c.out.find("1 on the reference executor"), std::string::npos) << c.out;  // the int64 group, as in the review
  Outcome r = cli("run --executor reference --model " + model + " --input " + path("idx.npy") + " --output " + path("r.npy"));
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char *suffix : {"", ".1"}) {
    auto a = read_npy(path(std::string("c") + suffix + ".npy")), b = read_npy(path(std::string("r") + suffix + ".npy"));
    ASSERT_TRUE(a && b);
    EXPECT_LT(compare(*a, *b)->relative(), 1e-6) << suffix;
  }
  std::vector<std::string> names;  // outputs written whole, nothing else left beside them
  for (const auto &e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"c.1.npy", "c.npy", "idx.npy", "int64.onnx", "r.1.npy", "r.npy", "stderr.txt", "stdout.txt"}));
}

TEST_F(CliRobustness, AnInitializerClaimingMoreThanItsDataIsOneLine) {
  std::string model = testing::x_plus_x_model().initializer_raw("w", onnx::TensorProto::FLOAT, {int64_t{1} << 34}, std::string(4, '\0')).save(path("tiny.onnx"));
  EXPECT_LT(fs::file_size(model), 100u);
  for (const char *cmd : {"run", "inspect", "bench"})
    expect_one_line_error(cli(std::string(cmd) + " --model " + model), model, "needs 17179869184 values (68719476736 bytes), the file has 4 bytes");
}

TEST_F(CliRobustness, ABroadcastFoldedAtImportIsOneLine) {
  std::string model = testing::range_broadcast_model().save(path("range.onnx"));
  EXPECT_LT(fs::file_size(model), size_t{1100} << 10);
  expect_one_line_error(cli("run --model " + model), model, "would need 128 GiB, beyond the import budget of");
}

TEST_F(CliRobustness, AnNpyHeaderClaimingMoreThanItsDataIsOneLine) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3, 32768, 32768), }";
  while ((10 + header.size() + 1) % 64) header += ' ';
  header += '\n';
  std::ofstream(path("x.npy"), std::ios::binary) << std::string("\x93NUMPY\x01\x00", 8) << static_cast<char>(header.size()) << '\0' << header;
  expect_one_line_error(cli("run --model " + model_path("tiny_cnn") + " --input " + path("x.npy")), path("x.npy"),
                        "expected 12884901888 bytes of data for Tensor[(1, 3, 32768, 32768), float32], found 0");
}

TEST_F(CliRobustness, GatherIndicesOutOfRangeAreOneLineInBothExecutors) {
  std::string model = testing::int64_crossing_groups_model(4).save(path("int64.onnx"));
  ASSERT_TRUE(static_cast<bool>(write_npy(path("idx.npy"), tensor_i64({4}, {0, int64_t{1} << 40, 1, 2}))));
  for (const char *executor : {"compiled", "reference"})
    expect_one_line_error(cli(std::string("run --executor ") + executor + " --model " + model + " --input " + path("idx.npy")), model,
                          "index 2199023255552 is out of range [-5, 5)");
}

TEST_F(CliRobustness, ADamagedNodeNameStaysOnOneLine) {
  OnnxBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {1}).node("Hardmax", {"x"}, {"y"}, "line1\nline2\r\nline3\x1b[31m\xff").output("y", onnx::TensorProto::FLOAT, {1});
  std::string model = b.save(path("names.onnx"));
  Outcome o = cli("inspect --model " + model);
  expect_one_line_error(o, model, "node 'line1\\nline2\\r\\nline3\\x1b[31m\\xff' (Hardmax): op 'Hardmax' is not supported");
}

TEST_F(CliRobustness, TuningWithFuseOpsDisabledTunesEveryOpAlone) {
  Outcome t = cli("--model " + model_path("tiny_cnn") + " --trials 3 --min-time 0.002 --db " + path("t.db") + " --disable-pass fuse-ops");
  ASSERT_EQ(t.code, 0) << t.err;
  Outcome r = cli("run --model " + model_path("tiny_cnn") + " --disable-pass fuse-ops --output " + path("y.npy"));
  ASSERT_EQ(r.code, 0) << r.err;
  Outcome f = cli("run --model " + model_path("tiny_cnn") + " --output " + path("f.npy"));
  ASSERT_EQ(f.code, 0) << f.err;
  EXPECT_LT(compare(*read_npy(path("y.npy")), *read_npy(path("f.npy")))->relative(), 1e-5);
}

TEST_F(CliRobustness, ATruncatedKernelCacheIsRebuiltOnTheNextRun) {
  // As after a full disk: every cached object cut short. The next run must compile them again
  // (not fall back to the reference executor), and the run after it must find them whole.
  std::string env = "XDG_CACHE_HOME=" + path("cache") + " ";
  std::string run = "run --model " + model_path("tiny_cnn") + " --output ";
  Outcome first = cli(run + path("a.npy"));  // the expected output (the default cache, elsewhere)
  ASSERT_EQ(first.code, 0) << first.err;
  Outcome fill = cli_env(env, run + path("b.npy"));
  ASSERT_EQ(fill.code, 0) << fill.err;
  EXPECT_NE(fill.out.find("(13 compiled, 0 from cache)"), std::string::npos) << fill.out;
  int cut = 0;
  for (const auto &e : fs::directory_iterator(path("cache") + "/autotune/kernels")) fs::resize_file(e.path(), fs::file_size(e.path()) / 2), ++cut;
  EXPECT_GE(cut, 13);  // an object per stage: at least one per kernel
  Outcome rebuilt = cli_env(env, run + path("c.npy"));
  ASSERT_EQ(rebuilt.code, 0) << rebuilt.err;
  EXPECT_NE(rebuilt.out.find("(13 compiled, 0 from cache)"), std::string::npos) << rebuilt.out;  // no fallback note either
  Outcome cached = cli_env(env, run + path("d.npy"));
  ASSERT_EQ(cached.code, 0) << cached.err;
  EXPECT_NE(cached.out.find("(0 compiled, 13 from cache)"), std::string::npos) << cached.out;
  for (const char *f : {"b.npy", "c.npy", "d.npy"}) EXPECT_EQ(slurp(path(f)), slurp(path("a.npy"))) << f;
}

TEST_F(CliRobustness, OptionsOutOfRangeAreOneLineAndMeasureNothing) {
  std::string job = "--model " + model_path("tiny_cnn") + " --trials 5 --db " + path("t.db");
  expect_one_line_error(cli(job + " --timeout 0"), "tune", "the timeout must be between 0.001 and 86400 seconds, got 0.000000");
  expect_one_line_error(cli(job + " --timeout nan"), "tune", "the timeout must be between 0.001 and 86400 seconds, got nan");
  expect_one_line_error(cli(job + " --timeout 1e300"), "tune", "the timeout must be between 0.001 and 86400 seconds");
  expect_one_line_error(cli(job + " --min-time -1"), "tune", "min_time_s must be between 0 and 3600 seconds");
  expect_one_line_error(cli(job + " --confirm-min-time nan"), "tune", "confirm_min_time_s must be between 0 and 3600 seconds, got nan");
  expect_one_line_error(cli(job + " --batch 0"), "tune", "batch must be between 1 and 1024, got 0");
  std::ofstream(path("c.json")) << "{\"max_runs\": 0}";
  expect_one_line_error(cli(job + " --config " + path("c.json")), "tune", "max_runs must be between 1 and 100000000, got 0");
  EXPECT_FALSE(fs::exists(path("t.db")));  // nothing was measured, nothing recorded
  expect_one_line_error(cli("run --model " + model_path("tiny_cnn") + " --threads 100000"), "--threads", "must be between 0 (one per hardware thread) and 4096");
  expect_one_line_error(cli(job + " --search grid"), "tune", "search must be evolutionary or random, got 'grid'");
  EXPECT_FALSE(fs::exists(path("t.db")));
  // costmodel eval checks its flags before it reads anything.
  { ASSERT_TRUE(static_cast<bool>(TuningDb::open(path("e.db")))); }
  std::string eval = "costmodel eval --db " + path("e.db");
  expect_one_line_error(cli(eval + " --seed abc"), "costmodel eval", "--seed expects an integer, got 'abc'");
  expect_one_line_error(cli(eval + " --objective foo"), "costmodel eval", "--objective must be reg:squarederror, rank:pairwise or rank:ndcg, got 'foo'");
  expect_one_line_error(cli(eval + " --test-share 2"), "costmodel eval", "--test-share must be between 0 and 1, got 2");
  expect_one_line_error(cli(eval), path("e.db"), "0 training and 0 test records");
}

TEST_F(CliRobustness, DeployTimeUseOfADatabaseWritesNothing) {
  std::string db = path("t.db");
  Outcome t = cli("--model " + model_path("tiny_cnn") + " --trials 14 --min-time 0.002 --db " + db);
  ASSERT_EQ(t.code, 0) << t.err;
  sqlite3 *raw = nullptr;  // leave it in rollback-journal mode: any read-write open would switch it back to WAL
  ASSERT_EQ(sqlite3_open(db.c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "PRAGMA journal_mode=DELETE", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(raw);
  std::string before = slurp(db);
  for (const std::string &cmd : {"run --model " + model_path("tiny_cnn") + " --db " + db, "bench --runs 2 --model " + model_path("tiny_cnn") + " --db " + db,
                                 "bench --runs 2 --rounds 2 --model " + model_path("tiny_cnn") + " --db " + db + " --against untuned",
                                 "db ls --db " + db, "db best --db " + db, "db export --db " + db + " --output " + path("e.jsonl"),
                                 "db merge --db " + path("other.db") + " --from " + db}) {
    Outcome o = cli(cmd);
    EXPECT_EQ(o.code, 0) << cmd << ": " << o.err;
  }
  EXPECT_EQ(slurp(db), before);
  EXPECT_FALSE(fs::exists(db + "-wal"));
}

TEST_F(CliRobustness, BenchAgainstTimesTwoPlansInOneProcessSwappingWhichGoesFirst) {
  std::string db = path("t.db"), model = model_path("tiny_cnn");
  // FuseOps's partition, as the untuned plan's: the text lists the groups that differ most where
  // both plans have the same groups.
  Outcome t = cli("--model " + model + " --trials 14 --min-time 0.002 --partition fuseops --db " + db);
  ASSERT_EQ(t.code, 0) << t.err;
  Outcome o = cli("bench --model " + model + " --db " + db + " --against untuned --rounds 3 --runs 4 --json");
  ASSERT_EQ(o.code, 0) << o.err;
  auto j = nlohmann::json::parse(o.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << o.out;
  EXPECT_EQ(j["a"], db);
  EXPECT_EQ(j["b"], "untuned");
  EXPECT_EQ(j["runs"], 4);
  EXPECT_EQ(j["b_tuned_groups"], 0);  // untuned: the default schedules
  EXPECT_GT(j["a_tuned_groups"].get<int>(), 0);
  EXPECT_LE(j["a_tuned_groups"].get<int>(), j["groups"].get<int>());
  ASSERT_EQ(j["rounds"].size(), 3u) << o.out;
  std::vector<double> ratios;
  for (size_t r = 0; r < 3; ++r) {
    const auto &x = j["rounds"][r];
    // Two compiled copies of each plan, the second pair compiled in the other order, in turn; who
    // goes first swapped every two rounds, so each pair runs both ways.
    EXPECT_EQ(x["pair"], r % 2);
    EXPECT_EQ(x["first"], (r / 2) % 2 ? "b" : "a");
    ASSERT_GT(x["a_ms"].get<double>(), 0);
    EXPECT_NEAR(x["ratio"].get<double>(), x["b_ms"].get<double>() / x["a_ms"].get<double>(), 1e-9);
    ratios.push_back(x["ratio"].get<double>());
  }
  std::sort(ratios.begin(), ratios.end());
  EXPECT_DOUBLE_EQ(j["median_ratio"].get<double>(), ratios[1]);
  // Each plan's groups with their medians over the rounds.
  for (const char *side : {"a_groups_ms", "b_groups_ms"}) {
    ASSERT_EQ(j[side].size(), j[side[0] == 'a' ? "groups" : "b_groups"].get<size_t>()) << side;
    for (const auto &g : j[side]) {
      EXPECT_GT(g["median_ms"].get<double>(), 0) << side << " " << g.dump();
      EXPECT_FALSE(g["ops"].get<std::string>().empty());
    }
  }
  // --bound: what any partition could gain, with the stream rates it priced the values at.
  Outcome b = cli("bench --model " + model + " --db " + db + " --runs 3 --bound --json");
  ASSERT_EQ(b.code, 0) << b.err;
  auto jb = nlohmann::json::parse(b.out, nullptr, false);
  ASSERT_FALSE(jb.is_discarded()) << b.out;
  EXPECT_GT(jb["bound"]["written_mb"].get<double>(), 0);
  EXPECT_GE(jb["bound"]["bound"].get<double>(), 1.0);
  EXPECT_LT(jb["bound"]["floor_ms"].get<double>(), jb["median_ms"].get<double>());
  EXPECT_EQ(jb["stream_rates"].size(), 10u);
  Outcome bt = cli("bench --model " + model + " --db " + db + " --runs 3 --bound");
  ASSERT_EQ(bt.code, 0) << bt.err;
  EXPECT_NE(bt.out.find("what any partition of these "), std::string::npos) << bt.out;
  expect_one_line_error(cli("bench --model " + model + " --db " + db + " --against untuned --bound"), "bench", "--bound applies without --against");
  expect_one_line_error(cli("bench --model " + model + " --target sm_90 --bound"), "bench", "not with a GPU --target");
  Outcome text = cli("bench --model " + model + " --db " + db + " --against untuned --rounds 3 --runs 2");
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("round 2 (copies 2, A first): A "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("round 3 (copies 1, B first): A "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("B / A: median "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("groups that differ most (medians over the rounds, ms):\n  %"), std::string::npos) << text.out;
  expect_one_line_error(cli("bench --model " + model + " --db " + db + " --against " + path("none.db")), path("none.db"), "no such tuning database");
  expect_one_line_error(cli("bench --model " + model + " --against untuned"), "bench", "--against names the plan --db already gives");
  expect_one_line_error(cli("bench --model " + model + " --against untuned --against-partition fuseops"), "bench", "--against names the plan --db already gives");
  expect_one_line_error(cli("bench --model " + model + " --db " + db + " --rounds 2"), "bench", "--rounds applies with --against");
  expect_one_line_error(cli("bench --model " + model + " --db " + db + " --against untuned --rounds 0"), "bench", "--rounds must be between 1 and 1000");
  expect_one_line_error(cli("bench --model " + model + " --db " + db + " --against-partition fuseops"), "bench", "--against-partition applies with --against");
  expect_one_line_error(cli("bench --model " + model + " --db " + db + " --against " + db + " --against-partition none"), "--partition", "db or fuseops, got 'none'");
}

// A budget that ends before every task's default ran: those tasks say so ('-'), and the sums say
// which tasks they cover, instead of zeros that read as measurements.
TEST_F(CliRobustness, TuneTableMarksTasksTheBudgetDidNotReach) {
  Outcome t = cli("--model " + model_path("tiny_cnn") + " --trials 1 --min-time 0.002 --db " + path("t.db"));
  ASSERT_EQ(t.code, 0) << t.err;
  size_t tasks = 0, unmeasured = 0;
  std::istringstream lines(t.out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream cols(line);
    std::string first;
    cols >> first;
    if (first.empty() || !std::all_of(first.begin(), first.end(), ::isdigit)) continue;  // a task row starts with its number
    ++tasks;
    unmeasured += line.size() >= 2 && line.compare(line.size() - 2, 2, " -") == 0;
    EXPECT_EQ(line.find("0.00x"), std::string::npos) << line;
  }
  ASSERT_GT(tasks, 1u) << t.out;
  EXPECT_EQ(unmeasured, tasks - 1) << t.out;  // one trial: the first task's default
  EXPECT_NE(t.out.find("(sum over groups, over the 1 of " + std::to_string(tasks) + " tasks measured)"), std::string::npos) << t.out;
}

// Issue 11's comparison in one process: one database's searched partition (here EfficientNet-B0's
// squeeze-excitation prologues, saved as the tuner saves them) against FuseOps's.
TEST_F(CliRobustness, BenchAgainstTimesTheSearchedPartitionBesideFuseOpss) {
  std::string db = path("p.db"), model = model_path("efficientnet_b0");
  Outcome target = cli("target --no-peak");
  ASSERT_EQ(target.code, 0) << target.err;
  size_t at = target.out.find("database key: ");
  ASSERT_NE(at, std::string::npos) << target.out;
  std::string key = target.out.substr(at + 14);
  key = key.substr(0, key.find('\n'));
  auto imported = import_onnx_file(model);
  ASSERT_TRUE(static_cast<bool>(imported)) << imported.error().message;
  auto fused = lower_to_stage(*imported, Stage::kFused, PassContext{});
  ASSERT_TRUE(static_cast<bool>(fused)) << fused.error().message;
  std::vector<int> prologues;
  for (const PartitionMove &m : partition_moves(*fused))
    if (m.why_not.empty() && m.kind == PartitionMove::kPrologue) prologues.push_back(m.producer);
  ASSERT_GE(prologues.size(), 2u);
  std::sort(prologues.rbegin(), prologues.rend());
  {
    auto d = TuningDb::open(db);
    ASSERT_TRUE(static_cast<bool>(d)) << d.error().message;
    ASSERT_TRUE(static_cast<bool>((*d)->save_partition(model_hash(*fused), key, partition_json(prologues), "")));
  }
  expect_one_line_error(cli("bench --model " + model + " --db " + db + " --against " + db), "bench", "--against names the plan --db already gives");
  Outcome o = cli("bench --model " + model + " --db " + db + " --against " + db + " --against-partition fuseops --rounds 2 --runs 2 --json");
  ASSERT_EQ(o.code, 0) << o.err;
  auto j = nlohmann::json::parse(o.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << o.out;
  EXPECT_EQ(j["a_partition"].get<std::string>().rfind("searched", 0), 0u) << o.out;
  EXPECT_EQ(j["b_partition"], "FuseOps's (asked for)");
  EXPECT_EQ(j["b_groups"].get<size_t>(), fused->nodes.size());
  EXPECT_EQ(j["groups"].get<size_t>(), fused->nodes.size() - prologues.size());  // each prologue merged into its consumers
  ASSERT_EQ(j["rounds"].size(), 2u) << o.out;
}

TEST_F(CliRobustness, ImportingAnUntrustworthyRecordIsOneLine) {
  const std::string ir = "def @main() { conv }";
  std::ofstream(path("bad.jsonl")) << "{\"workload\": \"" << fnv1a_hex(ir) << "\", \"target\": \"cpu\", \"ir\": \"" << ir
                                   << "\", \"schedule\": \"{}\", \"status\": \"ok\", \"runs\": 5}\n";
  expect_one_line_error(cli("db import --db " + path("t.db") + " --input " + path("bad.jsonl")), path("bad.jsonl") + ":1",
                        "an ok record needs 0 < min_s <= median_s and runs > 0");
}

TEST_F(CliRobustness, TargetPrintsTheDescriptionAndKeysTheDatabase) {
  Outcome t = cli("target --json");
  ASSERT_EQ(t.code, 0) << t.err;
  auto j = nlohmann::json::parse(t.out);
  for (const char *key : {"isa", "lanes", "vector_registers", "l1_bytes", "l2_bytes", "l3_bytes", "threads", "peak_gflops"})
    EXPECT_TRUE(j.contains(key)) << key << " in " << t.out;
  EXPECT_GT(j["peak_gflops"].get<double>(), 0.0);
  // Records of one target never serve another: tuning for avx2 keys its records by avx2's key.
  Outcome avx2 = cli("target --target avx2 --no-peak");
  if (avx2.code != 0) GTEST_SKIP() << avx2.err;  // an x86 host without AVX2
  std::string key = avx2.out.substr(avx2.out.find("database key: ") + 14);
  key = key.substr(0, key.find('/', key.find('/', key.find('/') + 1) + 1));  // triple/cpu/features
  Outcome tune = cli("--model " + model_path("tiny_cnn") + " --trials 13 --min-time 0.002 --target avx2 --db " + path("t.db"));
  ASSERT_EQ(tune.code, 0) << tune.err;
  EXPECT_NE(tune.out.find(" on " + key + "/"), std::string::npos) << tune.out;
  Outcome bad = cli("bench --model " + model_path("tiny_cnn") + " --target nonesuch");
  expect_one_line_error(bad, "--target nonesuch", "unknown target 'nonesuch' (host, avx2, avx512, or a JSON file)");
}

TEST_F(CliRobustness, CompileWritesEveryGroupsPtxAndGpuTargetsAreOneLineElsewhere) {
  // No GPU needed: compile writes the PTX (assembled by ptxas where installed); without a driver,
  // run says so in one line; the tuner refuses a GPU target in one line.
  bool check = !find_ptxas().empty();
  Outcome c = cli("compile --model " + model_path("resnet18") + " --target sm_90 --out " + path("ptx") + (check ? " --check" : ""));
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(c.err.find("wrote 25 PTX files (sm_90, "), std::string::npos) << c.err;
  EXPECT_EQ(c.err.find(", each accepted by ptxas)") != std::string::npos, check) << c.err;
  auto j = nlohmann::json::parse(slurp(path("ptx/launches.json")));
  ASSERT_EQ(j["groups"].size(), 25u);  // ResNet-18's fused groups
  for (const auto &g : j["groups"]) {
    std::string ptx = slurp(path("ptx/" + g["file"].get<std::string>()));
    EXPECT_NE(ptx.find(".target sm_90"), std::string::npos) << g["file"];
    for (const auto &l : g["launches"]) EXPECT_NE(ptx.find(".entry " + l["entry"].get<std::string>() + "("), std::string::npos);
    EXPECT_EQ(g["arguments"].back()["role"] == "temporary" || g["arguments"].back()["role"] == "output", true);
  }
  Outcome t = cli("target --target sm_90");
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_EQ(t.out.rfind("target sm_90: sm_90, ptx78; 132 SMs", 0), 0u) << t.out;
  // run and tuning need the CUDA driver: without one each says so in one line, and the tuner writes no database.
  if (!CudaDriver::open()) {
    expect_one_line_error(cli("run --model " + model_path("resnet18") + " --target sm_80"), "--target sm_80", "no CUDA driver");
    expect_one_line_error(cli("--model " + model_path("resnet18") + " --trials 5 --target sm_80 --db " + path("gpu.db")), "--target sm_80", "no CUDA driver");
    EXPECT_FALSE(std::filesystem::exists(path("gpu.db")));
  }
  int tiled = 0, by_rows = 0;
  for (const auto &g : j["groups"]) {
    tiled += g["schedule"].get<std::string>().find(" tiled {") != std::string::npos;
    by_rows += g["schedule"].get<std::string>().find(" row-reduced {") != std::string::npos;
    for (const auto &l : g["launches"]) {
      EXPECT_GT(l["occupancy"].get<double>(), 0.0) << l.dump();
      EXPECT_EQ(l["registers_from"], check ? "ptxas" : "estimate");
    }
  }
  EXPECT_EQ(tiled, 20);   // ResNet-18's convs
  EXPECT_EQ(by_rows, 2);  // its global pool and its classifier
  expect_one_line_error(cli("compile --model " + model_path("resnet18") + " --target avx2 --out " + path("x")), "target avx2",
                        "not a GPU description");
}

/** Starts `autotune ARGS` in the background with stderr to `log`; returns its pid. */
pid_t start(const std::string &args, const std::string &log) {
  pid_t pid = fork();
  if (pid == 0) {
    if (!freopen(log.c_str(), "w", stdout) || !freopen(log.c_str(), "a", stderr)) _exit(127);
    execl("/bin/sh", "sh", "-c", ("exec " + std::string(AUTOTUNE_CLI) + " " + args).c_str(), nullptr);
    _exit(127);
  }
  return pid;
}

/** Waits until `log` contains `text` (up to `seconds`). */
bool wait_for(const std::string &log, const std::string &text, int seconds) {
  for (int i = 0; i < seconds * 20; ++i) {
    if (slurp(log).find(text) != std::string::npos) return true;
    usleep(50000);
  }
  return false;
}

TEST_F(CliRobustness, CtrlCInTheConfirmationPhaseStopsTheRun) {
  std::string log = path("tune.log");
  // 13 tasks: 13 trials measure the defaults, one more a candidate; then the confirmation phase.
  // FuseOps's partition, as below: the partition search before the trials is not what is tested.
  pid_t pid = start("--model " + model_path("tiny_cnn") + " --trials 14 --min-time 0.2 --partition fuseops --db " + path("t.db"), log);
  ASSERT_TRUE(wait_for(log, " confirm]", 300)) << slurp(log);
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << slurp(log);
  EXPECT_EQ(WEXITSTATUS(status), 130) << slurp(log);
  EXPECT_NE(slurp(log).find("interrupted: every measured record is saved"), std::string::npos) << slurp(log);
  // It stopped instead of going on to the end-to-end benchmark.
  EXPECT_EQ(slurp(log).find("end to end (median of 20 runs"), std::string::npos) << slurp(log);
  EXPECT_EQ(slurp(log).find("end to end with that plan"), std::string::npos) << slurp(log);
}

TEST_F(CliRobustness, ASecondSignalEndsTheTunerAndItsCandidate) {
  // Orphaned candidates would come to this test (a subreaper); none may be left once the tuner is gone.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  std::string log = path("tune.log");
  // FuseOps's partition: the partition search's checks in the model come before the first trial
  // and have nothing to do with signals; on a 2-core host loaded by two more test processes they
  // alone took over the 120 s this wait had.
  pid_t pid = start("--model " + model_path("resnet18") + " --trials 400 --partition fuseops --db " + path("t.db"), log);
  ASSERT_TRUE(wait_for(log, "[    3/400 trials]", 300)) << slurp(log);
  kill(pid, SIGTERM);  // the first asks for a clean stop after the current candidate ...
  usleep(100000);
  kill(pid, SIGTERM);  // ... the second ends the process at once, mid-measurement
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status) || WIFEXITED(status));
  for (int i = 0; i < 100; ++i) {  // a candidate that died with its tuner is reaped here within moments
    pid_t r = waitpid(-1, nullptr, WNOHANG);
    if (r < 0) break;  // ECHILD: no child left at all
    if (r == 0) usleep(50000);
  }
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1) << "a process outlived the tuner";
  prctl(PR_SET_CHILD_SUBREAPER, 0);
}

}  // namespace
}  // namespace autotune
