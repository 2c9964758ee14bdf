// The partition search on a generated model with real measurements and a real database file.
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "codegen/Lower.h"
#include "codegen/Schedule.h"
#include "codegen/Target.h"
#include "db/TuningDb.h"
#include "db/Workload.h"
#include "ir/OnnxImport.h"
#include "ir/Partition.h"
#include "ir/Pass.h"
#include "ir/Reference.h"
#include "ir/Stats.h"
#include "runtime/Runtime.h"
#include "search/PartitionSearch.h"
#include "search/PlanCheck.h"
#include "tests/ir/TestUtil.h"

#include <nlohmann/json.hpp>

namespace autotune {
namespace {

namespace fs = std::filesystem;

// EfficientNet-B0 in NCHW throughout (nchwc-layout off): the prologues and the expand tile are NCHW's.
TEST(PartitionSearch, EveryLegalPrologueIsMeasuredAndTheWinnersAreSavedAndApply) {
  auto g = import_onnx_file(std::string(AUTOTUNE_MODELS_DIR) + "/efficientnet_b0.onnx");
  ASSERT_TRUE(static_cast<bool>(g));
  auto f = lower_to_stage(*g, Stage::kFused, testing::nchw_throughout());
  ASSERT_TRUE(static_cast<bool>(f));
  std::string db = (fs::temp_directory_path() / ("autotune_partition_" + std::to_string(::getpid()) + ".db")).string();
  fs::remove(db);
  PartitionSearchOptions o;
  o.db_path = db;
  o.measure.min_time_s = 0.005;
  o.rounds = 1;
  std::vector<std::string> lines;
  o.progress = [&](const std::string &l) { lines.push_back(l); };
  auto rep = search_partition(*f, o);
  ASSERT_TRUE(static_cast<bool>(rep)) << rep.error().message;
  // Every legal prologue is measured, and every chain a tile fits: EfficientNet-B0's expansions
  // (a 1x1 conv with SiLU before a stride-1 depthwise conv); its depthwise convs feed two groups
  // (the squeeze-excitation's pool and multiply), so no chain starts at one.
  int measurable = 0, measured = 0, expansions = 0;
  std::vector<PartitionMove> moves = partition_moves(*f);
  for (const PartitionMove &m : moves) {
    if (!m.why_not.empty()) continue;
    if (m.kind == PartitionMove::kPrologue) {
      ++measurable;
      continue;
    }
    auto merged = apply_move(*f, m.producer);
    ASSERT_TRUE(static_cast<bool>(merged)) << m.producer;
    bool tiled = !default_schedule(*merged->nodes[m.consumers[0] - 1].body, host_target()).steps.empty();
    measurable += tiled, expansions += tiled;
  }
  EXPECT_GE(expansions, 3);
  for (const MoveReport &m : rep->moves) {
    if (!m.measured) continue;
    ++measured;
    if (m.kind == "chain") {
      EXPECT_EQ(m.ops.rfind("nn.conv2d+sigmoid+multiply -> nn.conv2d+sigmoid+multiply", 0), 0u) << m.move << ": " << m.ops;
    } else {
      EXPECT_EQ(m.kind, "prologue") << m.move;
    }
    EXPECT_GT(m.apart_s, 0.0);
    EXPECT_GT(m.merged_s, 0.0);
    EXPECT_NEAR(m.ratio, m.merged_s / m.apart_s, 1e-9);  // one round: the ratio is that round's
    // Each kernel ran after the groups that write its inputs in its graph: apart, each consumer
    // after the move's producer (and its other producers), the producer after its own; merged,
    // each consumer after the producer's producers and its other ones. So apart runs one more
    // per consumer, less the producer's own producers counted again in every merged consumer
    // but the first. EfficientNet-B0's producers are all single-output groups.
    const PartitionMove &mv = *std::find_if(moves.begin(), moves.end(), [&](const PartitionMove &x) { return x.producer == m.producer; });
    int k = static_cast<int>(mv.consumers.size());
    int own = static_cast<int>(group_producers(*f, static_cast<size_t>(m.producer)).size());
    EXPECT_GE(m.producers_apart, k + own) << m.move;
    EXPECT_EQ(m.producers_apart - m.producers_merged, k - (k - 1) * own) << m.move;
    if (std::thread::hardware_concurrency() > 1) {
      EXPECT_GT(m.handoff_ns, 0.0) << m.move;  // where the cores were (0: one thread)
    }
    // Every move measured below alone_limit is judged in the model, which decides: one taken
    // gained there (its groups no slower than those it replaces), the others say why not.
    if (m.chosen) {
      EXPECT_LT(m.ratio, o.alone_limit) << m.move;
      EXPECT_GT(m.model_apart_ms, 0.0) << m.move;
      EXPECT_GT(m.model_ratio, 0.0) << m.move;
      EXPECT_LE(m.model_ratio, 1.0) << m.move;
    } else if (m.ratio < o.alone_limit) {
      EXPECT_EQ(m.why_not.rfind("left out: ", 0), 0u) << m.move << ": " << m.why_not;
      if (m.why_not.rfind("left out: not faster in the model", 0) == 0) {
        EXPECT_GE(m.model_ratio, 1.0) << m.move;
      }
    }
  }
  EXPECT_EQ(measured, measurable);
  // The partition kept is faster end to end than FuseOps's in the check's timings (the median of
  // their ratios, both orders), or none is kept.
  if (!rep->chosen.empty()) {
    EXPECT_TRUE(rep->checked);
    EXPECT_LT(rep->check_ratio, 1.0);
  }
  EXPECT_EQ(static_cast<int>(lines.size()), measured);  // a progress line per measured move
  // Saved under FuseOps's partition's hash and the target key, and it applies to the same outputs.
  auto opened = TuningDb::open(db, DbAccess::kReadOnly);
  ASSERT_TRUE(static_cast<bool>(opened));
  auto saved = (*opened)->partition(model_hash(*f), rep->target);
  ASSERT_TRUE(saved && saved->has_value());
  EXPECT_EQ(**saved, partition_json(rep->chosen));
  auto moved = apply_partition(*f, **saved);
  ASSERT_TRUE(static_cast<bool>(moved)) << moved.error().message;
  EXPECT_EQ(moved->nodes.size(), f->nodes.size() - rep->chosen.size());
  auto inputs = random_inputs(*g, 3);
  auto a = run_reference(*f, inputs), b = run_reference(*moved, inputs);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(compare((*a)[0], (*b)[0])->max_abs, 0.0);
  auto report = nlohmann::json::parse(rep->json());
  EXPECT_EQ(report["moves"].size(), rep->moves.size());
  for (size_t i = 0; i < rep->moves.size(); ++i) EXPECT_EQ(report["moves"][i].value("handoff_ns", -1.0), rep->moves[i].handoff_ns);
  if (rep->checked) {
    EXPECT_EQ(report["model_check"].value("fuseops_ms", -1.0), rep->fuseops_ms);
    EXPECT_EQ(report["model_check"].value("searched_ms", -1.0), rep->searched_ms);
    EXPECT_EQ(report["model_check"].value("ratio", -1.0), rep->check_ratio);
    EXPECT_GT(rep->check_ratio, 0.0);
  }
  opened->reset();
  for (const char *suffix : {"", "-wal", "-shm"}) fs::remove(db + suffix);
}

// The check in the model and `bench --against` time two models in timings whose order alternates
// (search/PlanCheck's alternate): each timing's times are given in a's and b's terms whatever ran
// first, its ratio is b / a, and each group's time is its median over the timings.
TEST(PartitionSearch, AlternatedTimingsSwapTheOrderAndKeepEachModelsTimesApart) {
  auto g = import_onnx_file(std::string(AUTOTUNE_MODELS_DIR) + "/resnet18.onnx");
  ASSERT_TRUE(static_cast<bool>(g));
  // The same model fused two ways, so the two take the same inputs but have different groups
  // (ResNet-18: NCHW16c adds a layout change, 25 groups against 24): each model's group times stay
  // its own whatever ran first.
  auto fa = lower_to_stage(*g, Stage::kFused, PassContext{}), fb = lower_to_stage(*g, Stage::kFused, testing::nchw_throughout());
  ASSERT_TRUE(fa && fb);
  auto a = CompiledModel::compile(*fa, CompileOptions{}), b = CompiledModel::compile(*fb, CompileOptions{});
  ASSERT_TRUE(a && b);
  ASSERT_NE((*a)->groups().size(), (*b)->groups().size());
  auto inputs = random_inputs(*fa, 0);
  auto t = alternate(**a, **b, inputs, 3, 4);
  ASSERT_TRUE(static_cast<bool>(t)) << t.error().message;
  ASSERT_EQ(t->rounds.size(), 4u);
  std::vector<double> ratios = t->ratios();
  ASSERT_EQ(ratios.size(), 4u);
  for (size_t i = 0; i < t->rounds.size(); ++i) {
    const Alternated::Round &r = t->rounds[i];
    EXPECT_EQ(r.a_first, i % 2 == 0) << i;
    EXPECT_GT(r.a_ms, 0.0);
    EXPECT_GT(r.b_ms, 0.0);
    EXPECT_DOUBLE_EQ(ratios[i], r.b_ms / r.a_ms);
    EXPECT_EQ(r.a_group_ms.size(), (*a)->groups().size());
    EXPECT_EQ(r.b_group_ms.size(), (*b)->groups().size());
  }
  std::vector<double> ga = t->group_ms(false), gb = t->group_ms(true);
  ASSERT_EQ(ga.size(), (*a)->groups().size());
  for (size_t k = 0; k < ga.size(); ++k) {
    std::vector<double> per;
    for (const Alternated::Round &r : t->rounds) per.push_back(r.a_group_ms[k]);
    EXPECT_DOUBLE_EQ(ga[k], median(per)) << k;
  }
  // With a second pair compiled in the other order (b2 before a2), the rounds take the pairs in
  // turn and swap who goes first every two rounds, so each pair runs in both orders.
  auto b2 = CompiledModel::compile(*fb, CompileOptions{}), a2 = CompiledModel::compile(*fa, CompileOptions{});
  ASSERT_TRUE(a2 && b2);
  auto p = alternate(**a, **b, inputs, 3, 8, a2->get(), b2->get());
  ASSERT_TRUE(static_cast<bool>(p)) << p.error().message;
  ASSERT_EQ(p->rounds.size(), 8u);
  int first[2][2] = {{0, 0}, {0, 0}};  // [pair][a first]
  for (size_t i = 0; i < p->rounds.size(); ++i) {
    const Alternated::Round &r = p->rounds[i];
    EXPECT_EQ(r.pair, static_cast<int>(i % 2)) << i;
    ++first[r.pair][r.a_first];
    EXPECT_GT(r.a_ms, 0.0);
    EXPECT_GT(r.b_ms, 0.0);
    EXPECT_EQ(r.a_group_ms.size(), (*a)->groups().size()) << i;  // a2's groups are a's
    EXPECT_EQ(r.b_group_ms.size(), (*b)->groups().size()) << i;
  }
  for (int pair : {0, 1})
    for (int a_first : {0, 1}) EXPECT_EQ(first[pair][a_first], 2) << pair << " " << a_first;
}

// Issue 11's anchors at a tile: MobileNetV2's depthwise convs each followed by a 1x1 conv on pixel
// lanes, and its 1x1 expansions each followed by a stride-1 depthwise conv of 14x14 or more, are
// measured as one kernel (the chain and expand tile sketches, their output checked against the
// reference executor in the measuring child); the other chains are not, and say why. The tiles
// are NCHW's: the model in NCHW throughout (nchwc-layout blocks its convs from 28x28 down).
TEST(PartitionSearch, ADepthwiseConvAndTheOneByOneAfterItAreMeasuredAsOneTiledKernel) {
  auto g = import_onnx_file(std::string(AUTOTUNE_MODELS_DIR) + "/mobilenet_v2.onnx");
  ASSERT_TRUE(static_cast<bool>(g));
  auto f = lower_to_stage(*g, Stage::kFused, testing::nchw_throughout());
  ASSERT_TRUE(static_cast<bool>(f));
  PartitionSearchOptions o;
  o.measure.min_time_s = 0.005;
  o.rounds = 1;
  o.model_rounds = 0;  // no check in the model: the moves taken are those measured faster alone
  o.measure.producers = false;  // each kernel timed alone (the CLI's --alone)
  auto rep = search_partition(*f, o);
  ASSERT_TRUE(static_cast<bool>(rep)) << rep.error().message;
  EXPECT_FALSE(rep->checked);
  for (const MoveReport &m : rep->moves) EXPECT_EQ(m.producers_apart + m.producers_merged, 0) << m.move;
  for (const MoveReport &m : rep->moves) EXPECT_EQ(m.chosen, m.measured && m.ratio < 1 - o.min_gain && m.why_not.empty()) << m.move;
  int tiled = 0, expansions = 0;
  for (const MoveReport &m : rep->moves) {
    if (m.kind != "chain") continue;
    bool legal = false;
    for (const PartitionMove &mv : partition_moves(*f))
      if (mv.producer == m.producer) legal = mv.why_not.empty();
    if (!legal) continue;
    auto merged = apply_move(*f, m.producer);
    ASSERT_TRUE(static_cast<bool>(merged)) << m.move;
    const Graph *body = nullptr;
    for (const Node &n : merged->nodes)
      if (is_chain(*n.body)) body = n.body.get();
    ASSERT_NE(body, nullptr) << m.move;
    KernelSchedule d = default_schedule(*body, host_target());
    if (d.steps.empty()) {
      EXPECT_FALSE(m.measured) << m.move;
      EXPECT_EQ(m.why_not.rfind("not measured: no chain tile fits it", 0), 0u) << m.move << ": " << m.why_not;
      continue;
    }
    ++tiled;
    EXPECT_TRUE(m.measured) << m.move << ": " << m.why_not;
    EXPECT_GT(m.merged_s, 0.0) << m.move;
    EXPECT_EQ(m.ops.rfind("nn.conv2d+clip -> nn.conv2d", 0), 0u) << m.move << ": " << m.ops;  // a conv with its relu6, then the other
    auto k = lower_group(*body, "chain", d);
    ASSERT_TRUE(static_cast<bool>(k)) << m.move;
    EXPECT_EQ(k->stages.size(), 1u) << m.move;  // one parallel loop over blocks: the first conv's result never leaves it
    std::string ir = k->to_string();
    EXPECT_NE(ir.find("allocate s0_result_at_yo["), std::string::npos) << m.move;
    // The expand tile: blocks of 8 channels, every row, the padded copy of the box beside it.
    expansions += ir.find("allocate s1_padded_at_yo[") != std::string::npos;
  }
  EXPECT_GE(tiled - expansions, 4);
  EXPECT_GE(expansions, 4);
}

// The model decides between moves that exclude each other: on MobileNetV2 as it fuses by default,
// its last expansion (a 1x1 conv joining the depthwise conv after it) makes the projection's move
// (that depthwise conv joining the 1x1 conv after it) illegal, a chain never being extended. The
// one whose groups gain more in the model is taken, the other left out with its reason; a move
// slower there is left out whatever it gained alone. Legality is the real one (apply_partition of
// the fused graph).
TEST(PartitionSearch, TheMoveThatGainsMoreInTheModelIsTakenWhereTwoExcludeEachOther) {
  auto g = import_onnx_file(std::string(AUTOTUNE_MODELS_DIR) + "/mobilenet_v2.onnx");
  ASSERT_TRUE(static_cast<bool>(g));
  auto f = lower_to_stage(*g, Stage::kFused, PassContext{});
  ASSERT_TRUE(static_cast<bool>(f));
  // Two chain moves, the first's consumer the second's producer (the last such pair).
  int expansion = -1, projection = -1;
  for (const PartitionMove &a : partition_moves(*f))
    for (const PartitionMove &b : partition_moves(*f))
      if (a.kind == PartitionMove::kChain && b.kind == PartitionMove::kChain && a.why_not.empty() && b.why_not.empty() && a.consumers == std::vector<int>{b.producer})
        expansion = a.producer, projection = b.producer;
  ASSERT_GE(expansion, 0);
  auto legal = [&](const std::vector<int> &with) -> Status {
    AT_ASSIGN(moved, apply_partition(*f, partition_json(with)));
    (void)moved;
    return Status::ok();
  };
  ASSERT_FALSE(static_cast<bool>(legal({expansion, projection})));
  // Each move's groups' time apart in the model and the median of the timings' ratios merged / apart.
  auto judged = [&](double expansion_apart, double expansion_ratio, double projection_apart, double projection_ratio) {
    std::vector<MoveReport> moves(2);
    moves[0].producer = expansion, moves[1].producer = projection;
    moves[0].model_apart_ms = expansion_apart, moves[0].model_ratio = expansion_ratio;
    moves[0].model_merged_ms = expansion_apart * expansion_ratio;
    moves[1].model_apart_ms = projection_apart, moves[1].model_ratio = projection_ratio;
    moves[1].model_merged_ms = projection_apart * projection_ratio;
    return moves;
  };
  // The expansion gains 0.030 ms (0.8 of 0.150), the projection 0.0139 (0.9 of 0.139): the expansion,
  // though the projection's groups are the faster ones.
  std::vector<MoveReport> moves = judged(0.150, 0.8, 0.139, 0.9);
  EXPECT_EQ(take_by_model_gain({projection, expansion}, moves, legal), std::vector<int>{expansion});
  EXPECT_TRUE(moves[0].chosen);
  EXPECT_FALSE(moves[1].chosen);
  EXPECT_EQ(moves[1].why_not.rfind("left out: a move that gains more in the model joins its groups", 0), 0u) << moves[1].why_not;
  // The other way round: the projection.
  moves = judged(0.150, 0.95, 0.139, 0.85);
  EXPECT_EQ(take_by_model_gain({expansion, projection}, moves, legal), std::vector<int>{projection});
  EXPECT_TRUE(moves[1].chosen);
  EXPECT_FALSE(moves[0].chosen);
  // Slower in the model: left out, so the projection is legal again.
  moves = judged(0.100, 1.1, 0.139, 0.99);
  EXPECT_EQ(take_by_model_gain({expansion, projection}, moves, legal), std::vector<int>{projection});
  EXPECT_EQ(moves[0].why_not, "left out: not faster in the model (0.1100 ms merged against 0.1000 ms apart, median ratio 1.100)");
  // Neither faster: neither.
  moves = judged(0.100, 1.1, 0.139, 1.0);
  EXPECT_TRUE(take_by_model_gain({expansion, projection}, moves, legal).empty());
  EXPECT_FALSE(moves[0].chosen || moves[1].chosen);
}

TEST(PartitionSearch, AFileThatIsNotADatabaseFailsBeforeAnythingIsMeasured) {
  std::string path = (fs::temp_directory_path() / ("autotune_partition_notes_" + std::to_string(::getpid()) + ".txt")).string();
  { std::FILE *fp = std::fopen(path.c_str(), "w"); std::fputs("my notes\n", fp); std::fclose(fp); }
  auto g = import_onnx_file(std::string(AUTOTUNE_MODELS_DIR) + "/efficientnet_b0.onnx");
  ASSERT_TRUE(static_cast<bool>(g));
  auto f = lower_to_stage(*g, Stage::kFused, PassContext{});
  ASSERT_TRUE(static_cast<bool>(f));
  PartitionSearchOptions o;
  o.db_path = path;
  int lines = 0;
  o.progress = [&](const std::string &) { ++lines; };
  auto rep = search_partition(*f, o);
  ASSERT_FALSE(static_cast<bool>(rep));
  EXPECT_NE(rep.error().message.find("not a tuning database"), std::string::npos) << rep.error().message;
  EXPECT_EQ(lines, 0);
  fs::remove(path);
}

}  // namespace
}  // namespace autotune
