// Schedules as data: JSON round trip, validation with reasons, and a space whose samples and
// mutations are all legal and all compute the right answer.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <set>

#include <nlohmann/json.hpp>

#include "codegen/Lower.h"
#include "codegen/Sketch.h"
#include "codegen/Steps.h"
#include "codegen/ThreadRows.h"
#include "codegen/Transform.h"
#include "ir/OnnxImport.h"
#include "ir/Parser.h"
#include "ir/Partition.h"
#include "ir/Pass.h"
#include "ir/Reference.h"
#include "runtime/Runtime.h"
#include "runtime/BoundKernel.h"
#include "search/ScheduleSpace.h"
#include "search/Task.h"
#include "tests/codegen/RandomSteps.h"

namespace autotune {
namespace {

Graph fused_model(const std::string &name) {
  auto g = import_onnx_file(std::string(AUTOTUNE_MODELS_DIR) + "/" + name + ".onnx");
  EXPECT_TRUE(static_cast<bool>(g));
  auto f = lower_to_stage(*g, Stage::kFused, PassContext{});
  EXPECT_TRUE(static_cast<bool>(f));
  return f.take();
}

TEST(Schedule, JsonRoundTrips) {
  KernelSchedule s;
  s.oc_block = 24, s.px_block = 4, s.parallel = KernelSchedule::Parallel::kOcPx, s.unroll_kx = true, s.pad_at_root = false;
  std::string j = schedule_to_json(s);
  EXPECT_EQ(j, R"({"ic_block":0,"oc_block":24,"pad_at_root":false,"parallel":"oc_px","px_block":4,"unroll_kx":true,"vector_width":8,"version":1})");
  auto back = schedule_from_json(j);
  ASSERT_TRUE(static_cast<bool>(back)) << back.error().message;
  EXPECT_TRUE(*back == s);
  s.pixel_vectors = true;  // written only when set, so older schedules keep their JSON
  back = schedule_from_json(schedule_to_json(s));
  ASSERT_TRUE(static_cast<bool>(back)) << back.error().message;
  EXPECT_TRUE(back->pixel_vectors && *back == s);
}

// Schedules are written as text directly (ir/JsonText.h), not through nlohmann's tree, and a
// schedule's text is its identity in every database: it must be exactly what nlohmann's dump()
// writes for the same value, for every kind of point the spaces make.
TEST(Schedule, JsonTextIsWhatNlohmannWrites) {
  Rng rng(11);
  int checked = 0, with_steps = 0;
  for (const char *model : {"resnet18", "mobilenet_v2", "efficientnet_b0", "transformer", "shape_ops"}) {
    for (const Task &t : extract_tasks(fused_model(model))) {
      ScheduleSpace sp = ScheduleSpace::of(t.body);
      KernelSchedule m = default_schedule(t.body);
      for (int i = 0; i < 6; ++i) {
        for (const KernelSchedule &s : {sp.sample(rng), m = sp.mutate(m, rng)}) {
          std::string text = schedule_to_json(s);
          auto parsed = nlohmann::json::parse(text, nullptr, false);
          ASSERT_FALSE(parsed.is_discarded()) << text;
          ASSERT_EQ(parsed.dump(), text) << t.ops;
          auto back = schedule_from_json(text);
          ASSERT_TRUE(back && *back == s) << text;
          ++checked, with_steps += !s.steps.empty();
        }
      }
    }
  }
  EXPECT_GT(with_steps, 100);
  EXPECT_GT(checked, with_steps);
  // Chains (segments) and names that need escaping, against nlohmann's own text of the same value.
  KernelSchedule a, b;
  b.winograd = 2, b.pixel_epilogue = true;
  Step odd;
  odd.op = "reorder", odd.stage = "st\"age\\\n\t\x01\x1f", odd.names = {"a", "b\b\f\r", "\x7f\xc3\xa9"};
  b.steps = {odd};
  KernelSchedule chain;
  chain.segments = {a, b};
  nlohmann::json step{{"op", odd.op}, {"stage", odd.stage}, {"order", odd.names}};
  nlohmann::json bj = nlohmann::json::parse(schedule_to_json(KernelSchedule{}));
  bj["winograd"] = 2, bj["pixel_epilogue"] = true;
  bj["steps"] = nlohmann::json{{"version", 1}, {"steps", nlohmann::json::array({step})}};
  nlohmann::json expected{{"version", 1}, {"segments", {nlohmann::json::parse(schedule_to_json(a)), bj}}};
  EXPECT_EQ(schedule_to_json(chain), expected.dump());
  auto back = schedule_from_json(schedule_to_json(chain));
  ASSERT_TRUE(static_cast<bool>(back)) << back.error().message;
  EXPECT_TRUE(*back == chain);
}

TEST(Schedule, BadJsonSaysWhatIsWrong) {
  EXPECT_EQ(schedule_from_json("[1]").error().message, "schedule is not a JSON object");
  EXPECT_EQ(schedule_from_json(R"({"version": 2})").error().message, "schedule version 2 is not supported (this autotune reads version 1)");
  EXPECT_EQ(schedule_from_json(R"({"version": 1, "tile": 4})").error().message, "schedule has unknown field 'tile'");
  EXPECT_EQ(schedule_from_json(R"({"version": 1, "parallel": "both"})").error().message, "schedule field 'parallel' has a bad value \"both\"");
}

TEST(Schedule, ValidationGivesTheReason) {
  auto g = parse_text(R"(def @main(%x: Tensor[(1, 16, 4, 4), float32], %w: Tensor[(48, 16, 3, 3), float32]) -> Tensor[(1, 48, 4, 4), float32] {
    %0 = fn (%p0: Tensor[(1, 16, 4, 4), float32], %p1: Tensor[(48, 16, 3, 3), float32]) -> Tensor[(1, 48, 4, 4), float32] {
      %0 = nn.conv2d(%p0, %p1, padding=[1, 1, 1, 1]);
      return %0;
    }(%x, %w);
    return %0;
  })");
  ASSERT_TRUE(static_cast<bool>(g)) << g.error().message;
  const Graph &body = *g->nodes[0].body;
  Target avx2 = *resolve_target("avx2");  // 8-lane vectors: the messages below name them
  // The default's knobs without its steps (which they stand for): the knobs are what is validated.
  auto knobs = [&](const Target &t) {
    KernelSchedule k = default_schedule(body, t);
    k.steps.clear();
    return k;
  };
  KernelSchedule s = knobs(avx2);
  EXPECT_TRUE(static_cast<bool>(validate_schedule(body, s)));
  s.oc_block = 32;
  EXPECT_EQ(validate_schedule(body, s).error().message, "illegal schedule: oc_block 32 does not divide 48 output channels per group");
  s.oc_block = 12;
  EXPECT_EQ(validate_schedule(body, s).error().message, "illegal schedule: oc_block 12 is not a multiple of vector_width 8");
  s = knobs(avx2);
  s.px_block = 0;
  EXPECT_EQ(validate_schedule(body, s).error().message, "illegal schedule: px_block 0 is not in [1, 32]");
  s = knobs(avx2);
  s.winograd = 0;  // a direct conv (AVX2's default for it is Winograd, which has no reduction tiles)
  s.ic_block = 12;
  EXPECT_EQ(validate_schedule(body, s).error().message, "illegal schedule: ic_block 12 does not divide 16 input channels per group");
  EXPECT_FALSE(static_cast<bool>(lower_group(body, "k", s)));  // lowering refuses it too, with the same reason
  s = knobs(avx2);
  s.winograd = 0;
  s.pixel_vectors = true;
  EXPECT_EQ(validate_schedule(body, s).error().message,
            "illegal schedule: pixel_vectors needs a 1x1 conv without padding or a stem (fewer than 8 input channels), one group, "
            "and an argument input and weight");
}

TEST(ScheduleSpace, SamplesMutationsAndCrossoversAreAlwaysLegal) {
  Rng rng(3);
  for (const char *model : {"tiny_cnn", "resnet18", "mobilenet_v2", "mlp", "shape_ops", "transformer", "vit_tiny", "modern_cnn"}) {
    for (const Task &t : extract_tasks(fused_model(model))) {
      ScheduleSpace sp = ScheduleSpace::of(t.body);
      EXPECT_GE(sp.size(), 1);
      KernelSchedule s = default_schedule(t.body);
      for (int i = 0; i < 40; ++i) {
        KernelSchedule a = sp.sample(rng);
        ASSERT_TRUE(static_cast<bool>(validate_schedule(t.body, a))) << t.ops << " " << schedule_to_json(a);
        s = sp.mutate(s, rng);
        ASSERT_TRUE(static_cast<bool>(validate_schedule(t.body, s))) << t.ops << " " << schedule_to_json(s);
        KernelSchedule c = sp.crossover(a, s, rng);
        ASSERT_TRUE(static_cast<bool>(validate_schedule(t.body, c))) << t.ops << " " << schedule_to_json(c);
      }
    }
  }
}

TEST(ScheduleSpace, LoweringThroughAReplayCacheMakesTheSameKernels) {
  // The search lowers a task's points through one ReplayCache (kept naive nests, kept step
  // prefixes), on two threads at once in ModelSearch; each kernel must be the one lowering
  // without it makes: knob points and step lists, Winograd and pixel-vector points (naive nests
  // of their own), every task of two models, the same cache throughout.
  Rng rng(11);
  ReplayCache cache(64);  // small: it fills and is dropped during the test
  int compared = 0;
  std::set<int> algorithms;
  for (const char *model : {"resnet18", "mobilenet_v2"}) {
    for (const Task &t : extract_tasks(fused_model(model))) {
      ScheduleSpace sp = ScheduleSpace::of(t.body);
      for (int i = 0; i < 12; ++i) {
        KernelSchedule s = i == 0 ? default_schedule(t.body) : sp.sample(rng);
        auto plain = lower_group(t.body, "k", s);
        auto cached = lower_group(t.body, "k", s, &cache);
        ASSERT_EQ(static_cast<bool>(plain), static_cast<bool>(cached)) << t.ops << " " << schedule_to_json(s);
        if (!plain) {
          EXPECT_EQ(plain.error().message, cached.error().message);
          continue;
        }
        EXPECT_EQ(plain->identity(), cached->identity()) << t.ops << " " << schedule_to_json(s);
        EXPECT_EQ(plain->to_string(), cached->to_string()) << t.ops << " " << schedule_to_json(s);
        EXPECT_EQ(plain->schedule, cached->schedule);
        algorithms.insert(s.winograd * 2 + s.pixel_vectors);
        ++compared;
      }
    }
  }
  EXPECT_GE(compared, 200);
  EXPECT_GT(cache.hits(), 0u);
  EXPECT_TRUE(algorithms.count(0) && algorithms.count(1)) << "direct and pixel-vector points";
  EXPECT_TRUE(algorithms.count(4) || algorithms.count(8)) << "Winograd points";
}

TEST(ScheduleSpace, DefaultScheduleIsAPointOfTheSpace) {
  for (const char *model : {"resnet18", "resnet50"})
  for (const Task &t : extract_tasks(fused_model(model))) {
    ScheduleSpace sp = ScheduleSpace::of(t.body);
    KernelSchedule d = default_schedule(t.body);
    auto in = [](const auto &v, auto x) { return std::find(v.begin(), v.end(), x) != v.end(); };
    const auto &obs = d.pixel_vectors ? sp.pv_oc_block : sp.oc_block, &pxs = d.pixel_vectors ? sp.pv_px_block : sp.px_block;
    EXPECT_TRUE(in(sp.vector_width, d.vector_width) && in(obs, d.oc_block) && in(pxs, d.px_block) &&
                in(sp.parallel, d.parallel) && in(sp.unroll_kx, d.unroll_kx) && in(sp.pad_at_root, d.pad_at_root) &&
                in(sp.ic_block, d.ic_block) && in(sp.pixel_vectors, d.pixel_vectors))
        << t.ops << " " << d.to_string();
    if (!d.steps.empty()) {
      // A sketch point, or the step list its knobs (a point of the knob space, above) stand for.
      KernelSchedule plain = d;
      plain.steps.clear();
      auto of_knobs = steps_of_knobs(t.body, plain);
      EXPECT_TRUE(std::any_of(sp.sketches.begin(), sp.sketches.end(), [&](const SketchPoint &p) { return p.steps == d.steps; }) ||
                  (of_knobs && *of_knobs == d.steps))
          << t.ops << ": the default's step list is neither a sketch point nor its knobs' list";
    }
  }
}

/** Lowers `body` with `s`, runs it on seeded inputs and compares with the reference executor. */
void expect_schedule_matches(const Graph &body, const KernelSchedule &s, const std::string &what, double tolerance = 1e-5,
                             const Target &target = host_target(), int threads = 1) {
  std::vector<Tensor> args = random_inputs(body, 4);
  auto expected = run_reference(body, args);
  ASSERT_TRUE(static_cast<bool>(expected));
  auto k = lower_group(body, "sched", s);
  ASSERT_TRUE(static_cast<bool>(k)) << k.error().message;
  auto jit = Jit::create({"", target});
  ASSERT_TRUE(static_cast<bool>(jit));
  auto ck = (*jit)->compile(*k);
  ASSERT_TRUE(static_cast<bool>(ck)) << ck.error().message;
  BoundKernel bound(*k, *ck, args, Tensor(expected->at(0).type()));
  ThreadPool pool(threads);
  bound.run(pool);
  const Tensor &out = bound.output();
  auto d = compare(out, expected->at(0));
  ASSERT_TRUE(static_cast<bool>(d));
  EXPECT_LT(d->relative(), tolerance) << what << " " << schedule_to_json(s);
  if (s.winograd) std::printf("%s %s: relative error %.2g\n", what.c_str(), s.to_string().c_str(), d->relative());
}

TEST(ScheduleSpace, RandomSchedulesComputeTheRightAnswer) {
  // Every knob changes the generated code; every sampled point must still match the reference.
  Rng rng(11);
  int checked = 0;
  for (const char *model : {"tiny_cnn", "resnet18"}) {
    std::vector<Task> tasks = extract_tasks(fused_model(model));
    for (size_t ti = 0; ti < tasks.size() && ti < 10; ++ti) {
      ScheduleSpace sp = ScheduleSpace::of(tasks[ti].body);
      for (int i = 0; i < 3; ++i, ++checked) expect_schedule_matches(tasks[ti].body, sp.sample(rng), tasks[ti].ops + " " + tasks[ti].shape);
    }
  }
  EXPECT_GE(checked, 40);
}

TEST(ScheduleSpace, EverySketchPointOfEveryModelMatchesTheReference) {
  // The sketch rules' step lists on the groups' naive nests: every loop-sketch point (elementwise
  // groups, pools, global pools, means, matmul), every seventh of grouped convs' loop-sketch points
  // and of tile-sketch points (convs with one group, dense) of ten generated models round-trips
  // through the schedule's JSON and computes what the reference executor does.
  int tasks_with_sketches = 0, points = 0, tiles = 0, pixel_lanes = 0, pixel_tails = 0, grouped = 0, partitioned = 0, row_tiles = 0, rfactors = 0, blocked = 0;
  std::set<std::string> ops;
  for (const char *model : {"tiny_cnn", "resnet18", "mobilenet_v2", "efficientnet_b0", "mlp", "shape_ops", "legacy", "transformer", "vit_tiny", "modern_cnn"}) {
    for (const Task &t : extract_tasks(fused_model(model))) {
      ScheduleSpace sp = ScheduleSpace::of(t.body);
      if (sp.sketches.empty()) continue;
      ++tasks_with_sketches;
      ops.insert(t.ops);
      for (size_t i = 0; i < sp.sketches.size(); ++i) {
        const auto &steps = sp.sketches[i].steps;
        bool tile = std::any_of(steps.begin(), steps.end(), [](const Step &st) { return st.op == "pack"; });
        // Pixel lanes (1x1 convs: rows and columns fused, pixels as the vector), with or without a remainder tile.
        bool lanes = tile && steps[0].op == "fuse" && steps[0].loop == "i2";
        bool tail = std::any_of(steps.begin(), steps.end(), [](const Step &st) { return st.loop == "pi_tail"; });
        // Grouped and depthwise convs: the loop sketch with the padded input placed (root, inline, per plane or row).
        bool conv_loops = !tile && t.ops.rfind("nn.conv2d", 0) == 0;
        bool parts = std::any_of(steps.begin(), steps.end(), [](const Step &st) { return st.op == "partition"; });
        if ((tile || conv_loops) && i % 7 != 0) continue;
        bool rows = std::any_of(steps.begin(), steps.end(), [](const Step &st) { return st.op == "split" && !st.names.empty() && st.names[0] == "yo"; });
        pixel_lanes += lanes, pixel_tails += tail, grouped += conv_loops, partitioned += parts, row_tiles += rows;
        // Reductions factored into vector lanes (global pools, means, pools); conv2d_nchwc's register tiles.
        rfactors += std::any_of(steps.begin(), steps.end(), [](const Step &st) { return st.op == "rfactor"; });
        blocked += tile && t.ops.rfind("nn.conv2d_nchwc", 0) == 0;
        KernelSchedule s = sp.sketch(i);
        auto back = schedule_from_json(schedule_to_json(s));
        ASSERT_TRUE(static_cast<bool>(back)) << back.error().message;
        EXPECT_TRUE(*back == s);
        // F(4x4)'s rounding grows with the channels summed (1.1e-5 at 512): the measurer accepts 1e-4.
        expect_schedule_matches(t.body, s, std::string(model) + " " + t.ops + " " + t.shape, s.winograd == 4 ? 1e-4 : 1e-5);
        ++points, tiles += tile;
      }
    }
  }
  std::string kinds;
  for (const std::string &o : ops) kinds += o + " ";
  std::printf("%d sketch points (%d register tiles, %d of them pixel lanes, %d with a remainder, %d of conv2d_nchwc; %d of grouped convs; %d with a partitioned padding; %d row tiles; %d factored reductions) of %d tasks checked: %s\n",
              points, tiles, pixel_lanes, pixel_tails, blocked, grouped, partitioned, row_tiles, rfactors, tasks_with_sketches, kinds.c_str());
  EXPECT_GE(tasks_with_sketches, 20);
  EXPECT_GE(tiles, 30);
  EXPECT_GE(pixel_lanes, 10);
  EXPECT_GE(pixel_tails, 3);
  EXPECT_GE(grouped, 50);
  EXPECT_GE(partitioned, 50);
  EXPECT_GE(row_tiles, 50);
  EXPECT_GE(rfactors, 30);
  EXPECT_GE(blocked, 10);
  EXPECT_TRUE(ops.count("nn.max_pool2d") && ops.count("nn.global_avg_pool2d") && ops.count("mean") && ops.count("nn.conv2d+nn.relu") && ops.count("nn.softmax")) << kinds;
}

TEST(ScheduleSpace, SoftmaxStepListsMatchTheReference) {
  // Softmax's naive nest (three passes over the axis inside a loop per other dimension) under
  // every loop-sketch point: over channels, whose pixels become the vector lanes (19 columns: one
  // vector and a remainder), each lane with its own maximum and sum; and over the last axis.
  struct Case {
    std::string shape;
    int axis;
  };
  int vectorized = 0, points = 0;
  for (const Case &c : std::vector<Case>{{"(2, 5, 3, 19)", 1}, {"(6, 40)", -1}}) {
    std::string t = "Tensor[" + c.shape + ", float32]";
    auto g = parse_text("def @main(%x: " + t + ") -> " + t + " {\n  %0 = fn (%p0: " + t + ") -> " + t + " {\n    %0 = nn.softmax(%p0, axis=" +
                        std::to_string(c.axis) + ");\n    %1 = nn.relu(%0);\n    return %1;\n  }(%x);\n  return %0;\n}");
    ASSERT_TRUE(static_cast<bool>(g)) << g.error().message;
    const Graph &body = *g->nodes[0].body;
    ScheduleSpace sp = ScheduleSpace::of(body);
    ASSERT_GE(sp.sketches.size(), 2u) << c.shape;
    for (size_t i = 0; i < sp.sketches.size(); ++i) {
      const auto &steps = sp.sketches[i].steps;
      KernelSchedule s = sp.sketch(i);
      expect_schedule_matches(body, s, "softmax " + c.shape);
      ++points;
      vectorized += std::any_of(steps.begin(), steps.end(), [](const Step &st) { return st.op == "vectorize"; });
    }
  }
  EXPECT_GE(points, 6);
  EXPECT_GE(vectorized, 4);
}

TEST(ScheduleSpace, LayerNormStepListsMatchTheReference) {
  // A layer norm's naive nest (three passes over the row inside a loop per row) under every
  // point of its space: the row sketch (the passes as vectors, 40 = two vectors and a remainder
  // on AVX-512) and the loop sketch's points (the rows as lanes), each with a residual add fused.
  std::string t = "Tensor[(6, 40), float32]", v = "Tensor[(40), float32]";
  auto g = parse_text("def @main(%x: " + t + ", %g: " + v + ", %b: " + v + ", %r: " + t + ") -> " + t + " {\n  %0 = fn (%p0: " + t + ", %p1: " + v +
                      ", %p2: " + v + ", %p3: " + t + ") -> " + t +
                      " {\n    %0 = nn.layer_norm(%p0, %p1, %p2, axis=-1, epsilon=1e-05f);\n    %1 = add(%0, %p3);\n    return %1;\n  }(%x, %g, %b, %r);\n  return %0;\n}");
  ASSERT_TRUE(static_cast<bool>(g)) << g.error().message;
  const Graph &body = *g->nodes[0].body;
  ScheduleSpace sp = ScheduleSpace::of(body);
  int rows = 0;
  for (size_t i = 0; i < sp.sketches.size(); ++i) {
    const auto &steps = sp.sketches[i].steps;
    expect_schedule_matches(body, sp.sketch(i), "layer norm, point " + std::to_string(i));
    rows += std::any_of(steps.begin(), steps.end(), [](const Step &st) { return st.op == "rfactor" && st.loop == "j1o"; });
  }
  EXPECT_GE(sp.sketches.size(), 4u);
  EXPECT_EQ(rows, host_target().lanes >= 2 && 40 >= 2 * host_target().lanes ? 1 : 0);
}

TEST(ScheduleSpace, RandomStepListsOnEveryGroupsNaiveNestMatchTheReference) {
  // The fuzz of issue 10 on real groups: random step sequences on the naive nests of every task
  // of two generated models (convs with their pad producer, pools, dense, elementwise); each
  // step is applied or refused with a reason, and every sequence is lowered through the
  // schedule (lower_group: naive nests, then replay) and checked against the reference executor.
  // FUZZ_SEED=N runs other sequences; FUZZ_SHOW=1 prints each list and kernel before it runs (for a crash).
  std::mt19937 rng(getenv("FUZZ_SEED") ? static_cast<unsigned>(atoi(getenv("FUZZ_SEED"))) : 7u);
  int sequences = 0, applied = 0;
  auto fuzz = [&](const Graph &body, const std::string &name, int lists) {
    auto naive = lower_naive(body, "fuzz", default_schedule(body));
    if (!naive) return;
    for (int seqno = 0; seqno < lists; ++seqno) {
      LoweredKernel k = *naive;
      KernelSchedule s = default_schedule(body);
      s.steps.clear();  // the list starts from the naive nest, not from a default's own steps
      s.segments.clear();
      for (int step = 0; step < 6; ++step) {
        Step st = testing::random_step(k, rng, step);
        auto next = apply_step(k, st);
        if (!next) {
          EXPECT_FALSE(next.error().message.empty());
          continue;
        }
        k = next.take();
        s.steps.push_back(st);
        ++applied;
      }
      if (s.steps.empty()) continue;
      if (getenv("FUZZ_SHOW")) std::fprintf(stderr, "%s\n%s\n", steps_to_json(s.steps).c_str(), k.to_string().c_str());
      expect_schedule_matches(body, s, name);
      ++sequences;
    }
  };
  for (const char *model : {"tiny_cnn", "mlp"})
    for (const Task &t : extract_tasks(fused_model(model))) fuzz(t.body, std::string(model) + " " + t.ops + " " + t.shape, 4);
  // A chain (a depthwise conv and the 1x1 conv after it, one group): its joined naive nests, whose
  // depthwise conv becomes a producer of statements that compute_at places once its padded input is placed.
  auto chain = parse_text(R"(def @main(%x: Tensor[(1, 6, 7, 9), float32], %w: Tensor[(6, 1, 3, 3), float32], %v: Tensor[(8, 6, 1, 1), float32]) -> Tensor[(1, 8, 7, 9), float32] {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], groups=6);
  %1 = nn.relu(%0);
  %2 = nn.conv2d(%1, %v);
  return %2;
})");
  ASSERT_TRUE(static_cast<bool>(chain)) << chain.error().message;
  fuzz(*chain, "depthwise and 1x1 chain", 16);
  // The other way round (an expansion): the padded copy between reads the 1x1 conv's result
  // clamped into the image, which compute_at maps once the copy is placed at the same loop.
  auto expansion = parse_text(R"(def @main(%x: Tensor[(1, 4, 7, 9), float32], %v: Tensor[(6, 4, 1, 1), float32], %w: Tensor[(6, 1, 3, 3), float32]) -> Tensor[(1, 6, 7, 9), float32] {
  %0 = nn.conv2d(%x, %v);
  %1 = nn.relu(%0);
  %2 = nn.conv2d(%1, %w, padding=[1, 1, 1, 1], groups=6);
  return %2;
})");
  ASSERT_TRUE(static_cast<bool>(expansion)) << expansion.error().message;
  fuzz(*expansion, "1x1 and depthwise chain", 16);
  std::printf("%d random step lists (%d steps applied) checked\n", sequences, applied);
  EXPECT_GE(sequences, 50);
}

