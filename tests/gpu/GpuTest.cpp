// The GPU path without a GPU (issue 13): every group of the generated ResNets and MobileNetV2
// lowered under the GPU schedule and compiled to PTX for sm_80 and sm_90, each assembled by
// ptxas where it is installed; and the same GPU-scheduled kernels run on the CPU (blocks the
// parallel loop, threads a serial loop inside) against the reference executor, so their results
// are checked, not only their syntax.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "codegen/Gpu.h"
#include "codegen/Jit.h"
#include "codegen/Target.h"
#include "ir/OnnxImport.h"
#include "ir/Pass.h"
#include "ir/Reference.h"
#include "runtime/BoundKernel.h"
#include "runtime/Cuda.h"
#include "runtime/ThreadPool.h"

namespace autotune {
namespace {

Graph fused_model(const std::string &name) {
  auto g = import_onnx_file(std::string(AUTOTUNE_MODELS_DIR) + "/" + name + ".onnx");
  EXPECT_TRUE(static_cast<bool>(g)) << g.error().message;
  auto f = lower_to_stage(*g, Stage::kFused, PassContext{});
  EXPECT_TRUE(static_cast<bool>(f)) << f.error().message;
  return f.take();
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
  EXPECT_GE(groups, 2 * (26 + 59 + 55));
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

TEST(Gpu, GpuScheduledKernelsRunSerializedOnTheCpuAndMatchTheReference) {
  // Every group of the small models, the transformer pieces, the ResNets and MobileNetV2, as blocks x threads
  // with a guard on the last block; 224 threads per block, so that blocks rarely divide the work.
  auto gpu = resolve_gpu_target("sm_80");
  ASSERT_TRUE(static_cast<bool>(gpu));
  gpu->threads_per_block = 224;
  auto jit = Jit::create({""});
  ASSERT_TRUE(static_cast<bool>(jit));
  ThreadPool pool(2);
  int checked = 0, guarded = 0;
  for (const char *model : {"tiny_cnn", "mlp", "shape_ops", "transformer", "vit_tiny", "modern_cnn", "resnet18", "resnet50", "mobilenet_v2"}) {
    Graph g = fused_model(model);
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      if (!g.nodes[i].is_function()) continue;
      const Graph &body = *g.nodes[i].body;
      if (body.type_of(body.outputs[0]).dtype != DType::kFloat32) continue;  // integer groups run on the reference executor
      SCOPED_TRACE(std::string(model) + " group %" + std::to_string(i));
      auto k = lower_gpu(body, "g" + std::to_string(i), *gpu);
      ASSERT_TRUE(static_cast<bool>(k)) << k.error().message;
      for (const KernelStage &st : k->stages) {
        EXPECT_EQ(st.parallel_var, "gpu_block");
        guarded += loop::to_string(st.body).find("if (") != std::string::npos;
      }
      auto ck = (*jit)->compile(*k);
      ASSERT_TRUE(static_cast<bool>(ck)) << ck.error().message;
      std::vector<Tensor> args = random_inputs(body, 17 + i);
      auto want = run_reference(body, args);
      ASSERT_TRUE(static_cast<bool>(want)) << want.error().message;
      BoundKernel bound(*k, *ck, args, Tensor((*want)[0].type()));
      bound.run(pool);
      auto d = compare(bound.output(), (*want)[0]);
      ASSERT_TRUE(static_cast<bool>(d));
      EXPECT_LE(d->relative(), 1e-5) << k->to_string().substr(0, 2000);
      ++checked;
    }
  }
  std::printf("%d GPU-scheduled groups matched the reference on the CPU, %d stages with a guarded last block\n", checked, guarded);
  EXPECT_GE(checked, 60);
  EXPECT_GT(guarded, 10);
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
