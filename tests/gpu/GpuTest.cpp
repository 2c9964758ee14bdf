// The GPU path without a GPU (issue 13): every group of the generated ResNets and MobileNetV2
// lowered under the GPU schedule and compiled to PTX for sm_80 and sm_90, each assembled by
// ptxas where it is installed; and the same GPU-scheduled kernels run on the CPU (blocks the
// parallel loop, threads a serial loop inside) against the reference executor, so their results
// are checked, not only their syntax.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <fstream>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include <unistd.h>

#include "codegen/Gpu.h"
#include "codegen/Jit.h"
#include "codegen/LLVMEmitter.h"
#include "codegen/Lower.h"
#include "search/Task.h"
#include "codegen/Target.h"
#include "costmodel/GpuFeatures.h"
#include "db/TuningDb.h"
#include "db/Workload.h"
#include "ir/OnnxImport.h"
#include "ir/Pass.h"
#include "ir/Reference.h"
#include "runtime/BoundKernel.h"
#include "runtime/Cuda.h"
#include "runtime/ThreadPool.h"
#include "search/GpuTuner.h"

namespace autotune {
namespace {

Graph fused_model(const std::string &name) {
  auto g = import_onnx_file(std::string(AUTOTUNE_MODELS_DIR) + "/" + name + ".onnx");
  EXPECT_TRUE(static_cast<bool>(g)) << g.error().message;
  auto f = lower_to_stage(*g, Stage::kFused, PassContext{});
  EXPECT_TRUE(static_cast<bool>(f)) << f.error().message;
  return f.take();
}

/** A GPU-scheduled kernel of `body` serialized on the CPU (serialize_threads) and run on seeded data: its error against the reference executor. */
double run_serialized(const Graph &body, const LoweredKernel &k, Jit &jit, ThreadPool &pool, uint64_t seed) {
  auto cpu = serialize_threads(k);
  EXPECT_TRUE(static_cast<bool>(cpu)) << cpu.error().message;
  if (!cpu) return 1e30;
  auto ck = jit.compile(*cpu);
  EXPECT_TRUE(static_cast<bool>(ck)) << ck.error().message;
  if (!ck) return 1e30;
  std::vector<Tensor> args = random_inputs(body, seed);
  auto want = run_reference(body, args);
  EXPECT_TRUE(static_cast<bool>(want)) << want.error().message;
  if (!want) return 1e30;
  BoundKernel bound(*cpu, *ck, args, Tensor((*want)[0].type()));
  bound.run(pool);
  auto d = compare(bound.output(), (*want)[0]);
  return d ? d->relative() : 1e30;
}

/**
 * Calls fn(model, group index, group body) for every float group of `models` (integer groups run
 * on the reference executor), traced by model and group.
 */
void for_each_float_group(std::initializer_list<const char *> models, const std::function<void(const std::string &, size_t, const Graph &)> &fn) {
  for (const char *model : models) {
    Graph g = fused_model(model);
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      if (!g.nodes[i].is_function()) continue;
      const Graph &body = *g.nodes[i].body;
      if (body.type_of(body.outputs[0]).dtype != DType::kFloat32) continue;
      SCOPED_TRACE(std::string(model) + " group %" + std::to_string(i));
      fn(model, i, body);
    }
  }
}

/** Calls fn(model, group index, group body, stage) for every stage of the naive nests of every float group of `models`. */
void for_each_naive_stage(std::initializer_list<const char *> models,
                          const std::function<void(const std::string &, size_t, const Graph &, const KernelStage &)> &fn) {
  for_each_float_group(models, [&](const std::string &model, size_t i, const Graph &body) {
    auto naive = lower_naive(body, "n", KernelSchedule{});
    ASSERT_TRUE(static_cast<bool>(naive)) << naive.error().message;
    for (const KernelStage &st : naive->stages) fn(model, i, body, st);
  });
}

/** Where ptxas is installed: it accepts `k`'s PTX for `gpu`. */
void expect_ptxas_accepts(const LoweredKernel &k, const GpuTarget &gpu, const std::string &ptxas) {
  auto p = emit_ptx(k, gpu);
  ASSERT_TRUE(static_cast<bool>(p)) << p.error().message;
  if (ptxas.empty()) return;
  auto ok = ptxas_check(p->ptx, gpu, ptxas);
  EXPECT_TRUE(static_cast<bool>(ok)) << ok.error().message;
}

TEST(Gpu, TargetsResolveAndCpuCommandsRefuseThem) {
  auto sm90 = resolve_gpu_target("sm_90");
  ASSERT_TRUE(static_cast<bool>(sm90)) << sm90.error().message;
  EXPECT_EQ(sm90->sm, "sm_90");
  EXPECT_EQ(sm90->sm_count, 132);
  EXPECT_EQ(sm90->warp_size, 32);
  EXPECT_EQ(sm90->threads_per_block % sm90->warp_size, 0);
  EXPECT_TRUE(is_gpu_target("sm_80"));
  EXPECT_FALSE(is_gpu_target("avx2"));
  auto cpu = resolve_target("sm_80");
  ASSERT_FALSE(static_cast<bool>(cpu));
  EXPECT_NE(cpu.error().message.find("is a GPU"), std::string::npos) << cpu.error().message;
  EXPECT_NE(resolve_gpu_target("avx512").error().message.find("not a GPU description"), std::string::npos);
  EXPECT_NE(resolve_gpu_target("sm_99").error().message.find("unknown GPU target 'sm_99' (sm_80, sm_90"), std::string::npos)
      << resolve_gpu_target("sm_99").error().message;
  std::string path = (std::filesystem::temp_directory_path() / "autotune_gpu_bad.json").string();
  std::ofstream(path) << R"({"kind": "gpu", "sm": "sm_80", "ptx": "ptx78", "threads_per_block": 100})";
  EXPECT_NE(resolve_gpu_target(path).error().message.find("threads_per_block must be a multiple of the warp size"), std::string::npos);
  std::filesystem::remove(path);
}

TEST(Gpu, EveryGroupOfTheResNetsAndMobileNetV2IsPtxThatPtxasAccepts) {
  std::string ptxas = find_ptxas();
  int groups = 0, assembled = 0;
  for (const char *arch : {"sm_80", "sm_90"}) {
    auto gpu = resolve_gpu_target(arch);
    ASSERT_TRUE(static_cast<bool>(gpu));
    for (const char *model : {"resnet18", "resnet50", "mobilenet_v2"}) {
      Graph g = fused_model(model);
      for (size_t i = 0; i < g.nodes.size(); ++i) {
        if (!g.nodes[i].is_function()) continue;
        SCOPED_TRACE(std::string(model) + " group %" + std::to_string(i) + " for " + arch);
        auto k = lower_gpu(*g.nodes[i].body, "k" + std::to_string(i), *gpu);
        ASSERT_TRUE(static_cast<bool>(k)) << k.error().message;
        auto p = emit_ptx(*k, *gpu);
        ASSERT_TRUE(static_cast<bool>(p)) << p.error().message;
        EXPECT_NE(p->ptx.find(std::string(".target ") + arch), std::string::npos);
        ASSERT_EQ(p->launches.size(), k->stages.size());
        for (const GpuLaunch &l : p->launches) {
          EXPECT_NE(p->ptx.find(".entry " + l.entry + "("), std::string::npos) << l.entry;
          EXPECT_GE(l.blocks, 1);
          EXPECT_TRUE(l.threads >= 1 && l.threads <= gpu->threads_per_block && l.threads % gpu->warp_size == 0) << l.threads;
        }
        ++groups;
        if (ptxas.empty()) continue;
        auto st = ptxas_check(p->ptx, *gpu, ptxas);
        EXPECT_TRUE(static_cast<bool>(st)) << st.error().message;
        assembled += static_cast<bool>(st);
      }
    }
  }
  std::printf("%d groups compiled to PTX, %d assembled by ptxas (%s)\n", groups, assembled, ptxas.empty() ? "not found" : ptxas.c_str());
  EXPECT_GE(groups, 2 * (25 + 58 + 56));
  if (ptxas.empty()) GTEST_SKIP() << "the PTX was generated but not assembled: no ptxas ($AUTOTUNE_PTXAS, PATH, /usr/local/cuda/bin)";
  EXPECT_EQ(assembled, groups);
}

TEST(Gpu, PtxIsCachedOnDiskAndADamagedEntryIsRebuilt) {
  namespace fs = std::filesystem;
  std::string dir = (fs::temp_directory_path() / ("autotune_ptx_cache_" + std::to_string(getpid()))).string();
  fs::remove_all(dir);
  auto gpu = resolve_gpu_target("sm_80");
  ASSERT_TRUE(static_cast<bool>(gpu));
  Graph g = fused_model("tiny_cnn");
  const Graph *body = nullptr;
  for (const Node &n : g.nodes)
    if (n.is_function() && !body) body = n.body.get();
  ASSERT_NE(body, nullptr);
  auto k = lower_gpu(*body, "cached", *gpu);
  ASSERT_TRUE(static_cast<bool>(k));
  auto first = emit_ptx(*k, *gpu, dir), second = emit_ptx(*k, *gpu, dir);
  ASSERT_TRUE(first && second);
  EXPECT_FALSE(first->from_cache);
  EXPECT_TRUE(second->from_cache);
  EXPECT_EQ(first->ptx, second->ptx);
  // One byte changed in the entry: the seal fails, the PTX is built again and the entry rewritten.
  std::vector<fs::path> entries;
  for (const auto &e : fs::directory_iterator(dir)) entries.push_back(e.path());
  ASSERT_EQ(entries.size(), 1u);
  std::string text;
  {
    std::ifstream in(entries[0]);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  text[text.size() / 2] ^= 1;
  std::ofstream(entries[0]) << text;
  auto third = emit_ptx(*k, *gpu, dir), fourth = emit_ptx(*k, *gpu, dir);
  ASSERT_TRUE(third && fourth);
  EXPECT_FALSE(third->from_cache);
  EXPECT_EQ(third->ptx, first->ptx);
  EXPECT_TRUE(fourth->from_cache);
  fs::remove_all(dir);
}

TEST(Gpu, PtxasRefusalsAreReported) {
  std::string ptxas = find_ptxas();
  if (ptxas.empty()) GTEST_SKIP() << "no ptxas ($AUTOTUNE_PTXAS, PATH, /usr/local/cuda/bin)";
  auto gpu = resolve_gpu_target("sm_80");
  ASSERT_TRUE(static_cast<bool>(gpu));
  auto st = ptxas_check(".version 7.8\n.target sm_80\n.address_size 64\n.visible .entry broken( { bogus.instruction; }\n", *gpu, ptxas);
  ASSERT_FALSE(static_cast<bool>(st));
  EXPECT_EQ(st.error().message.rfind("ptxas -arch=sm_80 refused the PTX: ", 0), 0u) << st.error().message;
}

/** What the tests that run GPU kernels serialized on the CPU share: a GPU description, the CPU JIT, a pool, ptxas (or ""). */
struct CpuCheck {
  Expected<GpuTarget> gpu;
  decltype(Jit::create({""})) jit;
  ThreadPool pool{2};
  std::string ptxas;
  explicit CpuCheck(const char *sm) : gpu(resolve_gpu_target(sm)), jit(Jit::create({""})), ptxas(find_ptxas()) {}
};

TEST(Gpu, GpuScheduledKernelsRunSerializedOnTheCpuAndMatchTheReference) {
  // Every group of the small models, the transformer pieces, the ResNets and MobileNetV2, as blocks x threads
  // with a guard on the last block; 224 threads per block, so that blocks rarely divide the work.
  CpuCheck check("sm_80");
  auto &[gpu, jit, pool, ptxas] = check;
  ASSERT_TRUE(gpu && jit);
  gpu->threads_per_block = 224;
  int checked = 0, guarded = 0, tiled = 0, packed = 0;
  for_each_float_group({"tiny_cnn", "mlp", "shape_ops", "transformer", "vit_tiny", "modern_cnn", "resnet18", "resnet50", "mobilenet_v2"},
                     [&](const std::string &, size_t i, const Graph &body) {
    auto k = lower_gpu(body, "g" + std::to_string(i), *gpu);
    ASSERT_TRUE(static_cast<bool>(k)) << k.error().message;
    for (const KernelStage &st : k->stages) {
      EXPECT_EQ(st.parallel_var, "gpu_block");
      std::string text = loop::to_string(st.body);
      guarded += text.find("if (") != std::string::npos;
      tiled += text.find("barrier") != std::string::npos;
    }
    EXPECT_LE(run_serialized(body, *k, **jit, pool, 17 + i), 1e-5) << k->to_string().substr(0, 2000);
    packed += !k->packings.empty();
    ++checked;
  });
  std::printf("%d GPU-scheduled groups matched the reference on the CPU, %d stages with a guarded last block, %d tiled, %d with packed weights\n",
              checked, guarded, tiled, packed);
  EXPECT_GE(checked, 60);
  EXPECT_GT(guarded, 10);
  EXPECT_GT(tiled, 30);  // the convs, dense layers and matmuls
  EXPECT_GT(packed, 30);  // their weights, where they are arguments
}

TEST(Gpu, AlignedContiguousAccessesAreVectorLoadsAndStores) {
  // An elementwise stage with a multiple of 4 outputs stores 4 consecutive outputs per thread, and
  // what it reads in the output's order is one aligned 16-byte load; a tiled GEMM's cooperative
  // loads take 4 consecutive elements per thread where an operand is read contiguously from an
  // aligned index (a 1x1 conv's input, a packed weight). The PTX says so (ld/st.global.v4.f32),
  // ptxas accepts it, and serialized on the CPU it matches the reference.
  CpuCheck check("sm_90");
  auto &[gpu, jit, pool, ptxas] = check;
  ASSERT_TRUE(gpu && jit);
  int elementwise = 0, tiled = 0, vector_loads = 0, tiled_vector_loads = 0;
  auto count = [](const std::string &text, const std::string &what) {
    int n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  for_each_float_group({"resnet18", "resnet50", "mobilenet_v2", "transformer", "shape_ops", "modern_cnn", "mlp"}, [&](const std::string &, size_t i,
                                                                                                                    const Graph &body) {
    auto k = lower_gpu(body, "g" + std::to_string(i), *gpu);
    ASSERT_TRUE(static_cast<bool>(k)) << k.error().message;
    // Each stage's PTX entry: the elementwise ones with 4 outputs a thread, the tiled ones whose cooperative loads take 4.
    auto p = emit_ptx(*k, *gpu);
    ASSERT_TRUE(static_cast<bool>(p)) << p.error().message;
    bool vectored = false;
    for (size_t si = 0; si < k->stages.size(); ++si) {
      std::string text = loop::to_string(k->stages[si].body);
      if (text.find("gpu_lane") == std::string::npos) continue;
      vectored = true;
      size_t from = p->ptx.find(".entry " + stage_symbol(*k, si)), to = p->ptx.find(".entry ", from + 1);
      ASSERT_NE(from, std::string::npos) << stage_symbol(*k, si);
      std::string entry = p->ptx.substr(from, to == std::string::npos ? std::string::npos : to - from);
      int loads = count(entry, "ld.global.nc.v4.f32") + count(entry, "ld.global.v4.f32");
      if (text.find("shared_a") != std::string::npos || text.find("shared_b") != std::string::npos) {
        ++tiled, tiled_vector_loads += loads;
        EXPECT_GE(loads, 1) << "a cooperative load of 4 aligned, contiguous elements\n" << text.substr(0, 3000);
      } else {
        ++elementwise, vector_loads += loads;
        EXPECT_EQ(text.find("barrier"), std::string::npos);
        EXPECT_GE(count(entry, "st.global.v4.f32"), 1) << "4 consecutive outputs from an aligned start\n" << text.substr(0, 3000);
      }
    }
    if (!vectored) return;
    if (!ptxas.empty()) {
      auto ok = ptxas_check(p->ptx, *gpu, ptxas);
      EXPECT_TRUE(static_cast<bool>(ok)) << ok.error().message;
    }
    EXPECT_LE(run_serialized(body, *k, **jit, pool, 31 + i), 1e-5) << k->to_string().substr(0, 2000);
  });
  std::printf("%d elementwise stages with 4 outputs per thread (%d vector loads in their PTX), %d tiled stages with %d vector loads\n",
              elementwise, vector_loads, tiled, tiled_vector_loads);
  EXPECT_GE(elementwise, 10);
  EXPECT_GE(vector_loads, 5);
  EXPECT_GE(tiled, 20);  // the 1x1 convs and dense layers
}

TEST(Gpu, StencilReductionsRunInHaloTilesFromSharedMemory) {
  // Depthwise convs and pools: a block's input window loaded once into shared memory, each thread's
  // window read from there. Serialized on the CPU they match the reference, ptxas accepts them, and
  // the features count fewer global sectors than one output per thread reading its own window.
  CpuCheck check("sm_90");
  auto &[gpu, jit, pool, ptxas] = check;
  ASSERT_TRUE(gpu && jit);
  int halo = 0, fewer = 0;
  double sectors_halo = 0, sectors_plain = 0;
  const auto &names = gpu_feature_names();
  const size_t sectors_at = static_cast<size_t>(std::find(names.begin(), names.end(), "global_sectors") - names.begin());
  for_each_float_group({"mobilenet_v2", "efficientnet_b0", "resnet18", "tiny_cnn", "modern_cnn"}, [&](const std::string &, size_t i, const Graph &body) {
    auto k = lower_gpu(body, "g" + std::to_string(i), *gpu);
    ASSERT_TRUE(static_cast<bool>(k)) << k.error().message;
    if (k->schedule.find("in halo tiles") == std::string::npos) return;
    ++halo;
    GpuSchedule plain;
    plain.halo_tiles = false;
    auto k0 = lower_gpu(body, "g" + std::to_string(i), *gpu, plain);
    ASSERT_TRUE(static_cast<bool>(k0)) << k0.error().message;
    EXPECT_EQ(k0->schedule.find("in halo tiles"), std::string::npos);
    double a = gpu_kernel_features(*k, *gpu)[sectors_at], b = gpu_kernel_features(*k0, *gpu)[sectors_at];
    sectors_halo += a, sectors_plain += b, fewer += a < b;
    expect_ptxas_accepts(*k, *gpu, ptxas);
    EXPECT_LE(run_serialized(body, *k, **jit, pool, 41 + i), 1e-5) << k->to_string().substr(0, 3000);
  });
  std::printf("%d stencil groups in halo tiles, %d with fewer global sectors than one output per thread (%.0f against %.0f in all)\n", halo,
              fewer, sectors_halo, sectors_plain);
  // The stride-1 depthwise convs MobileNetV2 and EfficientNet-B0 keep in NCHW (at 56x56,
  // EfficientNet's at 28x28 too: the others are NCHW16c, whose depthwise convs take no halo tile
  // yet), the pools.
  EXPECT_GE(halo, 5);
  EXPECT_GE(fewer, halo * 3 / 4);
}

TEST(Gpu, SampledTilesRunSerializedOnTheCpuAndMatchTheReference) {
  // Tiles from each GEMM stage's space (seeded), edges and k chunks that do not divide included, as PTX (ptxas
  // where installed) and serialized on the CPU against the reference.
  CpuCheck check("sm_90");
  auto &[gpu, jit, pool, ptxas] = check;
  ASSERT_TRUE(gpu && jit);
  std::mt19937 rng(7);
  int checked = 0, edges = 0, spilled = 0;
  for_each_naive_stage({"mlp", "transformer", "tiny_cnn", "resnet18"}, [&](const std::string &model, size_t i, const Graph &body, const KernelStage &st) {
    auto shape = gemm_shape(st);
    if (!shape || shape->m < 16 || shape->n < 16) return;
    auto space = gpu_tile_space(*shape, *gpu);
    ASSERT_GT(space.size(), 20u);
    for (int draw = 0; draw < 2; ++draw) {
      GpuTile t = space[rng() % space.size()];
      SCOPED_TRACE(model + " group %" + std::to_string(i) + " tile " + t.to_json());
      auto k = lower_gpu(body, "t" + std::to_string(i), *gpu, GpuSchedule{t, std::nullopt});
      ASSERT_TRUE(static_cast<bool>(k)) << k.error().message;
      edges += shape->m % t.bm || shape->n % t.bn || shape->k % t.bk;
      EXPECT_LE(run_serialized(body, *k, **jit, pool, 3 + i), 1e-5);
      auto p = emit_ptx(*k, *gpu);
      ASSERT_TRUE(static_cast<bool>(p)) << p.error().message;
      EXPECT_NE(p->ptx.find("bar.sync"), std::string::npos);
      EXPECT_NE(p->ptx.find(".shared"), std::string::npos);
      if (!ptxas.empty()) {
        auto r = ptxas_resources(p->ptx, *gpu, ptxas);
        ASSERT_TRUE(static_cast<bool>(r)) << r.error().message;
        for (const PtxasEntry &e : *r) {
          size_t stage = std::find_if(p->launches.begin(), p->launches.end(), [&](const GpuLaunch &l) { return l.entry == e.entry; }) - p->launches.begin();
          ASSERT_LT(stage, k->stages.size()) << e.entry;
          EXPECT_EQ(e.shared_bytes, gpu_occupancy(k->stages[stage], *gpu).shared_bytes) << e.entry;
          spilled += e.spill_store_bytes > 0;
        }
      }
      ++checked;
    }
  });
  std::printf("%d sampled tiles matched the reference, %d with edges or k chunks that do not divide, %d spilling registers (ptxas)\n", checked,
              edges, spilled);
  EXPECT_GE(checked, 20);
  EXPECT_GT(edges, 5);
}

TEST(Gpu, RowReductionsRunSerializedOnTheCpuAndMatchTheReference) {
  // Every point of each long reduction's space (GEMVs, global pools, means): partials over strided
  // terms, halved in shared memory between barriers, as PTX through ptxas and serialized on the CPU.
  CpuCheck check("sm_80");
  auto &[gpu, jit, pool, ptxas] = check;
  ASSERT_TRUE(gpu && jit);
  int checked = 0;
  std::set<std::string> combines;
  for_each_naive_stage({"mlp", "resnet18", "mobilenet_v2", "transformer", "tiny_cnn"}, [&](const std::string &model, size_t i, const Graph &body, const KernelStage &st) {
    auto gemm = gemm_shape(st);
    auto rows = row_reduce_shape(st);
    if ((gemm && gemm->m >= 16 && gemm->n >= 16) || !rows || rows->k < 32) return;
    combines.insert(rows->combine);
    auto space = gpu_reduce_space(*rows, *gpu);
    ASSERT_FALSE(space.empty());
    for (const GpuReduce &r : space) {
      SCOPED_TRACE(model + " group %" + std::to_string(i) + " " + r.to_json() + " k " + std::to_string(rows->k));
      auto k = lower_gpu(body, "r" + std::to_string(i), *gpu, GpuSchedule{std::nullopt, r});
      ASSERT_TRUE(static_cast<bool>(k)) << k.error().message;
      ASSERT_NE(k->schedule.find("row-reduced " + r.to_json()), std::string::npos) << k->schedule;
      EXPECT_LE(run_serialized(body, *k, **jit, pool, 5 + i), 1e-5);
      expect_ptxas_accepts(*k, *gpu, ptxas);
      ++checked;
    }
  });
  // A max: tiny_cnn's 3x3 max pools (9 terms, so only when asked for), with most lanes idle.
  Graph tiny = fused_model("tiny_cnn");
  for (size_t i = 0; i < tiny.nodes.size(); ++i) {
    if (!tiny.nodes[i].is_function()) continue;
    const Graph &body = *tiny.nodes[i].body;
    auto naive = lower_naive(body, "n", KernelSchedule{});
    ASSERT_TRUE(static_cast<bool>(naive));
    auto rows = row_reduce_shape(naive->stages.back());
    if (!rows || rows->combine != "max") continue;
    combines.insert("max (asked for)");
    auto k = lower_gpu(body, "m" + std::to_string(i), *gpu, GpuSchedule{std::nullopt, GpuReduce{32, 128}});
    ASSERT_TRUE(static_cast<bool>(k)) << k.error().message;
    EXPECT_LE(run_serialized(body, *k, **jit, pool, 9 + i), 1e-6);
    ++checked;
  }
  std::printf("%d row reductions matched the reference (combines:", checked);
  for (const std::string &c : combines) std::printf(" %s", c.c_str());
  std::printf(")\n");
  EXPECT_GE(checked, 20);
  EXPECT_TRUE(combines.count("add"));
  EXPECT_TRUE(combines.count("max (asked for)"));
}

TEST(Gpu, SoftmaxAndLayerNormRunByRowsSerializedOnTheCpuAndMatchTheReference) {
  // Every point of each row program's space (softmax, LayerNorm: passes strided over a row's
  // lanes, combines halved in shared memory), serialized on the CPU and through ptxas.
  CpuCheck check("sm_90");
  auto &[gpu, jit, pool, ptxas] = check;
  ASSERT_TRUE(gpu && jit);
  std::map<std::string, int> checked;
  for_each_naive_stage({"transformer", "vit_tiny"}, [&](const std::string &model, size_t i, const Graph &body, const KernelStage &st) {
    auto rows = row_program_shape(st);
    if (!rows || row_reduce_shape(st) || gemm_shape(st)) return;
    for (const GpuReduce &r : gpu_reduce_space(RowReduceShape{rows->outputs, std::max<int64_t>(rows->k, 32), ""}, *gpu)) {
      SCOPED_TRACE(model + " group %" + std::to_string(i) + " " + st.name + " " + r.to_json() + " row " + std::to_string(rows->k));
      auto k = lower_gpu(body, "w" + std::to_string(i), *gpu, GpuSchedule{std::nullopt, r});
      ASSERT_TRUE(static_cast<bool>(k)) << k.error().message;
      ASSERT_NE(k->schedule.find("by rows " + r.to_json()), std::string::npos) << k->schedule;
      EXPECT_LE(run_serialized(body, *k, **jit, pool, 11 + i), 1e-5) << k->to_string().substr(0, 3000);
      expect_ptxas_accepts(*k, *gpu, ptxas);
      ++checked[st.name];
    }
  });
  for (const auto &[stage, n] : checked) std::printf("%d %s kernels by rows matched the reference\n", n, stage.c_str());
  EXPECT_GE(checked["softmax"], 6);
  EXPECT_GE(checked["layer_norm"], 6);
}

TEST(Gpu, SerializingRefusesABarrierThatNotEveryThreadReaches) {
  using namespace loop;
  Buffer out = make_buffer("out", Type::kF32, 64, BufferScope::kParam);
  auto kernel = [&](Stmt thread_body) {
    LoweredKernel k;
    k.name = "k";
    k.buffers = {out};
    k.stages.push_back({"s", "gpu_block", 1, for_loop("gpu_thread", int_imm(0), int_imm(64), ForKind::kSerial, thread_body)});
    return k;
  };
  Stmt st = store(out, var("gpu_thread"), float_imm(1));
  auto branch = serialize_threads(kernel(if_then(var("gpu_thread") < int_imm(32), seq({st, barrier()}))));
  ASSERT_FALSE(static_cast<bool>(branch));
  EXPECT_EQ(branch.error().message, "k stage s: a barrier under the condition (gpu_thread < 32), which differs between threads");
  auto bounds = serialize_threads(kernel(for_loop("j", int_imm(0), var("gpu_thread"), ForKind::kSerial, barrier())));
  ASSERT_FALSE(static_cast<bool>(bounds));
  EXPECT_EQ(bounds.error().message, "k stage s: a barrier inside loop j, whose bounds differ between threads");
  // Communication through shared memory: each thread writes its slot, and after the barrier reads its neighbour's.
  Buffer sh = make_buffer("sh", Type::kF32, 64, BufferScope::kShared);
  Stmt body = allocate(sh, seq({store(sh, var("gpu_thread"), cast(Type::kF32, var("gpu_thread"))), barrier(),
                                store(out, var("gpu_thread"), load(sh, (var("gpu_thread") + int_imm(1)) % int_imm(64)))}));
  auto k = serialize_threads(kernel(body));
  ASSERT_TRUE(static_cast<bool>(k)) << k.error().message;
  EXPECT_EQ(loop::to_string(k->stages[0].body).find("barrier"), std::string::npos);
  auto jit = Jit::create({""});
  ASSERT_TRUE(static_cast<bool>(jit));
  auto ck = (*jit)->compile(*k);
  ASSERT_TRUE(static_cast<bool>(ck)) << ck.error().message;
  ThreadPool pool(1);
  Tensor result(TensorType{DType::kFloat32, {64}});  // the kernel's one buffer: its output
  BoundKernel bound(*k, *ck, {}, result);
  bound.run(pool);
  for (int t = 0; t < 64; ++t) EXPECT_EQ(bound.output().f32()[t], static_cast<float>((t + 1) % 64)) << t;
}

TEST(Gpu, FeaturesCountOccupancySectorsAndFlops) {
  using namespace loop;
  // A warp's 32-byte sectors: contiguous floats, one broadcast float, a stride of 33 floats.
  EXPECT_EQ(warp_sectors(var("t"), "t", {}), std::make_pair(int64_t{4}, int64_t{128}));
  EXPECT_EQ(warp_sectors(var("b") * 7, "t", {{"b", 3}}), std::make_pair(int64_t{1}, int64_t{4}));
  EXPECT_EQ(warp_sectors(var("t") * 33, "t", {}), std::make_pair(int64_t{32}, int64_t{128}));
  // A vector of 4 consecutive floats per thread: the warp reads 512 contiguous bytes, 16 sectors.
  EXPECT_EQ(warp_sectors(var("t") * 4 + var("v"), "t", {}, "v", 4), std::make_pair(int64_t{16}, int64_t{512}));
  EXPECT_EQ(warp_sectors(var("t") * 4, "t", {}, "v", 4), std::make_pair(int64_t{16}, int64_t{128}));  // lanes that read one element
  // ResNet-18's first 3x3 conv at 56x56 (NCHW16c): m = 3136 pixels, n = 64 channels, k = 576.
  auto gpu = resolve_gpu_target("sm_80");
  ASSERT_TRUE(static_cast<bool>(gpu));
  Graph g = fused_model("resnet18");
  const Graph &body = *g.nodes[3].body;
  auto naive = lower_naive(body, "n", KernelSchedule{});
  ASSERT_TRUE(static_cast<bool>(naive));
  auto shape = gemm_shape(naive->stages.back());
  ASSERT_TRUE(static_cast<bool>(shape)) << shape.error().message;
  ASSERT_EQ(shape->m, 3136);
  ASSERT_EQ(shape->n, 64);
  ASSERT_EQ(shape->k, 576);
  EXPECT_FALSE(shape->m_contiguous);  // NCHW16c: the output's channels are contiguous
  // 64 x 64 tiles would be 49 blocks for sm_80's 108 SMs: the default halves them to 196.
  EXPECT_EQ(default_gpu_tile(*shape, *gpu).to_json(), R"({"bk":16,"bm":32,"bn":32,"m_fastest":false,"pack":true,"pad":true,"tm":2,"tn":2})");
  GpuTile t{64, 64, 16, 4, 4, false, true, true};
  auto k = lower_gpu(body, "k", *gpu, GpuSchedule{t, std::nullopt});
  ASSERT_TRUE(static_cast<bool>(k));
  // The OIHW weight packed in blocks of 16 output channels (the conv's own channel lanes): a warp's
  // chunk loads read 16 consecutive channels of one k, 4 sectors, where OIHW reads 32 sectors.
  ASSERT_EQ(k->packings.size(), 1u);
  EXPECT_EQ(k->packings[0].block, 16);
  GpuTile unpacked = t;
  unpacked.pack = false;
  auto k0 = lower_gpu(body, "k", *gpu, GpuSchedule{unpacked, std::nullopt});
  ASSERT_TRUE(static_cast<bool>(k0));
  EXPECT_TRUE(k0->packings.empty());
  // A runtime whose weight is computed by the graph turns packing off for the default tile too.
  GpuSchedule no_packing;
  no_packing.pack_weights = false;
  auto kd = lower_gpu(body, "k", *gpu, no_packing);
  ASSERT_TRUE(static_cast<bool>(kd));
  EXPECT_TRUE(kd->packings.empty());
  EXPECT_NE(kd->schedule.find(" tiled {"), std::string::npos) << kd->schedule;
  // 256 threads, 2 x 64 x 17 floats of shared memory, 16 accumulators + 8 operands + 24: 48 registers,
  // so registers bound it: 65536 / (48 x 256) = 5 blocks per SM, 1280 of 2048 threads.
  GpuOccupancy o = gpu_occupancy(k->stages.back(), *gpu);
  EXPECT_EQ(o.threads, 256);
  EXPECT_EQ(o.blocks, 49);
  EXPECT_EQ(o.shared_bytes, 2 * 64 * 17 * 4);
  EXPECT_EQ(o.registers, 48);
  EXPECT_EQ(o.blocks_per_sm, 5);
  EXPECT_EQ(o.limit, "registers");
  EXPECT_DOUBLE_EQ(o.occupancy, 0.625);
  auto f = gpu_kernel_features(*k, *gpu);
  ASSERT_EQ(f.size(), gpu_feature_names().size());
  auto at = [&](const char *name) { return f[std::find(gpu_feature_names().begin(), gpu_feature_names().end(), name) - gpu_feature_names().begin()]; };
  EXPECT_EQ(at("stages"), 2);  // the padding, then the conv
  EXPECT_EQ(at("barriers"), 49 * 36 * 2);
  // The pad stage has no arithmetic; the conv 2 MNK in its FMAs and M x N in the ReLU.
  EXPECT_FLOAT_EQ(at("flops"), 2.0f * 3136 * 64 * 576 + 3136 * 64);
  EXPECT_FLOAT_EQ(at("shared_bytes"), 2 * 64 * 17 * 4);
  // Consecutive threads on consecutive output pixels would store 64 floats apart: more sectors.
  GpuTile across = t;
  across.m_fastest = true;
  auto k2 = lower_gpu(body, "k", *gpu, GpuSchedule{across, std::nullopt});
  ASSERT_TRUE(static_cast<bool>(k2));
  auto f2 = gpu_kernel_features(*k2, *gpu);
  EXPECT_LT(at("global_sectors"), f2[9]);
  EXPECT_GT(at("coalescing"), f2[11]);
  auto f0 = gpu_kernel_features(*k0, *gpu);
  EXPECT_LT(at("global_sectors") * 1.5, f0[9]);
  std::printf("64 x 64 tile with the weight in OIHW: %.0f sectors, coalescing %.2f\n", f0[9], f0[11]);
  std::printf("64 x 64 tile: %.0f sectors, coalescing %.2f; pixels across threads: %.0f sectors, coalescing %.2f\n", at("global_sectors"),
              at("coalescing"), f2[9], f2[11]);
  // What ptxas allocates: the shared memory exactly as counted, no spills, and the registers beside the estimate.
  std::string ptxas = find_ptxas();
  if (ptxas.empty()) GTEST_SKIP() << "no ptxas to compare the estimated registers with ($AUTOTUNE_PTXAS, PATH, /usr/local/cuda/bin)";
  auto p = emit_ptx(*k, *gpu);
  ASSERT_TRUE(static_cast<bool>(p));
  auto r = ptxas_resources(p->ptx, *gpu, ptxas);
  ASSERT_TRUE(static_cast<bool>(r)) << r.error().message;
  ASSERT_EQ(r->size(), 2u);
  const PtxasEntry &conv = (*r)[0].entry == p->launches[1].entry ? (*r)[0] : (*r)[1];
  EXPECT_EQ(conv.entry, p->launches[1].entry);
  EXPECT_EQ(conv.shared_bytes, o.shared_bytes);
  EXPECT_EQ(conv.spill_store_bytes + conv.spill_load_bytes, 0);
  EXPECT_GT(conv.registers, 16);  // at least the accumulators
  std::printf("registers: %ld estimated, %ld allocated by ptxas; occupancy %.3f with them\n", static_cast<long>(o.registers),
              static_cast<long>(conv.registers), gpu_occupancy(k->stages.back(), *gpu, conv.registers).occupancy);
}

/**
 * The tuner's timer for a machine without a GPU: the real GPU-scheduled kernel, serialized on the
 * CPU (serialize_threads) and JIT-compiled; its times are CPU times, which say nothing of a GPU,
 * so the test checks what the tuner does with results (records, order, checks, deploy), not speed.
 * `corrupt` flips one output element, as a wrong kernel would.
 */
class SerializedCpuTimer : public GpuKernelTimer {
 public:
  explicit SerializedCpuTimer(GpuTarget gpu) : gpu_(std::move(gpu)), jit_(Jit::create({""}).take()) {}
  const GpuTarget &target() const override { return gpu_; }
  Expected<Result> run(const LoweredKernel &k, const std::vector<Tensor> &args, const TensorType &out, int runs) override {
    auto t0 = std::chrono::steady_clock::now();
    AT_ASSIGN(cpu, serialize_threads(k));
    AT_ASSIGN(ck, jit_->compile(cpu));
    Result r;
    r.compile_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.output = Tensor(out);
    BoundKernel bound(cpu, ck, args, r.output);
    std::vector<double> times;
    for (int i = 0; i < runs; ++i) {
      auto s = std::chrono::steady_clock::now();
      bound.run(pool_);
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - s).count());
    }
    std::sort(times.begin(), times.end());
    r.median_s = times[times.size() / 2], r.min_s = times[0];
    if (corrupt) r.output.f32()[0] += 1.0f;
    return r;
  }
  bool corrupt = false;

 private:
  GpuTarget gpu_;
  std::unique_ptr<Jit> jit_;
  ThreadPool pool_{1};
};

/** A tuning database in the temporary directory; closed and removed (its -wal and -shm too) when the test ends, however it ends. */
struct ScratchDb {
  std::string path;
  std::unique_ptr<TuningDb> db;
  explicit ScratchDb(const std::string &name)
      : path((std::filesystem::temp_directory_path() / (name + "_" + std::to_string(getpid()) + ".db")).string()) {
    remove();
    auto opened = TuningDb::open(path);
    EXPECT_TRUE(static_cast<bool>(opened)) << opened.error().message;
    if (opened) db = opened.take();
  }
  ~ScratchDb() {
    db.reset();
    remove();
  }
  void remove() const {
    for (const char *suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
  }
};

/** What a GPU tuner test drives: sm_90, a scratch database, a fused model and the serialized CPU timer. */
struct TunerRig {
  Expected<GpuTarget> gpu = resolve_gpu_target("sm_90");
  ScratchDb scratch;
  Graph g;
  std::unique_ptr<SerializedCpuTimer> timer;
  std::string key = "sm_90 serialized on the CPU";
  TunerRig(const char *db_name, const char *model) : scratch(db_name), g(fused_model(model)) {
    if (gpu) timer = std::make_unique<SerializedCpuTimer>(*gpu);
  }
};

TEST(Gpu, TheTunerRecordsEveryTileOnceChecksEachAndDeployReadsTheBest) {
  TunerRig rig("autotune_gpu_tune", "transformer");
  auto &[gpu, scratch, g, timer, key] = rig;
  ASSERT_TRUE(gpu && scratch.db);
  TuningDb &db = *scratch.db;
  GpuTuneOptions o;
  o.trials = 9;
  o.runs = 2;
  int lines = 0;
  o.progress = [&](const std::string &) { ++lines; };
  auto rep = tune_gpu(g, *timer, db, key, o);
  ASSERT_TRUE(static_cast<bool>(rep)) << rep.error().message;
  ASSERT_GE(rep->tasks, 2);  // the projections, the MLP and attention's matmuls
  EXPECT_EQ(rep->measured, 9);
  EXPECT_EQ(rep->failed, 0);
  EXPECT_EQ(lines, 9);
  // Each task's first record is its default tile; every record is an ok measurement with its GPU features.
  std::vector<Task> tasks = extract_tasks(g);
  int records = 0, reductions = 0;
  std::set<std::string> schedules;
  for (const auto &b : rep->best) {
    auto recs = db.records(b.hash, key);
    ASSERT_TRUE(static_cast<bool>(recs));
    ASSERT_FALSE(recs->empty());
    const Task &t = *std::find_if(tasks.begin(), tasks.end(), [&](const Task &x) { return x.hash == b.hash; });
    auto naive = lower_naive(t.body, "n", KernelSchedule{});
    ASSERT_TRUE(static_cast<bool>(naive));
    GpuSchedule first;
    if (auto shape = gemm_shape(naive->stages.back()); shape && shape->m >= 16 && shape->n >= 16) first.tile = default_gpu_tile(*shape, *gpu);
    else if (auto rows = row_reduce_shape(naive->stages.back()); rows && rows->k >= 32) first.reduce = default_gpu_reduce(*rows, *gpu), ++reductions;
    else if (auto prog = row_program_shape(naive->stages.back()); prog && prog->k >= 32) first.reduce = default_gpu_reduce(*prog, *gpu), ++reductions;
    EXPECT_EQ(recs->front().schedule, gpu_schedule_to_json(first));
    for (const TuningRecord &r : *recs) {
      EXPECT_EQ(r.status, "ok") << r.error;
      EXPECT_EQ(r.feature_version, kGpuFeatureVersion);
      EXPECT_EQ(nlohmann::json::parse(r.features).size(), gpu_feature_names().size());
      EXPECT_TRUE(schedules.insert(b.hash + r.schedule).second) << "measured twice: " << r.schedule;
      ++records;
    }
    // Deploy reads back the record best() ranks first.
    auto best = db.best(b.hash, key);
    ASSERT_TRUE(best && *best);
    auto s = best_gpu_schedule(db, t.body, key);
    ASSERT_TRUE(static_cast<bool>(s)) << s.error().message;
    ASSERT_TRUE(s->tile.has_value() || s->reduce.has_value());
    EXPECT_EQ(gpu_schedule_to_json(*s), (*best)->schedule);
  }
  EXPECT_EQ(records, 9);
  EXPECT_GE(reductions, 1);  // the LayerNorms: rows, not tiles
  // A second run measures only tiles not measured before; a wrong kernel is recorded as such, never as a time.
  timer->corrupt = true;
  o.trials = 3;
  auto again = tune_gpu(g, *timer, db, key, o);
  ASSERT_TRUE(static_cast<bool>(again)) << again.error().message;
  EXPECT_EQ(again->measured, 3);
  EXPECT_EQ(again->failed, 3);
  int wrong = 0;
  for (const auto &b : again->best) {
    auto recs = db.records(b.hash, key);
    ASSERT_TRUE(static_cast<bool>(recs));
    for (const TuningRecord &r : *recs) {
      EXPECT_TRUE(schedules.insert(b.hash + r.schedule).second || r.status == "ok") << "measured twice: " << r.schedule;
      if (r.status == "wrong_result") {
        ++wrong;
        EXPECT_NE(r.error.find("against the reference executor"), std::string::npos) << r.error;
      }
    }
  }
  EXPECT_EQ(wrong, 3);
  // A task without a record deploys at its default; a CPU record is no GPU schedule.
  EXPECT_FALSE(best_gpu_schedule(db, tasks[0].body, "another key")->tile.has_value());
  EXPECT_NE(gpu_schedule_from_json(R"({"version": 1, "vector_width": 8})").error().message.find("not a GPU schedule"), std::string::npos);
}

TEST(Gpu, OnceTrainedTheCostModelPicksTheTilesAndAResumedRunStartsFromTheDatabasesRecords) {
  // The model's machinery on real records (CPU times of serialized kernels: they train and rank as
  // a device's would, but say nothing of a GPU's speed).
  TunerRig rig("autotune_gpu_model", "tiny_cnn");
  auto &[gpu, scratch, g, timer, key] = rig;
  ASSERT_TRUE(gpu && scratch.db);
  TuningDb &db = *scratch.db;
  GpuTuneOptions o;
  o.trials = 30;
  o.runs = 1;
  o.min_records = 10;
  o.window = 24;
  int picks_said = 0;
  o.progress = [&](const std::string &line) { picks_said += line.find("(the cost model's pick)") != std::string::npos; };
  auto rep = tune_gpu(g, *timer, db, key, o);
  ASSERT_TRUE(static_cast<bool>(rep)) << rep.error().message;
  EXPECT_EQ(rep->measured, 30);
  EXPECT_EQ(rep->failed, 0);
  EXPECT_GE(rep->model_trainings, 2);  // at 10 records, and again as records arrive
  EXPECT_GT(rep->model_picks, 10);  // of the 20 trials after the first training, all but the epsilon share
  EXPECT_LE(rep->model_picks, 30 - rep->tasks);  // each task's default comes first
  EXPECT_EQ(picks_said, rep->model_picks);
  EXPECT_GE(rep->model_heldout_accuracy, 0.0);  // the replaced model scored on the records it had not seen
  std::printf("%d tasks; %d of 30 trials picked by the cost model, trained %d times, held-out pairwise accuracy %.3f (CPU-serialized times)\n",
              rep->tasks, rep->model_picks, rep->model_trainings, rep->model_heldout_accuracy);
  auto distinct = [&] {
    std::set<std::string> seen;
    int records = 0;
    for (const Task &t : extract_tasks(g)) {
      auto recs = db.records(t.hash, key);
      EXPECT_TRUE(static_cast<bool>(recs));
      for (const TuningRecord &r : *recs) {
        EXPECT_TRUE(seen.insert(t.hash + r.schedule).second) << "measured twice: " << r.schedule;
        ++records;
      }
    }
    return records;
  };
  EXPECT_EQ(distinct(), 30);
  // A second run trains on the database's records before its first trial, so the model picks at once.
  o.trials = 4;
  auto again = tune_gpu(g, *timer, db, key, o);
  ASSERT_TRUE(static_cast<bool>(again)) << again.error().message;
  EXPECT_EQ(again->measured, 4);
  EXPECT_GE(again->model_trainings, 1);
  EXPECT_EQ(again->model_rows, 30);
  EXPECT_GE(again->model_picks, 1);  // trained before its first trial (the epsilon share of picks aside)
  EXPECT_EQ(distinct(), 34);
  // Without the model the order is the seeded one: nothing trained, nothing picked.
  o.model = false;
  auto plain = tune_gpu(g, *timer, db, key, o);
  ASSERT_TRUE(static_cast<bool>(plain)) << plain.error().message;
  EXPECT_EQ(plain->model_trainings, 0);
  EXPECT_EQ(plain->model_picks, 0);
  EXPECT_EQ(distinct(), 38);
}

TEST(Gpu, ADatabaseTileThatDoesNotLowerOnTheDeviceFallsBackToTheDefault) {
  // A tile tuned on an sm_90 with 48 KiB of shared memory per block, deployed on a GPU with 16 KiB:
  // the default runs, and the note names the record and the reason.
  auto sm90 = resolve_gpu_target("sm_90");
  ASSERT_TRUE(static_cast<bool>(sm90));
  GpuTarget small = *sm90;
  small.shared_bytes_per_block = 16 << 10;
  int checked = 0;
  for_each_naive_stage({"resnet18"}, [&](const std::string &, size_t i, const Graph &body, const KernelStage &st) {
    auto shape = gemm_shape(st);
    if (!shape || shape->m < 16 || shape->n < 16 || checked >= 3) return;
    auto space = gpu_tile_space(*shape, *sm90);
    GpuTile big = *std::max_element(space.begin(), space.end(), [](const GpuTile &a, const GpuTile &b) {
      return a.bk * (a.bm + a.bn) < b.bk * (b.bm + b.bn);
    });
    SCOPED_TRACE("group %" + std::to_string(i) + " tile " + big.to_json());
    GpuSchedule tuned{big, std::nullopt};
    std::string note;
    // Where it fits, the record is what runs.
    auto as_tuned = lower_gpu_or_default(body, "g", *sm90, tuned, note);
    ASSERT_TRUE(static_cast<bool>(as_tuned)) << as_tuned.error().message;
    EXPECT_EQ(note, "");
    EXPECT_EQ(as_tuned->to_string(), lower_gpu(body, "g", *sm90, tuned)->to_string());
    // Where it does not, lower_gpu refuses it and the default runs instead.
    auto refused = lower_gpu(body, "g", small, tuned);
    ASSERT_FALSE(static_cast<bool>(refused));
    auto fallback = lower_gpu_or_default(body, "g", small, tuned, note);
    ASSERT_TRUE(static_cast<bool>(fallback)) << fallback.error().message;
    EXPECT_EQ(fallback->to_string(), lower_gpu(body, "g", small)->to_string());
    EXPECT_NE(note.find(big.to_json()), std::string::npos) << note;
    EXPECT_NE(note.find(refused.error().message), std::string::npos) << note;
    EXPECT_NE(note.find("the default runs"), std::string::npos) << note;
    ++checked;
  });
  EXPECT_EQ(checked, 3);
}

/** Sets an environment variable for one scope. */
struct ScopedEnv {
  std::string name, old;
  bool had;
  ScopedEnv(const std::string &n, const std::string &v) : name(n), had(std::getenv(n.c_str()) != nullptr) {
    if (had) old = std::getenv(n.c_str());
    setenv(n.c_str(), v.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had) setenv(name.c_str(), old.c_str(), 1);
    else unsetenv(name.c_str());
  }
};

TEST(Gpu, WithoutADriverOrDeviceOpeningTheDriverIsOneLine) {
  // A file that is no driver, then CUDA's stub library (every entry point autotune binds is
  // there, and cuInit answers that it is a stub): each refusal is one line naming the cause.
  {
    ScopedEnv env("AUTOTUNE_LIBCUDA", "/nonexistent/libcuda.so.1");
    auto d = CudaDriver::open();
    ASSERT_FALSE(static_cast<bool>(d));
    EXPECT_EQ(d.error().message.rfind("no CUDA driver: cannot load /nonexistent/libcuda.so.1 (", 0), 0u) << d.error().message;
    EXPECT_EQ(d.error().message.find('\n'), std::string::npos);
  }
  const char *stub = "/usr/local/cuda/lib64/stubs/libcuda.so";
  if (!std::filesystem::exists(stub)) GTEST_SKIP() << "no CUDA stub library at " << stub << " to bind the entry points against";
  ScopedEnv env("AUTOTUNE_LIBCUDA", stub);
  auto d = CudaDriver::open();
  ASSERT_FALSE(static_cast<bool>(d));
  EXPECT_EQ(d.error().message, std::string("cuInit (") + stub + "): CUDA_ERROR_STUB_LIBRARY");
}

TEST(Gpu, ResNet18RunsOnTheDeviceAndMatchesTheReference) {
  auto driver = CudaDriver::open();
  if (!driver) GTEST_SKIP() << "no GPU to run on: " << driver.error().message;
  Graph g = fused_model("resnet18");
  auto m = GpuModel::compile(g, *driver);
  ASSERT_TRUE(static_cast<bool>(m)) << m.error().message;
  auto inputs = random_inputs(g, 5);
  auto want = run_reference(g, inputs);
  auto got = (*m)->run(inputs);
  ASSERT_TRUE(want && got) << (got ? "" : got.error().message);
  auto d = compare((*got)[0], (*want)[0]);
  ASSERT_TRUE(static_cast<bool>(d));
  EXPECT_LE(d->relative(), 1e-4);
  auto ms = (*m)->median_ms(inputs, 10);
  ASSERT_TRUE(static_cast<bool>(ms)) << ms.error().message;
  std::printf("ResNet-18 on %s (%s): %.3f ms median device time, error %.2e\n", (*m)->target().name.c_str(), (*m)->target().sm.c_str(), *ms, d->relative());
}

}  // namespace
}  // namespace autotune