TEST(ScheduleSpace, WinogradMatchesTheReference) {
  // F(2x2, 3x3) and F(4x4, 3x3) on outputs that are and are not multiples of the tile (a last tile row and column half outside), with and
  // without padding, two images, a bias and a residual epilogue, register blocks with a tail of
  // tiles, at every vector width the templates take.
  struct Case {
    int64_t n, c, o, h, w, pad;
  };
  int checked = 0;
  for (Case k : {Case{1, 16, 32, 8, 8, 1}, Case{2, 8, 16, 7, 9, 1}, Case{1, 24, 16, 6, 5, 0}, Case{1, 3, 32, 13, 11, 1}}) {
    int64_t oh = k.h + 2 * k.pad - 2, ow = k.w + 2 * k.pad - 2;
    auto sh = [](std::vector<int64_t> v) { return shape_str(v); };
    std::string x = "Tensor[" + sh({k.n, k.c, k.h, k.w}) + ", float32]", w = "Tensor[" + sh({k.o, k.c, 3, 3}) + ", float32]",
                b = "Tensor[" + sh({k.o}) + ", float32]", y = "Tensor[" + sh({k.n, k.o, oh, ow}) + ", float32]";
    std::string pad = std::to_string(k.pad);
    auto g = parse_text("def @main(%x: " + x + ", %w: " + w + ", %b: " + b + ", %r: " + y + ") -> " + y + " {\n  %0 = fn (%p0: " + x +
                        ", %p1: " + w + ", %p2: " + b + ", %p3: " + y + ") -> " + y + " {\n    %0 = nn.conv2d(%p0, %p1, %p2, padding=[" + pad +
                        ", " + pad + ", " + pad + ", " + pad + "]);\n    %1 = add(%0, %p3);\n    %2 = nn.relu(%1);\n    return %2;\n  }(%x, %w, %b, %r);\n  return %0;\n}");
    ASSERT_TRUE(static_cast<bool>(g)) << g.error().message;
    const Graph &body = *g->nodes[0].body;
    for (int m : {2, 4})
      for (int v : {8, 16})
        for (int px : {1, 3, 6}) {
          KernelSchedule s = default_schedule(body);
          s.steps.clear();  // the knobs, not the steps the default's stand for
          s.winograd = m, s.vector_width = v, s.oc_block = 16, s.px_block = px, s.ic_block = 0;
          s.pixel_vectors = false;  // a host's default may take pixel vectors (AVX2's for the 7x7 ones)
          ASSERT_TRUE(static_cast<bool>(validate_schedule(body, s))) << validate_schedule(body, s).error().message;
          expect_schedule_matches(body, s, "winograd " + y);  // measured: F(2x2) 1.8e-7, F(4x4) 2.6e-6 at most
          ++checked;
        }
  }
  EXPECT_EQ(checked, 48);
}

Expected<Graph> one_group(const std::vector<std::string> &params, const std::string &out, const std::string &ops);

TEST(Schedule, DefaultWinogradTileFollowsTheOutputSize) {
  // In NCHW, F(4x4) where the output has 28x28 pixels or more (its transformed activations are
  // smaller and its larger transformed weights serve 49 tiles or more), F(2x2) below, direct where
  // F(2x2) does not beat the direct kernel (NCHW under 128 input channels on AVX-512).
  auto conv = [](int64_t c, int64_t hw) {
    std::string x = "Tensor[(1, " + std::to_string(c) + ", " + std::to_string(hw) + ", " + std::to_string(hw) + "), float32]";
    std::string w = "Tensor[(" + std::to_string(c) + ", " + std::to_string(c) + ", 3, 3), float32]";
    auto g = parse_text("def @main(%x: " + x + ", %w: " + w + ") -> " + x + " {\n  %0 = fn (%p0: " + x + ", %p1: " + w + ") -> " + x +
                        " {\n    %0 = nn.conv2d(%p0, %p1, padding=[1, 1, 1, 1]);\n    return %0;\n  }(%x, %w);\n  return %0;\n}");
    EXPECT_TRUE(static_cast<bool>(g)) << g.error().message;
    return g.take();
  };
  Target avx2 = *resolve_target("avx2"), avx512 = *resolve_target("avx512");
  struct Case {
    int64_t c, hw;
    int avx2, avx512;
  };
  for (Case k : {Case{64, 56, 4, 0}, Case{128, 28, 4, 4}, Case{256, 14, 2, 2}, Case{512, 7, 2, 2}, Case{128, 27, 2, 2}}) {
    Graph g = conv(k.c, k.hw);
    const Graph &body = *g.nodes[0].body;
    std::string what = std::to_string(k.c) + " channels at " + std::to_string(k.hw) + "x" + std::to_string(k.hw);
    EXPECT_EQ(default_schedule(body, avx2).winograd, k.avx2) << what << ", avx2";
    EXPECT_EQ(default_schedule(body, avx512).winograd, k.avx512) << what << ", avx512";
  }
  // In NCHW16c, where Winograd is a step list, F(4x4) from 14x14 up (ResNet-50's 14x14 3x3 convs
  // 0.86-0.91 of their F(2x2) time in the model): 14x14 and 28x28 take F(4x4), 13x13 and 7x7 F(2x2).
  for (auto [hw, m] : std::vector<std::pair<int64_t, int>>{{28, 4}, {14, 4}, {13, 2}, {7, 2}}) {
    std::string x = "Tensor[(1, 16, " + std::to_string(hw) + ", " + std::to_string(hw) + ", 16), float32]";
    auto g = one_group({x, "Tensor[(256, 256, 3, 3), float32]"}, x, "    %0 = nn.conv2d_nchwc(%p0, %p1, padding=[1, 1, 1, 1]);\n    return %0;\n");
    ASSERT_TRUE(static_cast<bool>(g)) << g.error().message;
    const Graph &body = *g->nodes[0].body;
    for (const Target &t : {avx2, avx512}) EXPECT_EQ(default_schedule(body, t).winograd, m) << "NCHW16c at " << hw << "x" << hw << ", " << t.isa;
  }
}

/** A graph of one fused group with parameters of `params` types, returning `out`; `ops` is its body's lines. */
Expected<Graph> one_group(const std::vector<std::string> &params, const std::string &out, const std::string &ops) {
  std::string outer, inner, args;
  for (size_t i = 0; i < params.size(); ++i) {
    std::string n = std::to_string(i), sep = i ? ", " : "";
    outer += sep + "%a" + n + ": " + params[i], inner += sep + "%p" + n + ": " + params[i], args += sep + "%a" + n;
  }
  return parse_text("def @main(" + outer + ") -> " + out + " {\n  %0 = fn (" + inner + ") -> " + out + " {\n" + ops + "  }(" + args +
                    ");\n  return %0;\n}");
}

/** Calls check(label with the ISA, target, body, its default schedule) for the one group of `g` on AVX2 and AVX-512. */
void for_each_isa_default(const Expected<Graph> &g, const std::string &label,
                          const std::function<void(const std::string &, const Target &, const Graph &, const KernelSchedule &)> &check) {
  ASSERT_TRUE(static_cast<bool>(g)) << g.error().message;
  const Graph &body = *g->nodes[0].body;
  for (const char *isa : {"avx2", "avx512"}) {
    Target t = *resolve_target(isa);
    check(std::string(isa) + " " + label, t, body, default_schedule(body, t));
  }
}

TEST(Schedule, DefaultLayoutChangesTransposeTilesOfChannelsByColumns) {
  // A layout change to or from NCHW16c, alone or with elementwise ops around it (a
  // squeeze-excitation's multiply by a per-channel scale): tiles of 16 channels x the most
  // columns up to 16 that divide a row, each copied in (cache_read) and read across, with image,
  // channel block and row parallel. A row no tile of 5 to 16 columns divides (4) keeps the loop
  // sketch: image and channel or channel block parallel. Run against the reference on two images.
  struct Case {
    std::vector<std::string> params;
    std::string out, ops;
    int64_t parallel;
    bool tiles;
  };
  // Rows of 4 columns come 12 to a plane, so those outputs (4608 floats) are more than a tiny
  // one; a tiny output (4096 floats or fewer: a squeeze-excitation scale's) runs on the image loop
  // alone, one image a thread.
  auto plain = [](int64_t w) { return "Tensor[(2, 48, " + std::string(w == 4 ? "12" : "3") + ", " + std::to_string(w) + "), float32]"; };
  auto blocked = [](int64_t w) { return "Tensor[(2, 3, " + std::string(w == 4 ? "12" : "3") + ", " + std::to_string(w) + ", 16), float32]"; };
  std::string scale = "Tensor[(1, 48, 1, 1), float32]";
  std::vector<Case> cases;
  for (int64_t w : {7, 56, 16}) {
    cases.push_back({{plain(w)}, blocked(w), "    %0 = nn.to_nchwc(%p0, block=16);\n    return %0;\n", 2 * 3 * 3, true});
    cases.push_back({{blocked(w)}, plain(w), "    %0 = nn.from_nchwc(%p0);\n    return %0;\n", 2 * 3 * 3, true});
  }
  cases.push_back({{plain(4)}, blocked(4), "    %0 = nn.to_nchwc(%p0, block=16);\n    return %0;\n", 2 * 3, false});
  cases.push_back({{blocked(4)}, plain(4), "    %0 = nn.from_nchwc(%p0);\n    return %0;\n", 2 * 48, false});
  cases.push_back({{plain(14), scale}, blocked(14), "    %0 = multiply(%p0, %p1);\n    %1 = nn.to_nchwc(%0, block=16);\n    return %1;\n", 2 * 3 * 3, true});
  cases.push_back({{blocked(14), scale}, plain(14),
                   "    %0 = nn.to_nchwc(%p1, block=16);\n    %1 = multiply(%p0, %0);\n    %2 = nn.from_nchwc(%1);\n    return %2;\n", 2 * 3 * 3, true});
  cases.push_back({{scale, blocked(14)}, blocked(14), "    %0 = nn.to_nchwc(%p0, block=16);\n    %1 = multiply(%p1, %0);\n    return %1;\n", 0, false});
  cases.push_back({{"Tensor[(1, 72, 1, 1, 16), float32]"}, "Tensor[(1, 1152, 1, 1), float32]", "    %0 = nn.from_nchwc(%p0);\n    return %0;\n", 1, false});
  for (const Case &c : cases)
    for_each_isa_default(one_group(c.params, c.out, c.ops), c.out, [&](const std::string &what, const Target &t, const Graph &body, const KernelSchedule &d) {
      ASSERT_FALSE(d.steps.empty()) << what;
      bool tiles = std::any_of(d.steps.begin(), d.steps.end(), [](const Step &s) { return s.op == "cache_read"; });
      EXPECT_EQ(tiles, c.tiles) << what << " " << c.ops;
      auto k = lower_group(body, "k", d);
      ASSERT_TRUE(static_cast<bool>(k)) << k.error().message;
      ASSERT_EQ(k->stages.size(), 1u);
      if (c.parallel) {
        EXPECT_EQ(k->stages[0].parallel_extent, c.parallel) << what << " " << c.ops;
      }
      if (t.runnable_here()) expect_schedule_matches(body, d, what + " " + c.ops, c.ops.find("multiply") == std::string::npos ? 1e-12 : 1e-6, t);
    });
}

TEST(Schedule, DefaultReductionsBeforeTheVectorUnrollTheirShortLoops) {
  // A mean (max) over the plane of an NCHW16c tensor (a squeeze-excitation pool, the head's): each
  // pixel a vector of 16 channels, the plane's loops unrolled where they are short (7 x 7 = 49
  // together), the rows only where the two would be too many (14 x 14 = 196: the columns); a
  // plane of 112 columns is not unrolled. Run against the reference.
  for (auto [hw, unrolled] : std::vector<std::pair<int64_t, int>>{{7, 2}, {14, 1}, {112, 0}})
    for (const char *op : {"mean", "max"}) {
      std::string in = "Tensor[(1, 3, " + std::to_string(hw) + ", " + std::to_string(hw) + ", 16), float32]", out = "Tensor[(1, 3, 1, 1, 16), float32]";
      std::string ops = std::string("    %0 = ") + op + "(%p0, axis=[2, 3], keepdims=1);\n    return %0;\n";
      for_each_isa_default(one_group({in}, out, ops), std::string(op) + " " + in, [&](const std::string &what, const Target &t, const Graph &body, const KernelSchedule &d) {
        int unrolls = 0;
        for (const Step &st : d.steps) unrolls += st.op == "unroll" && st.loop.rfind("k", 0) == 0;
        EXPECT_EQ(unrolls, unrolled) << what << ": " << steps_to_json(d.steps);
        if (t.runnable_here()) expect_schedule_matches(body, d, what, 1e-5, t);
      });
    }
}

TEST(ScheduleSpace, AProjectionChainsSpaceIsItsBlockedTilesPointsWithTheDefaultAmongThem) {
  // A chain of a depthwise conv2d_nchwc and the 1x1 conv2d_nchwc after it (MobileNetV2's
  // projections as it fuses by default): its space is the blocked chain tile's points (no template
  // knobs), its default one of them; samples and mutations stay step lists that validate, and a
  // few of them, with the default's neighbours, run against the reference on two threads. Other
  // chains (an expansion) keep an empty space.
  Graph f = fused_model("mobilenet_v2");
  Rng rng(5);
  int spaces = 0, empty = 0;
  size_t widest = 0;
  std::set<std::string> shapes;
  for (const PartitionMove &mv : partition_moves(f)) {
    if (!mv.why_not.empty() || mv.kind != PartitionMove::kChain) continue;
    auto merged = apply_move(f, mv.producer);
    ASSERT_TRUE(static_cast<bool>(merged)) << mv.producer;
    const Graph &body = *merged->nodes[mv.consumers[0] - 1].body;
    ASSERT_TRUE(is_chain(body));
    ScheduleSpace sp = ScheduleSpace::of(body);
    bool depthwise_first = body.nodes[0].op == "nn.conv2d_nchwc" && body.nodes[0].attrs.i("groups") > 1;
    if (!depthwise_first) {  // an expansion (a 1x1 conv, then the depthwise one) or an NCHW chain
      empty += sp.size() == 0;
      EXPECT_EQ(sp.size(), 0) << group_ops(body);
      continue;
    }
    std::string what = group_ops(body) + " " + shape_str(body.type_of(body.outputs[0]).shape);
    ++spaces;
    // At 7x7 on AVX2 (16 registers) two tiles fit; wider stages and AVX-512 hold more.
    EXPECT_GE(sp.sketches.size(), 2u) << what;
    widest = std::max(widest, sp.sketches.size());
    EXPECT_EQ(sp.size(), static_cast<int64_t>(sp.sketches.size())) << what;
    KernelSchedule d = default_schedule(body);
    ASSERT_FALSE(d.steps.empty()) << what;
    EXPECT_TRUE(std::any_of(sp.sketches.begin(), sp.sketches.end(), [&](const SketchPoint &p) { return p.steps == d.steps; })) << what;
    KernelSchedule m = d;
    for (int i = 0; i < 6; ++i)
      for (const KernelSchedule &s : {sp.sample(rng), m = sp.mutate(m, rng)}) {
        ASSERT_FALSE(s.steps.empty()) << what;
        EXPECT_TRUE(static_cast<bool>(validate_schedule(body, s))) << what << ": " << steps_to_json(s.steps);
      }
    if (!shapes.insert(what).second || shapes.size() > 3) continue;  // three shapes run
    for (const KernelSchedule &s : {sp.mutate(d, rng), sp.sample(rng)}) expect_schedule_matches(body, s, what + " " + steps_to_json(s.steps), 1e-5, host_target(), 2);
  }
  EXPECT_GE(spaces, 10);
  EXPECT_GE(widest, 4u);
  EXPECT_GE(empty, 1);
}

TEST(Schedule, DefaultSplitsRowsOverTheThreadsWhenAsked) {
  // With row_parts (the runtime's choice for the model, codegen/ThreadRows) each thread takes a
  // run of output rows, every channel of them, where can_split_rows holds: a depthwise
  // conv2d_nchwc and a layout change by rows_across_threads (the parallel loop image x run x
  // channel block), a 1x1 conv2d_nchwc and an NCHW 1x1 conv on pixel lanes by their pixel blocks,
  // a Winograd conv2d_nchwc by runs of whole tile rows in each of its stages (8 rows: 4 rows of
  // F(2x2) tiles). A Winograd conv whose tile rows the threads do not divide (6 rows: 3) and rows
  // the threads do not divide keep the channel split. Each run against the reference on two threads.
  auto blocked = [](int64_t c, int64_t h) { return "Tensor[(1, " + std::to_string(c / 16) + ", " + std::to_string(h) + ", 8, 16), float32]"; };
  struct Case {
    std::vector<std::string> params;
    std::string out, ops;
    bool rows;
    int64_t parallel;  // the split kernel's parallel extent (0: not checked)
  };
  const std::string dw = "    %0 = nn.conv2d_nchwc(%p0, %p1, padding=[1, 1, 1, 1], groups=32);\n    %1 = clip(%0, a_min=0.0f, a_max=6.0f);\n    return %1;\n";
  const std::vector<Case> cases = {
      {{blocked(32, 8), "Tensor[(32, 1, 3, 3), float32]"}, blocked(32, 8), dw, true, 1 * 2 * 2},
      {{"Tensor[(1, 32, 8, 8), float32]"}, blocked(32, 8), "    %0 = nn.to_nchwc(%p0, block=16);\n    return %0;\n", true, 1 * 2 * 2},
      {{blocked(64, 8), "Tensor[(64, 64, 1, 1), float32]"}, blocked(64, 8), "    %0 = nn.conv2d_nchwc(%p0, %p1);\n    %1 = nn.relu(%0);\n    return %1;\n", true, 0},
      {{"Tensor[(1, 64, 16, 16), float32]", "Tensor[(64, 64, 1, 1), float32]"}, "Tensor[(1, 64, 16, 16), float32]",
       "    %0 = nn.conv2d(%p0, %p1);\n    return %0;\n", true, 0},
      {{blocked(32, 8), "Tensor[(32, 32, 3, 3), float32]"}, blocked(32, 8), "    %0 = nn.conv2d_nchwc(%p0, %p1, padding=[1, 1, 1, 1]);\n    return %0;\n", true, 1 * 2 * 2},
      {{blocked(32, 6), "Tensor[(32, 32, 3, 3), float32]"}, blocked(32, 6), "    %0 = nn.conv2d_nchwc(%p0, %p1, padding=[1, 1, 1, 1]);\n    return %0;\n", false, 0},
      {{blocked(32, 7), "Tensor[(32, 1, 3, 3), float32]"}, blocked(32, 7), dw, false, 0},
  };
  for (const Case &c : cases) {
    auto g = one_group(c.params, c.out, c.ops);
    ASSERT_TRUE(static_cast<bool>(g)) << g.error().message;
    const Graph &body = *g->nodes[0].body;
    EXPECT_EQ(can_split_rows(body, 2), c.rows) << c.out << " " << c.ops;
    for (const char *isa : {"avx2", "avx512"}) {
      Target t = *resolve_target(isa);
      std::string what = std::string(isa) + " " + c.out + " " + c.ops;
      KernelSchedule channels = default_schedule(body, t), rows = default_schedule(body, t, 2);
      EXPECT_FALSE(splits_rows(body, channels)) << what << channels.to_string();
      EXPECT_EQ(splits_rows(body, rows), c.rows) << what << rows.to_string();
      if (!c.rows) {
        EXPECT_EQ(rows, channels) << what;
        continue;
      }
      auto k = lower_group(body, "k", rows);
      ASSERT_TRUE(static_cast<bool>(k)) << k.error().message;
      if (c.parallel) {
        EXPECT_EQ(k->stages.back().parallel_extent, c.parallel) << what;
      } else {
        EXPECT_EQ(rows.parallel, KernelSchedule::Parallel::kPx) << what;
      }
      if (t.runnable_here()) expect_schedule_matches(body, rows, what, 1e-5, t, 2);
    }
  }
}

TEST(ThreadRows, TheCutCostsNoMoreThanAnyOtherLabellingOfEachWindow) {
  // rows_by_thread labels every group of a model by a minimum cut. Against brute force: for every
  // window of 8 consecutive groups free to choose (the rest as the cut chose), no labelling of the
  // window costs less than the cut's. Groups whose default already splits rows keep rows, the
  // others split rows only where can_split_rows; one thread changes nothing; and on these models
  // the cut costs less than every group's channel default.
  Target t = *resolve_target("avx512");
  for (const char *name : {"mobilenet_v2", "efficientnet_b0", "resnet50"}) {
    Graph g = fused_model(name);
    std::vector<bool> already;
    for (const Node &n : g.nodes) already.push_back(splits_rows(*n.body, default_schedule(*n.body, t)));
    std::vector<bool> rows = rows_by_thread(g, 2, already);
    EXPECT_EQ(rows_by_thread(g, 1, already), already) << name;
    std::vector<size_t> free;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      bool can = can_split_rows(*g.nodes[i].body, 2);
      if (already[i]) {
        EXPECT_TRUE(rows[i]) << name << " %" << i;
      } else if (rows[i]) {
        EXPECT_TRUE(can) << name << " %" << i;
      }
      if (!already[i] && can) free.push_back(i);
    }
    int64_t cut = thread_split_cost(g, rows);
    EXPECT_LT(cut, thread_split_cost(g, already)) << name;
    ASSERT_GE(free.size(), 8u) << name;
    int windows = 0;
    for (size_t start = 0; start + 8 <= free.size(); start += 4, ++windows)
      for (int mask = 0; mask < 256; ++mask) {
        std::vector<bool> other = rows;
        for (int b = 0; b < 8; ++b) other[free[start + b]] = (mask >> b) & 1;
        ASSERT_GE(thread_split_cost(g, other), cut) << name << " window from %" << free[start] << ", mask " << mask;
      }
    EXPECT_GE(windows, 1) << name;
  }
}

TEST(Schedule, DefaultGlobalPoolSumsEachPlaneInVectorsOfPartials) {
  // A global average pool's default is the loop sketch's rfactor form: each plane summed as
  // 8 to 2 x lanes partial sums by plane size (at least 8), all planes parallel; run against the
  // reference on two images with 5 channels, planes whose size leaves a tail.
  struct Case {
    int64_t h, w, avx512, avx2;  // lanes of partials per target
  };
  for (const Case &c : {Case{7, 7, 8, 8}, Case{14, 13, 16, 8}, Case{56, 55, 32, 16}}) {
    std::string x = "Tensor[(2, 5, " + std::to_string(c.h) + ", " + std::to_string(c.w) + "), float32]", y = "Tensor[(2, 5, 1, 1), float32]";
    auto g = one_group({x}, y, "    %0 = nn.global_avg_pool2d(%p0);\n    return %0;\n");
    for_each_isa_default(g, x, [&](const std::string &what, const Target &t, const Graph &body, const KernelSchedule &d) {
      ASSERT_FALSE(d.steps.empty()) << what;
      int64_t lanes = 0;
      bool factored = false;
      for (const Step &st : d.steps) {
        if (st.op == "split" && st.names.size() == 2 && st.names[1] == "ki") lanes = st.factor;
        factored |= st.op == "rfactor";
      }
      EXPECT_TRUE(factored) << what;
      EXPECT_EQ(lanes, t.lanes == 16 ? c.avx512 : c.avx2) << what;
      auto k = lower_group(body, "k", d);
      ASSERT_TRUE(static_cast<bool>(k)) << k.error().message;
      EXPECT_EQ(k->stages[0].parallel_extent, 10) << what;
      if (t.runnable_here()) expect_schedule_matches(body, d, what, 1e-5, t);
    });
  }
}

TEST(Schedule, PoolsHaveNoTemplateTheirKnobsAreTheLoopSketchsSteps) {
  // A pool's default and its knob points are the loop sketch's steps (steps_of_knobs): a padded
  // strided window cuts its columns at the padding, so the inside reads the input with no clamp
  // and no select; a row that fits one vector is the row tile; without padding the naive nest
  // itself has no bounds checks (an average pool divides by a constant). Each against the
  // reference, on both ISAs, with two images and rows that leave tails.
  struct Case {
    std::string call, x, y;
    bool cut;      // the default partitions the columns
    int64_t rows;  // the default's row tile (0: none)
  };
  const Case cases[] = {
      {"nn.max_pool2d(%p0, pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1])", "(2, 3, 23, 45)", "(2, 3, 12, 23)", true, 0},
      {"nn.max_pool2d(%p0, pool_size=[3, 3], strides=[1, 1], padding=[1, 1, 1, 1])", "(1, 4, 7, 7)", "(1, 4, 7, 7)", false, 7},
      {"nn.avg_pool2d(%p0, pool_size=[2, 2], strides=[2, 2], padding=[0, 0, 0, 0], count_include_pad=0)", "(2, 5, 28, 28)", "(2, 5, 14, 14)", false, 7},
  };
  for (const Case &c : cases) {
    auto g = one_group({"Tensor[" + c.x + ", float32]"}, "Tensor[" + c.y + ", float32]", "    %0 = " + c.call + ";\n    return %0;\n");
    for_each_isa_default(g, c.call, [&](const std::string &what, const Target &t, const Graph &body, const KernelSchedule &d) {
      ASSERT_FALSE(d.steps.empty()) << what;
      bool cut = false;
      int64_t rows = 0;
      for (const Step &st : d.steps) {
        cut |= st.op == "partition";
        if (st.op == "split" && st.names == std::vector<std::string>{"yo", "yi"}) rows = st.factor;
      }
      EXPECT_EQ(cut, c.cut) << what;
      if (t.lanes == 16 || !c.rows) {  // AVX2's 8 lanes hold no 14-column row
        EXPECT_EQ(rows, c.rows) << what;
      }
      auto k = lower_group(body, "k", d);
      ASSERT_TRUE(static_cast<bool>(k)) << k.error().message;
      std::string text = k->to_string();
      if (c.cut) {
        // The vectorized inside never compares a column with the row's width (45) nor clamps it to 44.
        size_t vec = text.find("vectorized");
        ASSERT_NE(vec, std::string::npos) << what << "\n" << text;
        std::string inside = text.substr(vec, text.find("out[", vec) - vec);
        EXPECT_EQ(inside.find("< 45)"), std::string::npos) << what << "\n" << text;
        EXPECT_EQ(inside.find(", 44)"), std::string::npos) << what << "\n" << text;
      }
      if (c.call.find("avg") != std::string::npos) {  // no padding: no check anywhere, a constant divisor
        EXPECT_EQ(text.find("select"), std::string::npos) << what << "\n" << text;
        EXPECT_NE(text.find("/ 4.0f"), std::string::npos) << what << "\n" << text;
      }
      // The same knobs without steps are lowered as the same steps.
      KernelSchedule knobs = d;
      knobs.steps.clear();
      auto same = lower_group(body, "k", knobs);
      ASSERT_TRUE(static_cast<bool>(same)) << same.error().message;
      EXPECT_EQ(same->to_string(), text) << what;
      if (t.runnable_here()) {
        expect_schedule_matches(body, d, what, 1e-5, t);
        KernelSchedule narrow = knobs;  // a narrower vector's knob point
        narrow.vector_width = 4;
        expect_schedule_matches(body, narrow, what + " at 4 lanes", 1e-5, t);
      }
    });
  }
}

TEST(Schedule, DefaultDepthwiseIsTheRowTileOfTheLoopSketch) {
  // A depthwise conv's default is the loop sketch's row tile (no template): 7 rows (8 where they
  // divide a plane wider than 28) x the vector, the window unrolled; 7x7 planes (and 14x14 ones
  // under a 5x5 window) keep the padded input at root, the others copy it per channel plane
  // (compute_at i1); with 16
  // registers a row of several vectors takes 2 rows. Stride 2 reads a phase-split copy. Two
  // images, 5 channels, a bias and a clip, against the reference on both ISAs.
  struct Case {
    int64_t hw, k, stride, avx512_rows, avx2_rows;
    bool per_plane;
  };
  for (const Case &c : {Case{7, 3, 1, 7, 7, false}, Case{14, 3, 1, 7, 2, true}, Case{14, 5, 1, 7, 2, false}, Case{56, 3, 1, 8, 2, true},
                        Case{56, 3, 2, 7, 2, true}}) {
    auto ty = [](std::vector<int64_t> v) { return "Tensor[" + shape_str(v) + ", float32]"; };
    int64_t out = c.hw / c.stride;
    std::string x = ty({2, 5, c.hw, c.hw}), w = ty({5, 1, c.k, c.k}), b = ty({5}), y = ty({2, 5, out, out});
    std::string strides = std::to_string(c.stride), p = std::to_string(c.k / 2);
    auto g = one_group({x, w, b}, y, "    %0 = nn.conv2d(%p0, %p1, %p2, strides=[" + strides + ", " + strides + "], padding=[" + p + ", " + p +
                                     ", " + p + ", " + p + "], groups=5);\n    %1 = clip(%0, a_min=0f, a_max=6f);\n    return %1;\n");
    for_each_isa_default(g, x + " stride " + strides, [&](const std::string &what, const Target &t, const Graph &body, const KernelSchedule &d) {
      ASSERT_FALSE(d.steps.empty()) << what;
      int64_t rows = 0;
      bool per_plane = false;
      for (const Step &st : d.steps) {
        if (st.op == "split" && (st.names == std::vector<std::string>{"yo", "yi"})) rows = st.factor;
        per_plane |= st.op == "compute_at" && st.loop == "i1";
      }
      EXPECT_EQ(rows, t.lanes == 16 ? c.avx512_rows : c.avx2_rows) << what;
      EXPECT_EQ(per_plane, c.per_plane) << what;
      if (t.runnable_here()) expect_schedule_matches(body, d, what, 1e-5, t);
    });
  }
}

TEST(ScheduleSpace, DepthwiseRowBlocksAndPlaneCopiesMatchTheReference) {
  // The depthwise knobs, each lowered as the loop sketch's steps it stands for (grouped_steps):
  // rows per tile (the largest dividing the output's height), the padded plane copied per channel
  // plane or in a stage of its own, every vector width (a row wider leaves a tail); with column strides
  // 1-3 (a padded plane split by phase), dilation, asymmetric padding, 5x5 windows, a channel
  // multiplier of 2, two images, no padding at all (read in place), a 400x380 plane, and a
  // residual epilogue.
  struct Case {
    int64_t n, c, mult, h, w, k, stride, dil;
    std::vector<int64_t> pad;
  };
  int checked = 0;
  for (const Case &k : {Case{1, 4, 1, 9, 11, 3, 1, 1, {1, 1, 1, 1}}, Case{2, 3, 2, 13, 12, 3, 2, 1, {1, 1, 1, 1}},
                        Case{1, 2, 1, 14, 17, 5, 2, 2, {2, 1, 3, 4}}, Case{1, 3, 1, 11, 19, 3, 3, 1, {0, 1, 2, 0}},
                        Case{1, 4, 1, 8, 10, 3, 1, 1, {0, 0, 0, 0}}, Case{1, 1, 1, 400, 380, 3, 1, 1, {1, 1, 1, 1}}}) {
    int64_t o = k.c * k.mult, span = (k.k - 1) * k.dil + 1;
    int64_t oh = (k.h + k.pad[0] + k.pad[2] - span) / k.stride + 1, ow = (k.w + k.pad[1] + k.pad[3] - span) / k.stride + 1;
    auto ty = [](std::vector<int64_t> v) { return "Tensor[" + shape_str(v) + ", float32]"; };
    std::string x = ty({k.n, k.c, k.h, k.w}), w = ty({o, 1, k.k, k.k}), b = ty({o}), y = ty({k.n, o, oh, ow});
    std::string attrs = "strides=[" + std::to_string(k.stride) + ", " + std::to_string(k.stride) + "], padding=" + shape_str(k.pad) +
                        ", dilation=[" + std::to_string(k.dil) + ", " + std::to_string(k.dil) + "], groups=" + std::to_string(k.c);
    for (char &ch : attrs) if (ch == '(') ch = '['; else if (ch == ')') ch = ']';
    auto g = parse_text("def @main(%x: " + x + ", %w: " + w + ", %b: " + b + ", %r: " + y + ") -> " + y + " {\n  %0 = fn (%p0: " + x +
                        ", %p1: " + w + ", %p2: " + b + ", %p3: " + y + ") -> " + y + " {\n    %0 = nn.conv2d(%p0, %p1, %p2, " + attrs +
                        ");\n    %1 = add(%0, %p3);\n    %2 = clip(%1, a_min=0f, a_max=6f);\n    return %2;\n  }(%x, %w, %b, %r);\n  return %0;\n}");
    ASSERT_TRUE(static_cast<bool>(g)) << g.error().message;
    const Graph &body = *g->nodes[0].body;
    ScheduleSpace sp = ScheduleSpace::of(body, host_target(), false);  // the knobs alone
    EXPECT_EQ(sp.pad_at_root.size(), 2u) << y;
    for (bool root : {false, true})
      for (int rows : {1, 2, 3, 5})
        for (int v : {4, 8, 16}) {
          KernelSchedule s = default_schedule(body);
          s.steps.clear();
          s.pad_at_root = root, s.px_block = rows, s.vector_width = v;
          ASSERT_EQ(s.oc_block, 0) << "depthwise convs have no channel blocks";
          ASSERT_TRUE(static_cast<bool>(validate_schedule(body, s)));
          expect_schedule_matches(body, s, "depthwise " + attrs + " " + y);
          ++checked;
        }
  }
  EXPECT_EQ(checked, 144);
}

TEST(ScheduleSpace, PointwisePixelVectorsMatchTheReference) {
  // The pixel-vector template of 1x1 convs: channel blocks of 1, 3 and 8, 1-3 pixel vectors per
  // block, every vector width, every parallel axis; pixel counts that leave a tail of every
  // halving width (7x9 = 63 pixels), two images, strides 2 and 3 (a subsampling stage first),
  // and a residual epilogue.
  struct Case {
    int64_t n, c, o, h, w, stride;
  };
  int checked = 0;
  for (Case k : {Case{1, 16, 24, 8, 8, 1}, Case{2, 5, 24, 7, 9, 1}, Case{1, 40, 3, 3, 5, 1}, Case{1, 8, 16, 13, 11, 2},
                 Case{2, 4, 6, 9, 16, 3}}) {
    auto ty = [](std::vector<int64_t> v) { return "Tensor[" + shape_str(v) + ", float32]"; };
    int64_t oh = (k.h - 1) / k.stride + 1, ow = (k.w - 1) / k.stride + 1;
    std::string x = ty({k.n, k.c, k.h, k.w}), w = ty({k.o, k.c, 1, 1}), b = ty({k.o}), y = ty({k.n, k.o, oh, ow});
    std::string strides = std::to_string(k.stride) + ", " + std::to_string(k.stride);
    auto g = parse_text("def @main(%x: " + x + ", %w: " + w + ", %b: " + b + ", %r: " + y + ") -> " + y + " {\n  %0 = fn (%p0: " + x +
                        ", %p1: " + w + ", %p2: " + b + ", %p3: " + y + ") -> " + y +
                        " {\n    %0 = nn.conv2d(%p0, %p1, %p2, strides=[" + strides + "], padding=[0, 0, 0, 0]);\n    %1 = add(%0, %p3);\n    %2 = nn.relu(%1);\n"
                        "    return %2;\n  }(%x, %w, %b, %r);\n  return %0;\n}");
    ASSERT_TRUE(static_cast<bool>(g)) << g.error().message;
    const Graph &body = *g->nodes[0].body;
    EXPECT_EQ(ScheduleSpace::of(body).pixel_vectors.size(), 2u) << y;
    for (int ob : {1, 3, 8})
      for (int pv : {1, 2, 3})
        for (int v : {4, 8, 16})
          for (auto par : {KernelSchedule::Parallel::kOc, KernelSchedule::Parallel::kPx, KernelSchedule::Parallel::kOcPx}) {
            if (k.o % ob) continue;
            KernelSchedule s = default_schedule(body);
            s.steps.clear();  // the knobs, not the steps the default's stand for
            s.pixel_vectors = true, s.oc_block = ob, s.px_block = pv, s.vector_width = v, s.parallel = par;
            ASSERT_TRUE(ScheduleSpace::legalize(s));
            ASSERT_TRUE(static_cast<bool>(validate_schedule(body, s))) << validate_schedule(body, s).error().message;
            expect_schedule_matches(body, s, "pointwise " + y);
            ++checked;
          }
  }
  EXPECT_EQ(checked, 324);
}

TEST(Schedule, WinogradIsRefusedWhereItDoesNotApply) {
  auto g = parse_text(R"(def @main(%x: Tensor[(1, 8, 8, 8), float32], %w: Tensor[(16, 8, 3, 3), float32]) -> Tensor[(1, 16, 4, 4), float32] {
    %0 = fn (%p0: Tensor[(1, 8, 8, 8), float32], %p1: Tensor[(16, 8, 3, 3), float32]) -> Tensor[(1, 16, 4, 4), float32] {
      %0 = nn.conv2d(%p0, %p1, strides=[2, 2], padding=[1, 1, 1, 1]);
      return %0;
    }(%x, %w);
    return %0;
  })");
  ASSERT_TRUE(static_cast<bool>(g)) << g.error().message;
  KernelSchedule s = default_schedule(*g->nodes[0].body);
  s.steps.clear();  // the knobs, not the steps they stand for
  s.winograd = 2;
  EXPECT_EQ(validate_schedule(*g->nodes[0].body, s).error().message,
            "illegal schedule: winograd needs a 3x3 conv of stride 1, dilation 1, one group and an argument weight");
  s.winograd = 3;
  EXPECT_EQ(validate_schedule(*g->nodes[0].body, s).error().message, "illegal schedule: winograd 3 is not 0, 2 or 4");
}

TEST(ScheduleSpace, ReductionTilesKeepPartialSumsAndApplyTheEpilogueOnce) {
  // 32 input channels in two tiles of 16, a residual epilogue, 7x7 = 49 pixels (a tail block),
  // under every parallel axis, with the padding at root and inline.
  auto g = parse_text(R"(def @main(%x: Tensor[(1, 32, 7, 7), float32], %w: Tensor[(16, 32, 3, 3), float32], %b: Tensor[(16), float32], %r: Tensor[(1, 16, 7, 7), float32]) -> Tensor[(1, 16, 7, 7), float32] {
    %0 = fn (%p0: Tensor[(1, 32, 7, 7), float32], %p1: Tensor[(16, 32, 3, 3), float32], %p2: Tensor[(16), float32], %p3: Tensor[(1, 16, 7, 7), float32]) -> Tensor[(1, 16, 7, 7), float32] {
      %0 = nn.conv2d(%p0, %p1, %p2, padding=[1, 1, 1, 1]);
      %1 = add(%0, %p3);
      %2 = nn.relu(%1);
      return %2;
    }(%x, %w, %b, %r);
    return %0;
  })");
  ASSERT_TRUE(static_cast<bool>(g)) << g.error().message;
  const Graph &body = *g->nodes[0].body;
  for (auto par : {KernelSchedule::Parallel::kOc, KernelSchedule::Parallel::kPx, KernelSchedule::Parallel::kOcPx})
    for (bool root : {true, false}) {
      KernelSchedule s = default_schedule(body);
      s.steps.clear();  // the knobs, not the steps the default's stand for
      s.ic_block = 16, s.parallel = par, s.pad_at_root = root, s.px_block = 5;
      s.winograd = 0, s.pixel_vectors = false;  // a direct conv, whatever the host's default
      ASSERT_TRUE(static_cast<bool>(validate_schedule(body, s)));
      expect_schedule_matches(body, s, "tiled conv");
    }
}

TEST(ScheduleSpace, PixelEpiloguesTransposeTilesOfEveryShape) {
  // The pixel epilogue reads its accumulators a channel at a time across the tile's pixels; the
  // emitter transposes each block of channels once (codegen/LLVMEmitter tile_column), in rows of
  // the target's lanes: tiles of fewer pixels than lanes, more, and not a multiple, with and
  // without reduction tiles, on each ISA this host runs.
  auto g = parse_text(R"(def @main(%x: Tensor[(1, 8, 9, 9), float32], %w: Tensor[(48, 8, 3, 3), float32], %b: Tensor[(48), float32]) -> Tensor[(1, 48, 9, 9), float32] {
    %0 = fn (%p0: Tensor[(1, 8, 9, 9), float32], %p1: Tensor[(48, 8, 3, 3), float32], %p2: Tensor[(48), float32]) -> Tensor[(1, 48, 9, 9), float32] {
      %0 = nn.conv2d(%p0, %p1, %p2, padding=[1, 1, 1, 1]);
      %1 = nn.relu(%0);
      return %1;
    }(%x, %w, %b);
    return %0;
  })");
  ASSERT_TRUE(static_cast<bool>(g)) << g.error().message;
  const Graph &body = *g->nodes[0].body;
  int checked = 0;
  for (const char *isa : {"avx2", "avx512"}) {
    auto t = resolve_target(isa);
    ASSERT_TRUE(static_cast<bool>(t)) << t.error().message;
    if (!t->runnable_here()) continue;  // the host's own ISA always runs: avx2 at least
    for (int ob : {16, 48})
      for (int px : {2, 5, 8, 9, 16, 17, 27, 32})
        for (int ib : {0, 4}) {
          KernelSchedule s = default_schedule(body, *t);
          s.steps.clear();  // the knobs, not the steps the default's stand for
          s.winograd = 0, s.pixel_vectors = false, s.pixel_epilogue = true;
          s.vector_width = t->lanes, s.oc_block = ob, s.px_block = px, s.ic_block = ib;
          ASSERT_TRUE(static_cast<bool>(validate_schedule(body, s))) << validate_schedule(body, s).error().message;
          expect_schedule_matches(body, s, std::string(isa) + " pixel epilogue", 1e-5, *t);
          ++checked;
        }
  }
  EXPECT_GE(checked, 32);
}

/** One group: conv `op` (3x3 weight `w`, bias, square stride and padding) + add of a residual `y` + relu. */
Expected<Graph> conv_add_relu_group(const std::string &op, const std::string &x, const std::string &w, const std::string &bias,
                                    const std::string &y, int stride, int pad, int64_t groups = 1) {
  std::string st = std::to_string(stride), p = std::to_string(pad);
  return parse_text("def @main(%x: " + x + ", %w: " + w + ", %b: " + bias + ", %r: " + y + ") -> " + y + " {\n"
                    "  %0 = fn (%p0: " + x + ", %p1: " + w + ", %p2: " + bias + ", %p3: " + y + ") -> " + y + " {\n"
                    "    %0 = " + op + "(%p0, %p1, %p2, strides=[" + st + ", " + st + "], padding=[" + p + ", " + p + ", " + p + ", " + p +
                    "], groups=" + std::to_string(groups) + ");\n"
                    "    %1 = add(%0, %p3);\n"
                    "    %2 = nn.relu(%1);\n"
                    "    return %2;\n"
                    "  }(%x, %w, %b, %r);\n"
                    "  return %0;\n"
                    "}");
}

/** Every load and store in a vectorized loop is affine in its lane: whole vectors, no per-lane gathers. */
void expect_vector_accesses_affine(const LoweredKernel &k) {
  for (const KernelStage &st : k.stages) {
    std::vector<std::string> lanes;  // the vectorized loops around each access
    std::function<void(const loop::Expr &)> access = [&](const loop::Expr &e) {
      if (!e) return;
      if (e->kind == loop::ExprKind::kLoad) {
        for (const std::string &v : lanes) EXPECT_TRUE(loop::stride_of(e->args[0], v).has_value()) << st.name << ": " << loop::to_string(e->args[0]);
      }
      for (const loop::Expr &a : e->args) access(a);
    };
    std::function<void(const loop::Stmt &)> walk = [&](const loop::Stmt &x) {
      if (!x) return;
      if (x->kind == loop::StmtKind::kStore) {
        for (const std::string &v : lanes) EXPECT_TRUE(loop::stride_of(x->index, v).has_value()) << st.name << ": " << loop::to_string(x->index);
      }
      access(x->index), access(x->value);
      bool vec = x->kind == loop::StmtKind::kFor && x->for_kind == loop::ForKind::kVectorized;
      if (vec) lanes.push_back(x->var);
      for (const loop::Stmt &c : x->body) walk(c);
      if (vec) lanes.pop_back();
    };
    walk(st.body);
  }
}

TEST(ScheduleSpace, Conv2dNchwcKernelsMatchTheReference) {
  // Activations in NCHW[b]c (b = 8 and 16): padded and unpadded, stride 1 and 2, with a relu and
  // a residual add read in the same layout; direct and Winograd; the default and sampled points of the space and the
  // register-tile sketch's step lists, on each
  // ISA this host runs. Its blocked indices resolve to whole vectors: every access in a vectorized
  // loop is affine in its lane (no division or modulo left there, so no per-lane gathers).
  struct Case {
    int b, c, o, h, stride, pad;
  };
  int checked = 0;
  for (const Case &cs : {Case{16, 32, 64, 9, 1, 1}, Case{8, 16, 48, 10, 2, 1}, Case{16, 64, 32, 7, 1, 0}}) {
    int oh = (cs.h + 2 * cs.pad - 3) / cs.stride + 1;
    auto shape = [](int n, int c, int h, int b) {
      return "(" + std::to_string(n) + ", " + std::to_string(c / b) + ", " + std::to_string(h) + ", " + std::to_string(h) + ", " + std::to_string(b) + ")";
    };
    std::string x = "Tensor[" + shape(1, cs.c, cs.h, cs.b) + ", float32]", y = "Tensor[" + shape(1, cs.o, oh, cs.b) + ", float32]";
    std::string w = "Tensor[(" + std::to_string(cs.o) + ", " + std::to_string(cs.c) + ", 3, 3), float32]";
    std::string bias = "Tensor[(" + std::to_string(cs.o) + "), float32]";
    auto g = conv_add_relu_group("nn.conv2d_nchwc", x, w, bias, y, cs.stride, cs.pad);
    ASSERT_TRUE(static_cast<bool>(g)) << g.error().message;
    const Graph &body = *g->nodes[0].body;
    for (const char *isa : {"avx2", "avx512"}) {
      auto t = resolve_target(isa);
      ASSERT_TRUE(static_cast<bool>(t)) << t.error().message;
      if (!t->runnable_here()) continue;
      ScheduleSpace sp = ScheduleSpace::of(body, *t);
      std::vector<KernelSchedule> points = {default_schedule(body, *t)};
      Rng rng(5);
      for (int i = 0; i < 6; ++i) points.push_back(sp.sample(rng));
      // The tile sketch's step lists on the blocked naive nest: every third point and every one
      // with reduction tiles (each register tile reading and writing its partial sums).
      int lists = 0, reduction_tiles = 0;
      for (size_t i = 0; i < sp.sketches.size(); ++i) {
        bool tiles = std::any_of(sp.sketches[i].steps.begin(), sp.sketches[i].steps.end(), [](const Step &st) { return st.op == "cache_write"; });
        if (i % 3 && !tiles) continue;
        points.push_back(sp.sketch(i));
        ++lists, reduction_tiles += tiles;
      }
      EXPECT_GE(lists, 3) << isa << " b=" << cs.b;
      if (cs.c >= 64) {
        EXPECT_GE(reduction_tiles, 1) << isa;
      }
      // Padding in the tiles: rows of one tile, of edge tiles only, of edge tiles and a loop
      // between them, and a narrower last tile, under each parallel split.
      for (int px : {3, 4, 5, 14, 32})
        for (auto par : {KernelSchedule::Parallel::kOc, KernelSchedule::Parallel::kPx, KernelSchedule::Parallel::kOcPx}) {
          KernelSchedule s = default_schedule(body, *t);
          s.steps.clear();  // the template's knobs (a Winograd default is a step list)
          s.pad_at_root = false, s.px_block = px, s.parallel = par, s.ic_block = 0;
          points.push_back(s);
        }
      // Winograd in the blocked layout (stride 1): transforms over a channel block, odd outputs
      // leaving a last tile row and column part outside, a tile block and a tail of tiles.
      if (cs.stride == 1)
        for (int wg : {2, 4})
          for (int px : {3, 14}) {
            KernelSchedule s = default_schedule(body, *t);
            s.steps.clear();
            s.winograd = wg, s.px_block = px, s.ic_block = 0, s.pad_at_root = true;
            points.push_back(s);
          }
      for (const KernelSchedule &s : points) {
        ASSERT_TRUE(static_cast<bool>(validate_schedule(body, s))) << validate_schedule(body, s).error().message;
        if (s.steps.empty()) {
          EXPECT_EQ(s.oc_block % cs.b, 0);
        }
        expect_schedule_matches(body, s, std::string(isa) + " conv2d_nchwc b=" + std::to_string(cs.b), 1e-5, *t);
        auto k = lower_group(body, "k", s);
        ASSERT_TRUE(static_cast<bool>(k));
        expect_vector_accesses_affine(*k);
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 3 * 22);
}

TEST(Schedule, DefaultNchwcTilesTakeTheChannelVectorsThatDivide) {
  // A 1x1 conv2d_nchwc on 32 registers: four channel vectors x 6 pixels, else three x 9, else two
  // x 14, on planes of 192 pixels or more (two x 14 where the weight a thread streams is half the L2
  // or more); on smaller ones (7x7) two x 14 only where the core issues
  // two 512-bit FMAs a cycle, else one vector x 28 (Target::wide_fma_pipes), as where no two
  // vectors divide the channels (80: five blocks, split over the pixels on 2 threads). Each default
  // is then run against the reference executor where this host runs AVX-512.
  struct Case {
    int64_t in, out, hw;
    int wide;                // Target::wide_fma_pipes
    int oc_block, px_block;  // the default's register tile
    bool pixels_parallel;
  };
  Target avx512 = *resolve_target("avx512"), avx2 = *resolve_target("avx2");
  // An NCHW16c tensor of one image: ch channels on an hw x hw plane.
  auto blocked = [](int64_t ch, int64_t hw) {
    return "Tensor[(1, " + std::to_string(ch / 16) + ", " + std::to_string(hw) + ", " + std::to_string(hw) + ", 16), float32]";
  };
  int ran = 0;
  for (const Case &c : {Case{64, 256, 56, 1, 64, 6, false}, Case{16, 96, 28, 1, 48, 9, false}, Case{96, 32, 28, 1, 32, 14, true},
                        Case{96, 32, 28, 2, 32, 14, true}, Case{16, 80, 28, 2, 16, 28, true}, Case{2048, 512, 7, 2, 32, 14, false},
                        Case{512, 2048, 7, 2, 32, 14, false}, Case{512, 2048, 7, 1, 16, 28, false}, Case{1024, 512, 14, 2, 32, 14, true},
                        Case{1024, 256, 14, 2, 32, 14, true}, Case{256, 1024, 14, 2, 64, 6, false}}) {
    std::string w = "Tensor[(" + std::to_string(c.out) + ", " + std::to_string(c.in) + ", 1, 1), float32]";
    std::string bias = "Tensor[(" + std::to_string(c.out) + "), float32]";
    auto g = conv_add_relu_group("nn.conv2d_nchwc", blocked(c.in, c.hw), w, bias, blocked(c.out, c.hw), 1, 0);
    ASSERT_TRUE(static_cast<bool>(g)) << g.error().message;
    const Graph &body = *g->nodes[0].body;
    std::string what = std::to_string(c.in) + " -> " + std::to_string(c.out) + " at " + std::to_string(c.hw) + "x" + std::to_string(c.hw) +
                       ", 512-bit FMAs a cycle " + std::to_string(c.wide);
    Target t = avx512;
    t.wide_fma_pipes = c.wide;
    t.l2_bytes = 2 << 20;  // a weight a thread streams from 1 MiB up takes two vectors by 14 (1024 -> 512, 1024 -> 256 split by pixels)
    KernelSchedule d = default_schedule(body, t);
    EXPECT_EQ(d.oc_block, c.oc_block) << what;
    EXPECT_EQ(d.px_block, c.px_block) << what;
    EXPECT_EQ(d.parallel == KernelSchedule::Parallel::kPx, c.pixels_parallel) << what;
    // With 16 registers (AVX2) a tile stays within one channel block, as before.
    EXPECT_LE(default_schedule(body, avx2).oc_block, 16) << what << ", avx2";
    if (t.runnable_here()) expect_schedule_matches(body, d, what, 1e-5, t, 2), ++ran;
  }
  // A 1x1 stride-2 conv2d_nchwc (a downsample shortcut) splits its pixel blocks over the threads
  // though it has fewer input than output channels: split by channels, each thread would read every
  // other pixel of the whole input.
  for (auto [in_hw, in, out] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{56, 256, 512}, {28, 64, 128}}) {
    std::string w = "Tensor[(" + std::to_string(out) + ", " + std::to_string(in) + ", 1, 1), float32]";
    auto g = conv_add_relu_group("nn.conv2d_nchwc", blocked(in, in_hw), w, "Tensor[(" + std::to_string(out) + "), float32]", blocked(out, in_hw / 2), 2, 0);
    ASSERT_TRUE(static_cast<bool>(g)) << g.error().message;
    const Graph &body = *g->nodes[0].body;
    std::string what = "1x1 stride 2 " + std::to_string(in) + " -> " + std::to_string(out) + " to " + std::to_string(in_hw / 2) + "x" + std::to_string(in_hw / 2);
    Target t = avx512;
    t.l2_bytes = 2 << 20;
    KernelSchedule d = default_schedule(body, t);
    EXPECT_EQ(d.oc_block, 64) << what;
    EXPECT_EQ(d.parallel, KernelSchedule::Parallel::kPx) << what;
    if (t.runnable_here()) expect_schedule_matches(body, d, what, 1e-5, t, 2), ++ran;
    // So does AVX2's two channel vectors by 6 pixels (both planes have 192 pixels or more).
    KernelSchedule a = default_schedule(body, avx2);
    EXPECT_EQ(a.oc_block, 16) << what << ", avx2";
    EXPECT_EQ(a.parallel, KernelSchedule::Parallel::kPx) << what << ", avx2";
    if (avx2.runnable_here()) expect_schedule_matches(body, a, what + ", avx2", 1e-5, avx2, 2), ++ran;
  }
  // With 16 registers an unstrided 1x1 conv2d_nchwc with more input than output channels splits
  // its pixels where its input is larger than the L2 and half of it is not (ResNet-50's 1024
  // channels at 14x14, 784 KiB, on a 512 KiB L2 and 2 threads), else its channels.
  {
    auto g = conv_add_relu_group("nn.conv2d_nchwc", blocked(1024, 14), "Tensor[(256, 1024, 1, 1), float32]", "Tensor[(256), float32]",
                                 blocked(256, 14), 1, 0);
    ASSERT_TRUE(static_cast<bool>(g)) << g.error().message;
    const Graph &body = *g->nodes[0].body;
    Target t = avx2;
    t.threads = 2;
    for (int64_t l2 : {256 << 10, 512 << 10, 1 << 20}) {
      t.l2_bytes = l2;
      KernelSchedule d = default_schedule(body, t);
      EXPECT_EQ(d.parallel == KernelSchedule::Parallel::kPx, l2 == 512 << 10) << "1024 -> 256 at 14x14, avx2, L2 " << l2 << ": " << d.to_string();
      if (l2 == 512 << 10 && t.runnable_here()) expect_schedule_matches(body, d, "1024 -> 256 at 14x14, avx2", 1e-5, t, 2), ++ran;
    }
  }
  // A 3x3 stride-2 conv2d_nchwc: four vectors x 6 to a plane of 192 pixels or more, two x 14 to 7x7.
  for (auto [in_hw, oc, px] : std::vector<std::tuple<int64_t, int, int>>{{56, 64, 6}, {14, 32, 14}}) {
    auto g = conv_add_relu_group("nn.conv2d_nchwc", blocked(64, in_hw), "Tensor[(128, 64, 3, 3), float32]", "Tensor[(128), float32]",
                                 blocked(128, in_hw / 2), 2, 1);
    ASSERT_TRUE(static_cast<bool>(g)) << g.error().message;
    const Graph &body = *g->nodes[0].body;
    std::string what = "3x3 stride 2 to " + std::to_string(in_hw / 2) + "x" + std::to_string(in_hw / 2);
    KernelSchedule d = default_schedule(body, avx512);
    EXPECT_EQ(d.oc_block, oc) << what;
    EXPECT_EQ(d.px_block, px) << what;
    if (avx512.runnable_here()) expect_schedule_matches(body, d, what, 1e-5, avx512, 2), ++ran;
    // With AVX2's 16 registers the padded input is copied at root, never taken in the row tiles.
    KernelSchedule a = default_schedule(body, avx2);
    EXPECT_TRUE(a.pad_at_root) << what << ", avx2: " << a.to_string();
    if (avx2.runnable_here()) expect_schedule_matches(body, a, what + ", avx2", 1e-5, avx2, 2), ++ran;
  }
  // An NCHW 1x1 conv on pixel vectors: four vectors by 6 channels where four divide the plane's
  // vectors and three do not (56x56: 196), else three by 8 (28x28: 49).
  for (auto [hw, px, oc] : std::vector<std::tuple<int64_t, int, int>>{{56, 4, 6}, {28, 3, 8}}) {
    auto plane = [&](int64_t ch) {
      return "Tensor[(1, " + std::to_string(ch) + ", " + std::to_string(hw) + ", " + std::to_string(hw) + "), float32]";
    };
    auto g = conv_add_relu_group("nn.conv2d", plane(144), "Tensor[(24, 144, 1, 1), float32]", "Tensor[(24), float32]", plane(24), 1, 0);
    ASSERT_TRUE(static_cast<bool>(g)) << g.error().message;
    const Graph &body = *g->nodes[0].body;
    std::string what = "NCHW 144 -> 24 at " + std::to_string(hw) + "x" + std::to_string(hw);
    KernelSchedule d = default_schedule(body, avx512);
    EXPECT_TRUE(d.pixel_vectors) << what;
    EXPECT_EQ(d.px_block, px) << what;
    EXPECT_EQ(d.oc_block, oc) << what;
    if (avx512.runnable_here()) expect_schedule_matches(body, d, what, 1e-5, avx512, 2), ++ran;
  }
  // A 3x3 stride-1 conv2d_nchwc on Winograd F(4x4): its GEMM takes four channel vectors by 6 tiles
  // on a plane of 192 tiles or more (56x56: 196) where four vectors divide the channels, else two
  // by 14 (28x28: 49 tiles); with 16 registers one vector.
  for (auto [hw, ch, vecs, tiles] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>>{{56, 64, 4, 6}, {56, 96, 2, 14}, {28, 128, 2, 14}}) {
    std::string w = "Tensor[(" + std::to_string(ch) + ", " + std::to_string(ch) + ", 3, 3), float32]";
    auto g = conv_add_relu_group("nn.conv2d_nchwc", blocked(ch, hw), w, "Tensor[(" + std::to_string(ch) + "), float32]", blocked(ch, hw), 1, 1);
    ASSERT_TRUE(static_cast<bool>(g)) << g.error().message;
    const Graph &body = *g->nodes[0].body;
    std::string what = "3x3 " + std::to_string(ch) + " channels at " + std::to_string(hw) + "x" + std::to_string(hw);
    // The GEMM's splits: the channel vectors (the first) and the tiles (the second), before their tails.
    auto gemm_splits = [](const KernelSchedule &k) {
      std::vector<int64_t> f;
      for (const Step &st : k.steps)
        if (st.op == "split" && st.stage == "wino_gemm") f.push_back(st.factor);
      return f;
    };
    KernelSchedule d = default_schedule(body, avx512);
    ASSERT_EQ(d.winograd, 4) << what;
    std::vector<int64_t> f = gemm_splits(d);
    ASSERT_GE(f.size(), 2u) << what;
    EXPECT_EQ(f[0], vecs) << what;
    EXPECT_EQ(f[1], tiles) << what;
    std::vector<int64_t> f2 = gemm_splits(default_schedule(body, avx2));
    ASSERT_GE(f2.size(), 1u) << what << ", avx2";
    EXPECT_EQ(f2[0], 1) << what << ", avx2";
    if (avx512.runnable_here()) expect_schedule_matches(body, d, what, 1e-4, avx512, 2), ++ran;
  }
  if (!ran) GTEST_SKIP() << "the defaults were checked; running them needs AVX2 or AVX-512, which this host lacks";
}

TEST(ScheduleSpace, DepthwiseConv2dNchwcKernelsMatchTheReference) {
  // A depthwise conv in NCHW[b]c (groups = channels): 3x3 and 5x5 windows, stride 1 and 2, padded
  // and not, rows of 7, 14 and 28 columns and rows no tile of 7 divides (11: tiles of 1), two
  // images, with a bias, a residual add and a relu. Every point of its space on the host's widest
  // ISA (tiles of 1-14 columns, the padding recomputed at the reads or stored at root, vectors of
  // 16, 8 and 4 lanes) and the default on each ISA the host runs: all against the reference, every
  // vector access whole (the weight packed by the block, no gathers).
  struct Case {
    int64_t n, b, c, h, w, k, stride, pad;
  };
  int checked = 0;
  for (Case cs : {Case{1, 16, 32, 14, 14, 3, 1, 1}, Case{1, 16, 48, 28, 28, 3, 2, 1}, Case{2, 8, 16, 9, 11, 5, 1, 2},
                  Case{1, 16, 16, 7, 7, 3, 1, 1}, Case{1, 16, 32, 10, 12, 3, 2, 0}}) {
    auto ty = [](std::vector<int64_t> v) { return "Tensor[" + shape_str(v) + ", float32]"; };
    int64_t oh = (cs.h + 2 * cs.pad - cs.k) / cs.stride + 1, ow = (cs.w + 2 * cs.pad - cs.k) / cs.stride + 1;
    std::string x = ty({cs.n, cs.c / cs.b, cs.h, cs.w, cs.b}), y = ty({cs.n, cs.c / cs.b, oh, ow, cs.b});
    std::string st = std::to_string(cs.stride);
    auto g = conv_add_relu_group("nn.conv2d_nchwc", x, ty({cs.c, 1, cs.k, cs.k}), ty({cs.c}), y, static_cast<int>(cs.stride),
                                 static_cast<int>(cs.pad), cs.c);
    ASSERT_TRUE(static_cast<bool>(g)) << g.error().message;
    const Graph &body = *g->nodes[0].body;
    bool widest = true;
    for (const char *isa : {"avx512", "avx2"}) {
      auto t = resolve_target(isa);
      ASSERT_TRUE(static_cast<bool>(t)) << t.error().message;
      if (!t->runnable_here()) continue;
      ScheduleSpace sp = ScheduleSpace::of(body, *t);
      std::vector<KernelSchedule> points = {default_schedule(body, *t)};
      EXPECT_EQ(points[0].oc_block, 0) << isa;
      EXPECT_FALSE(points[0].pad_at_root) << isa;
      if (widest) {
        EXPECT_EQ(sp.oc_block, std::vector<int>{0});
        EXPECT_EQ(sp.pad_at_root.size(), 2u);
        for (int v : sp.vector_width)
          for (int px : sp.px_block)
            for (bool root : sp.pad_at_root) {
              KernelSchedule s = points[0];
              s.steps.clear();
              s.vector_width = v, s.px_block = px, s.pad_at_root = root;
              points.push_back(s);
            }
      }
      widest = false;
      for (const KernelSchedule &s : points) {
        std::string what = std::string(isa) + " depthwise " + y + " " + std::to_string(cs.k) + "x" + std::to_string(cs.k) + "/" + st + " " + s.to_string();
        ASSERT_TRUE(static_cast<bool>(validate_schedule(body, s))) << what << ": " << validate_schedule(body, s).error().message;
        auto k = lower_group(body, "k", s);
        ASSERT_TRUE(static_cast<bool>(k)) << what << ": " << k.error().message;
        EXPECT_EQ(k->packings.size(), 1u) << what;  // the weight, by the block
        std::string stages;
        for (const KernelStage &ks : k->stages) stages += ks.name + " ";
        EXPECT_EQ(stages, s.pad_at_root && cs.pad ? "pad conv2d " : "conv2d ") << what;
        expect_vector_accesses_affine(*k);
        expect_schedule_matches(body, s, what, 1e-5, *t);
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 5 * (1 + 2 * 6 * 2));
}

TEST(ScheduleSpace, WinogradStepListsMatchTheReference) {
  // Winograd F(2x2) and F(4x4) as naive nests (pad, wino_in, wino_gemm, wino_out) and under the
  // Winograd sketch's step lists, in NCHW (the padded rows split into phases; the GEMM's tiles or
  // its channels as the vector, with a remainder) and NCHW16c / NCHW8c: outputs that are and are
  // not multiples of the tile (the last tile row and column partly outside), with and without
  // padding, two images, 3 input channels, a bias and a residual epilogue.
  struct Case {
    int64_t n, c, o, h, w, pad, b;
  };
  int naive = 0, lists = 0, nchw_tails = 0, nchw_lanes = 0, nchw_parts = 0;
  for (Case k : {Case{1, 16, 32, 8, 8, 1, 0}, Case{2, 8, 16, 7, 9, 1, 0}, Case{1, 24, 16, 6, 5, 0, 0}, Case{1, 3, 32, 13, 11, 1, 0},
                 Case{1, 32, 32, 9, 9, 1, 16}, Case{2, 16, 24, 6, 6, 0, 8}}) {
    int64_t oh = k.h + 2 * k.pad - 2, ow = k.w + 2 * k.pad - 2;
    auto act = [&](int64_t n, int64_t c, int64_t h, int64_t w) {
      return "Tensor[" + (k.b ? shape_str({n, c / k.b, h, w, k.b}) : shape_str({n, c, h, w})) + ", float32]";
    };
    auto g = conv_add_relu_group(k.b ? "nn.conv2d_nchwc" : "nn.conv2d", act(k.n, k.c, k.h, k.w), "Tensor[" + shape_str({k.o, k.c, 3, 3}) + ", float32]",
                                 "Tensor[" + shape_str({k.o}) + ", float32]", act(k.n, k.o, oh, ow), 1, static_cast<int>(k.pad));
    ASSERT_TRUE(static_cast<bool>(g)) << g.error().message;
    const Graph &body = *g->nodes[0].body;
    ScheduleSpace sp = ScheduleSpace::of(body);
    for (int m : {2, 4}) {
      // The naive nests themselves (one step that changes nothing they compute).
      KernelSchedule s;
      s.winograd = m;
      Step par;
      par.op = "parallel", par.stage = "wino_out", par.loop = "i0";
      s.steps = {par};
      std::string what = "winograd F(" + std::to_string(m) + ") " + shape_str({k.n, k.c, k.h, k.w}) + (k.b ? " blocked" : "");
      expect_schedule_matches(body, s, what + " naive");
      ++naive;
      int seen = 0;
      for (size_t i = 0; i < sp.sketches.size(); ++i) {
        if (sp.sketches[i].winograd != m || seen++ % 4) continue;
        KernelSchedule p = sp.sketch(i);
        EXPECT_EQ(p.winograd, m);
        expect_schedule_matches(body, p, what + " steps");
        ++lists;
        nchw_tails += !k.b && std::any_of(p.steps.begin(), p.steps.end(), [](const Step &st) { return st.loop == "ti_tail"; });
        // NCHW with the channels as the vector: M stored a channel at a time, the tiles as the vector.
        nchw_lanes += !k.b && std::any_of(p.steps.begin(), p.steps.end(), [](const Step &st) { return st.op == "vectorize" && st.loop == "tp_2"; });
        // NCHW's phase-split padded copy: its columns (px * m + pf - pad) partitioned into borders and a plain inside.
        nchw_parts += !k.b && k.pad && std::any_of(p.steps.begin(), p.steps.end(), [](const Step &st) { return st.op == "partition" && st.stage == "pad" && st.loop == "px"; });
      }
    }
  }
  std::printf("%d naive Winograd nests and %d Winograd step lists (NCHW: %d with a remainder of tiles as the vector, %d with channel lanes, %d with the copy's columns partitioned) checked\n",
              naive, lists, nchw_tails, nchw_lanes, nchw_parts);
  EXPECT_EQ(naive, 12);
  EXPECT_GE(lists, 80);
  EXPECT_GE(nchw_tails, 5);
  EXPECT_GE(nchw_lanes, 10);
  EXPECT_GE(nchw_parts, 5);
}

TEST(Schedule, DefaultNchwcWinogradIsTheSketchsStepList) {
  // A 3x3 stride-1 conv in NCHW16c defaults to Winograd as steps on its naive nests (F(4x4) at
  // 28x28, F(2x2) at 7x7), the transformed weight re-blocked by the register tile; without the
  // steps its knobs (the template's default) are lowered as the sketch's list for them, the
  // padded input at root. Both run against the reference.
  for (int64_t size : {28, 7}) {
    auto act = [](int64_t c, int64_t h) { return "Tensor[" + shape_str({1, c / 16, h, h, 16}) + ", float32]"; };
    auto g = conv_add_relu_group("nn.conv2d_nchwc", act(64, size), "Tensor[(64, 64, 3, 3), float32]", "Tensor[(64), float32]", act(64, size), 1, 1);
    for_each_isa_default(g, std::to_string(size) + "x" + std::to_string(size), [&](const std::string &what, const Target &t, const Graph &body, const KernelSchedule &d) {
      EXPECT_EQ(d.winograd, size >= 28 ? 4 : 2) << what;
      ASSERT_FALSE(d.steps.empty()) << what;
      EXPECT_TRUE(std::any_of(d.steps.begin(), d.steps.end(), [](const Step &st) { return st.op == "pack" && st.stage == "wino_gemm"; })) << what;
      auto k = lower_group(body, "k", d);
      ASSERT_TRUE(static_cast<bool>(k)) << k.error().message;
      std::vector<std::string> stages;
      for (const KernelStage &st : k->stages) stages.push_back(st.name);
      EXPECT_EQ(stages, (std::vector<std::string>{"wino_in", "wino_gemm", "wino_out"})) << what << ": the padded input is recomputed at its reads";
      if (!t.runnable_here()) return;
      expect_schedule_matches(body, d, what + " default", 1e-5, t);
      KernelSchedule plain = d;
      plain.steps.clear();
      expect_schedule_matches(body, plain, what + " knobs", 1e-5, t);
    });
  }
}

TEST(ScheduleSpace, NchwConvsWithTheirPaddingInTheTilesMatchTheReference) {
  // pad_at_root off with the pixel epilogue: the knobs stand for the tile sketch's row tiles
  // (row_tile_sketch), register tiles along output rows reading the NCHW input in place, the
  // padding recomputed, the edge tiles cut from the inside ones (their edge pixels after the
  // inside ones), the kernel rows trimmed to the input; rows of one tile, edge tiles only, a loop
  // between them and a narrower last tile, strides 1 and 2, a residual add, under each parallel
  // split, on each ISA this host runs.
  int checked = 0;
  for (int stride : {1, 2}) {
    int oh = (11 + 2 - 3) / stride + 1;
    std::string x = "Tensor[(1, 16, 11, 11), float32]", y = "Tensor[(1, 32, " + std::to_string(oh) + ", " + std::to_string(oh) + "), float32]";
    std::string w = "Tensor[(32, 16, 3, 3), float32]", bias = "Tensor[(32), float32]";
    auto g = conv_add_relu_group("nn.conv2d", x, w, bias, y, stride, 1);
    ASSERT_TRUE(static_cast<bool>(g)) << g.error().message;
    const Graph &body = *g->nodes[0].body;
    for (const char *isa : {"avx2", "avx512"}) {
      auto t = resolve_target(isa);
      ASSERT_TRUE(static_cast<bool>(t)) << t.error().message;
      if (!t->runnable_here()) continue;
      for (int px : {2, 3, 5, 11, 16})
        for (auto par : {KernelSchedule::Parallel::kOc, KernelSchedule::Parallel::kPx, KernelSchedule::Parallel::kOcPx}) {
          KernelSchedule s = default_schedule(body, *t);
          s.steps.clear();  // the knobs, not the steps the default's stand for
          s.winograd = 0, s.pixel_vectors = false, s.ic_block = 0;
          s.pad_at_root = false, s.pixel_epilogue = true, s.px_block = px, s.parallel = par;
          s.oc_block = 2 * t->lanes, s.vector_width = t->lanes;
          ASSERT_TRUE(static_cast<bool>(validate_schedule(body, s))) << validate_schedule(body, s).error().message;
          ASSERT_TRUE(rows_eligible(body.nodes[0], s));
          auto k = lower_group(body, "k", s);
          ASSERT_TRUE(static_cast<bool>(k)) << k.error().message;
          EXPECT_NE(k->schedule.find("trim k1"), std::string::npos) << k->schedule;
          EXPECT_EQ(k->stages.size(), 1u);  // no copy stage
          // The kernel the sketch made while reading loop names off its nest is its steps' replay.
          auto naive = lower_naive(body, "k", s);
          auto steps = steps_of_knobs(body, s);
          ASSERT_TRUE(naive && steps);
          auto again = replay(*naive, *steps);
          ASSERT_TRUE(static_cast<bool>(again)) << again.error().message;
          EXPECT_EQ(again->identity(), k->identity());
          expect_schedule_matches(body, s, std::string(isa) + " nchw row tiles", 1e-5, *t);
          ++checked;
        }
    }
  }
  EXPECT_GE(checked, 30);
  // A stem (7x7, stride 2, padding 3, on 3 channels): the first tile's two left-edge pixels run
  // after its six inside ones.
  auto g = conv_add_relu_group("nn.conv2d", "Tensor[(1, 3, 64, 64), float32]", "Tensor[(32, 3, 7, 7), float32]", "Tensor[(32), float32]",
                               "Tensor[(1, 32, 32, 32), float32]", 2, 3);
  ASSERT_TRUE(static_cast<bool>(g)) << g.error().message;
  const Graph &stem = *g->nodes[0].body;
  KernelSchedule s = default_schedule(stem);
  s.steps.clear();
  s.winograd = 0, s.pixel_vectors = false, s.ic_block = 0, s.pad_at_root = false, s.pixel_epilogue = true, s.px_block = 8;
  ASSERT_TRUE(rows_eligible(stem.nodes[0], s));
  auto k = lower_group(stem, "k", s);
  ASSERT_TRUE(static_cast<bool>(k)) << k.error().message;
  EXPECT_NE(k->schedule.find("partition xp_1_xob0; sink xp_1_xob0_b0"), std::string::npos) << k->schedule;
  std::string ir = k->to_string();
  EXPECT_LT(ir.find("unrolled (xp_1_xob0, 0, 6)"), ir.find("unrolled (xp_1_xob0_b0, 0, 2)")) << ir;
  expect_schedule_matches(stem, s, "stem row tiles");
}

TEST(ScheduleSpace, StemPatchesOnPixelVectorsMatchTheReference) {
  // A stem's patches (im2col) on pixel vectors, stored (a stage of their own) or computed per block
  // of output rows into a local box: 3x3 stride 2 padded (MobileNetV2's), 7x7 stride 2 padding 3
  // (ResNet's), 3x3 stride 1 without padding (no copy stage first), 5x5 stride 3 on two images;
  // pixel counts with a tail, channel blocks of 1, 3 and 8, 1-3 vectors, every width and parallel
  // axis; each with a residual add and a relu. A stem's space holds them; a conv with 8 input
  // channels or more does not.
  struct Case {
    int64_t n, c, o, h, w, k, stride, pad;
  };
  int checked = 0;
  for (Case cs : {Case{1, 3, 24, 17, 19, 3, 2, 1}, Case{1, 3, 8, 15, 13, 7, 2, 3}, Case{1, 2, 6, 9, 10, 3, 1, 0}, Case{2, 4, 3, 16, 14, 5, 3, 2}}) {
    auto ty = [](std::vector<int64_t> v) { return "Tensor[" + shape_str(v) + ", float32]"; };
    int64_t oh = (cs.h + 2 * cs.pad - cs.k) / cs.stride + 1, ow = (cs.w + 2 * cs.pad - cs.k) / cs.stride + 1;
    std::string y = ty({cs.n, cs.o, oh, ow});
    auto g = conv_add_relu_group("nn.conv2d", ty({cs.n, cs.c, cs.h, cs.w}), ty({cs.o, cs.c, cs.k, cs.k}), ty({cs.o}), y, static_cast<int>(cs.stride),
                                 static_cast<int>(cs.pad));
    ASSERT_TRUE(static_cast<bool>(g)) << g.error().message;
    const Graph &body = *g->nodes[0].body;
    ASSERT_TRUE(patches_eligible(body, body.nodes[0])) << y;
    EXPECT_EQ(ScheduleSpace::of(body).pixel_vectors.size(), 2u) << y;
    for (int ob : {1, 3, 8})
      for (int pv : {1, 2, 3})
        for (int v : {4, 8, 16})
          for (auto par : {KernelSchedule::Parallel::kOc, KernelSchedule::Parallel::kPx, KernelSchedule::Parallel::kOcPx})
            for (bool stored : {true, false}) {
              if (cs.o % ob || pv * v > oh * ow) continue;
              KernelSchedule s = default_schedule(body);
              s.steps.clear();  // the knobs, not the steps the default's stand for
              s.pixel_vectors = true, s.oc_block = ob, s.px_block = pv, s.vector_width = v, s.parallel = par, s.pad_at_root = stored;
              s.winograd = 0, s.ic_block = 0, s.pixel_epilogue = false, s.unroll_kx = false;
              ASSERT_TRUE(ScheduleSpace::legalize(s));
              ASSERT_TRUE(static_cast<bool>(validate_schedule(body, s))) << validate_schedule(body, s).error().message;
              auto k = lower_group(body, "k", s);
              ASSERT_TRUE(static_cast<bool>(k)) << k.error().message;
              std::string stages;
              for (const KernelStage &st : k->stages) stages += st.name + " ";
              bool box = k->to_string().find("allocate patches_at_yo[") != std::string::npos;
              if (stored) {
                EXPECT_EQ(stages.rfind(cs.pad ? "pad patches conv2d" : "patches conv2d", 0), 0u) << y << ": " << stages;
              } else {
                EXPECT_EQ(stages, cs.pad ? "pad conv2d " : "conv2d ") << y;
                EXPECT_TRUE(box) << y << ": no box of patches";
              }
              expect_schedule_matches(body, s, "stem patches " + y);
              ++checked;
            }
  }
  EXPECT_EQ(checked, 462);
  // Eight input channels are no stem: its space has no pixel vectors, and validation says why.
  auto g = conv_add_relu_group("nn.conv2d", "Tensor[(1, 8, 8, 8), float32]", "Tensor[(8, 8, 3, 3), float32]", "Tensor[(8), float32]",
                               "Tensor[(1, 8, 8, 8), float32]", 1, 1);
  ASSERT_TRUE(static_cast<bool>(g)) << g.error().message;
  const Graph &wide = *g->nodes[0].body;
  EXPECT_FALSE(patches_eligible(wide, wide.nodes[0]));
  EXPECT_EQ(ScheduleSpace::of(wide).pixel_vectors.size(), 1u);
  KernelSchedule s = default_schedule(wide);
  s.steps.clear(), s.pixel_vectors = true;
  EXPECT_FALSE(static_cast<bool>(validate_schedule(wide, s)));
}

TEST(Schedule, DefaultStemTakesItsPatchesPerRowWhereItsWindowIsShort) {
  // MobileNetV2's stem (3x3 stride 2 on 3 channels: 27 values a window) takes its patches on pixel
  // vectors, computed per block of output rows (never stored), on AVX2 and AVX-512; ResNet's 7x7
  // stem (147 values) takes two channel vectors by 6 pixels (by 4 on AVX2's 16 registers) with its
  // window's columns unrolled and threads over channels and pixels.
  auto stem = [](int k) {
    int p = k / 2;
    return conv_add_relu_group("nn.conv2d", "Tensor[(1, 3, 224, 224), float32]", "Tensor[(32, 3, " + std::to_string(k) + ", " + std::to_string(k) + "), float32]",
                               "Tensor[(32), float32]", "Tensor[(1, 32, 112, 112), float32]", 2, p);
  };
  for (const char *isa : {"avx2", "avx512"})
    for (int k : {3, 7}) {
      auto t = resolve_target(isa);
      ASSERT_TRUE(static_cast<bool>(t)) << t.error().message;
      auto g = stem(k);
      ASSERT_TRUE(static_cast<bool>(g)) << g.error().message;
      const Graph &body = *g->nodes[0].body;
      KernelSchedule s = default_schedule(body, *t);
      EXPECT_EQ(s.pixel_vectors, k == 3) << isa << " " << k << "x" << k << ": " << s.to_string();
      if (k == 7) {
        EXPECT_EQ(s.px_block, t->vector_registers >= 32 ? 6 : 4) << isa << ": " << s.to_string();
        EXPECT_EQ(s.oc_block, 2 * t->lanes) << isa << ": " << s.to_string();
        EXPECT_TRUE(s.unroll_kx && s.parallel == KernelSchedule::Parallel::kOcPx) << isa << ": " << s.to_string();
        EXPECT_FALSE(s.pad_at_root) << isa;
        if (t->runnable_here()) expect_schedule_matches(body, s, std::string(isa) + " 7x7 stem", 1e-5, *t, 2);
        continue;
      }
      EXPECT_FALSE(s.pad_at_root);
      auto kernel = lower_group(body, "k", s);
      ASSERT_TRUE(static_cast<bool>(kernel)) << kernel.error().message;
      EXPECT_NE(kernel->schedule.find("compute_at yo"), std::string::npos) << kernel->schedule;
    }
}

TEST(Schedule, Conv2dNchwcRefusesWhatItsTemplateCannotDo) {
  auto g = parse_text(R"(def @main(%x: Tensor[(1, 2, 6, 6, 16), float32], %w: Tensor[(32, 32, 3, 3), float32]) -> Tensor[(1, 2, 6, 6, 16), float32] {
    %0 = fn (%p0: Tensor[(1, 2, 6, 6, 16), float32], %p1: Tensor[(32, 32, 3, 3), float32]) -> Tensor[(1, 2, 6, 6, 16), float32] {
      %0 = nn.conv2d_nchwc(%p0, %p1, padding=[1, 1, 1, 1]);
      return %0;
    }(%x, %w);
    return %0;
  })");
  ASSERT_TRUE(static_cast<bool>(g)) << g.error().message;
  const Graph &body = *g->nodes[0].body;
  KernelSchedule s = default_schedule(body);
  ASSERT_TRUE(static_cast<bool>(validate_schedule(body, s))) << validate_schedule(body, s).error().message;
  s.steps.clear(), s.winograd = 0;  // the direct template's knobs (the default is Winograd's step list)
  auto refused = [&](KernelSchedule bad, const std::string &why) {
    Status st = validate_schedule(body, bad);
    ASSERT_FALSE(static_cast<bool>(st)) << why;
    EXPECT_NE(st.error().message.find(why), std::string::npos) << st.error().message;
  };
  KernelSchedule b = s;
  b.oc_block = 8, b.vector_width = 8;
  refused(b, "multiple of its channel block 16");
  b = s, b.pad_at_root = false, b.ic_block = 32;
  refused(b, "no reduction tiles");
  b = s, b.pixel_epilogue = true;
  refused(b, "pixel_epilogue");
  // Its naive nest (for step lists): the padded copy and the conv with blocked loops, the
  // channel lanes i4 and k3 innermost in the output and the reduction.
  auto naive = lower_naive(body, "naive", s);
  ASSERT_TRUE(static_cast<bool>(naive)) << naive.error().message;
  ASSERT_EQ(naive->stages.size(), 2u);
  std::vector<std::pair<std::string, int64_t>> loops;
  loops_of(naive->stages[1].body, loops);
  std::string names;
  for (const auto &[l, ex] : loops) names += l + ":" + std::to_string(ex) + " ";
  EXPECT_EQ(names, "i0:1 i1:2 i2:6 i3:6 i4:16 k0:2 k1:3 k2:3 k3:16 ");
}

}  // namespace
}  // namespace autotune
