#include "runtime/Cuda.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>

#include "codegen/Jit.h"
#include "codegen/Lower.h"
#include "db/Workload.h"
#include "ir/Reference.h"
#include "runtime/Runtime.h"

namespace autotune {

// The driver API's types, as cuda.h declares them (no CUDA header is needed to build autotune).
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = void *;
using CUmodule = void *;
using CUfunction = void *;
using CUstream = void *;
using CUevent = void *;

struct CudaDriver::Api {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuGetErrorName)(CUresult, const char **);
  CUresult (*cuDeviceGetCount)(int *);
  CUresult (*cuDeviceGet)(CUdevice *, int);
  CUresult (*cuDeviceGetName)(char *, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuModuleLoadData)(CUmodule *, const void *);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
  CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **, void **);
  CUresult (*cuEventCreate)(CUevent *, unsigned);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float *, CUevent, CUevent);
  CUresult (*cuEventDestroy)(CUevent);
};

namespace {
// cuda.h's device attributes autotune reads.
constexpr int kMaxThreadsPerBlock = 1, kSharedPerBlock = 8, kWarpSize = 10, kSmCount = 16, kCcMajor = 75, kCcMinor = 76,
              kSharedPerSm = 81, kRegistersPerSm = 82;
}  // namespace

Error CudaDriver::error(const char *what, int code) const {
  const char *name = nullptr;
  if (api_ && api_->cuGetErrorName && api_->cuGetErrorName(code, &name) != 0) name = nullptr;
  // The driver names its errors; a stub or a broken driver may not, so the common ones are known here too (cuda.h's values).
  static const std::map<int, const char *> known{{1, "CUDA_ERROR_INVALID_VALUE"},         {2, "CUDA_ERROR_OUT_OF_MEMORY"},
                                                 {3, "CUDA_ERROR_NOT_INITIALIZED"},       {34, "CUDA_ERROR_STUB_LIBRARY"},
                                                 {35, "CUDA_ERROR_INSUFFICIENT_DRIVER"},  {100, "CUDA_ERROR_NO_DEVICE"},
                                                 {200, "CUDA_ERROR_INVALID_IMAGE"},       {209, "CUDA_ERROR_NO_BINARY_FOR_GPU"},
                                                 {218, "CUDA_ERROR_INVALID_PTX"},         {222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"},
                                                 {700, "CUDA_ERROR_ILLEGAL_ADDRESS"},     {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"},
                                                 {719, "CUDA_ERROR_LAUNCH_FAILED"}};
  if (!name && known.count(code)) name = known.at(code);
  return make_error(std::string(what) + ": " + (name ? name : "CUDA error " + std::to_string(code)));
}

Expected<std::shared_ptr<CudaDriver>> CudaDriver::open() {
  const char *env = std::getenv("AUTOTUNE_LIBCUDA");
  std::string path = env && *env ? env : "libcuda.so.1";
  std::shared_ptr<CudaDriver> d(new CudaDriver());
  d->lib_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!d->lib_) {
    const char *why = dlerror();
    return make_error("no CUDA driver: cannot load " + path + " (" + (why ? why : "not found") + "); GPU commands need an NVIDIA driver and device");
  }
  d->api_ = std::make_unique<Api>();
  Api &a = *d->api_;
  std::string missing;
  auto bind = [&](auto &fn, const char *name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(d->lib_, name));
    if (!fn) missing += (missing.empty() ? "" : ", ") + std::string(name);
  };
  bind(a.cuInit, "cuInit");
  bind(a.cuGetErrorName, "cuGetErrorName");
  bind(a.cuDeviceGetCount, "cuDeviceGetCount");
  bind(a.cuDeviceGet, "cuDeviceGet");
  bind(a.cuDeviceGetName, "cuDeviceGetName");
  bind(a.cuDeviceGetAttribute, "cuDeviceGetAttribute");
  bind(a.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  bind(a.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
  bind(a.cuCtxSetCurrent, "cuCtxSetCurrent");
  bind(a.cuCtxSynchronize, "cuCtxSynchronize");
  bind(a.cuModuleLoadData, "cuModuleLoadData");
  bind(a.cuModuleUnload, "cuModuleUnload");
  bind(a.cuModuleGetFunction, "cuModuleGetFunction");
  bind(a.cuMemAlloc, "cuMemAlloc_v2");
  bind(a.cuMemFree, "cuMemFree_v2");
  bind(a.cuMemcpyHtoD, "cuMemcpyHtoD_v2");
  bind(a.cuMemcpyDtoH, "cuMemcpyDtoH_v2");
  bind(a.cuLaunchKernel, "cuLaunchKernel");
  bind(a.cuEventCreate, "cuEventCreate");
  bind(a.cuEventRecord, "cuEventRecord");
  bind(a.cuEventSynchronize, "cuEventSynchronize");
  bind(a.cuEventElapsedTime, "cuEventElapsedTime");
  bind(a.cuEventDestroy, "cuEventDestroy_v2");
  if (!missing.empty()) return make_error("CUDA driver " + path + " lacks " + missing);
  if (CUresult r = a.cuInit(0)) return d->error(("cuInit (" + path + ")").c_str(), r);
  if (CUresult r = a.cuDeviceGetCount(&d->devices_)) return d->error("cuDeviceGetCount", r);
  if (d->devices_ == 0) return make_error("the CUDA driver (" + path + ") sees no GPU");
  return d;
}

CudaDriver::~CudaDriver() {
  if (lib_) dlclose(lib_);
}

std::string CudaDriver::device_name(int ordinal) const {
  CUdevice dev = 0;
  char name[256] = {0};
  if (api_->cuDeviceGet(&dev, ordinal) || api_->cuDeviceGetName(name, sizeof name, dev)) return "?";
  return name;
}

Expected<GpuTarget> CudaDriver::device_target(int ordinal) const {
  if (ordinal < 0 || ordinal >= devices_) return make_error("no GPU " + std::to_string(ordinal) + " (the driver sees " + std::to_string(devices_) + ")");
  CUdevice dev = 0;
  if (CUresult r = api_->cuDeviceGet(&dev, ordinal)) return error("cuDeviceGet", r);
  auto attr = [&](int which) -> Expected<int> {
    int v = 0;
    if (CUresult r = api_->cuDeviceGetAttribute(&v, which, dev)) return error("cuDeviceGetAttribute", r);
    return v;
  };
  AT_ASSIGN(major, attr(kCcMajor));
  AT_ASSIGN(minor, attr(kCcMinor));
  // The nearest description autotune has (its PTX version), then the device's own numbers.
  std::string sm = "sm_" + std::to_string(major) + std::to_string(minor);
  auto known = resolve_gpu_target(major >= 9 ? "sm_90" : "sm_80");
  GpuTarget t = known ? *known : GpuTarget{};
  t.name = device_name(ordinal), t.sm = sm;
  AT_ASSIGN(sms, attr(kSmCount));
  AT_ASSIGN(warp, attr(kWarpSize));
  AT_ASSIGN(max_threads, attr(kMaxThreadsPerBlock));
  AT_ASSIGN(shared_block, attr(kSharedPerBlock));
  AT_ASSIGN(shared_sm, attr(kSharedPerSm));
  AT_ASSIGN(regs_sm, attr(kRegistersPerSm));
  t.sm_count = sms, t.warp_size = warp, t.max_threads_per_block = max_threads;
  t.shared_bytes_per_block = shared_block, t.shared_bytes_per_sm = shared_sm, t.registers_per_sm = regs_sm;
  t.threads_per_block = std::min(t.threads_per_block, max_threads);
  return t;
}

struct GpuModel::Group {
  int node = -1;
  bool on_host = false;  // integer-valued or not lowerable: the reference executor, through host copies
  CUmodule module = nullptr;
  std::vector<CUfunction> functions;
  std::vector<GpuLaunch> launches;
  std::vector<int> args;                  // value slots of the group's inputs, then its output
  std::vector<CUdeviceptr> temps;         // the kernel's temporaries
};

namespace {
/** The slot of value `v` in GpuModel's per-value tables: inputs, then constants, then nodes. */
int slot(const Graph &g, ValueId v) {
  switch (v.kind) {
    case ValueId::Kind::kInput: return v.index;
    case ValueId::Kind::kConstant: return static_cast<int>(g.inputs.size()) + v.index;
    case ValueId::Kind::kNode: break;
  }
  return static_cast<int>(g.inputs.size() + g.constants.size()) + v.index;
}

/** Loads `ptx` as `module` (set as soon as it loads: the caller unloads it) and looks up each launch's entry. */
Status load_module(const CudaDriver &d, const PtxKernel &ptx, const std::string &what, CUmodule &module, std::vector<CUfunction> &functions) {
  const auto &a = d.api();
  if (CUresult r = a.cuModuleLoadData(&module, ptx.ptx.c_str())) return d.error(("cuModuleLoadData (" + what + ")").c_str(), r);
  for (const GpuLaunch &l : ptx.launches) {
    CUfunction f = nullptr;
    if (CUresult r = a.cuModuleGetFunction(&f, module, l.entry.c_str())) return d.error("cuModuleGetFunction", r);
    functions.push_back(f);
  }
  return Status::ok();
}

/** Launches each stage in order on the default stream: grid = its blocks, block = its threads, `params` its arguments. */
Status launch_stages(const CudaDriver &d, const std::vector<CUfunction> &functions, const std::vector<GpuLaunch> &launches, std::vector<void *> &params) {
  for (size_t k = 0; k < functions.size(); ++k) {
    const GpuLaunch &l = launches[k];
    if (CUresult r = d.api().cuLaunchKernel(functions[k], static_cast<unsigned>(l.blocks), 1, 1, static_cast<unsigned>(l.threads), 1, 1, 0, nullptr,
                                            params.data(), nullptr))
      return d.error(("cuLaunchKernel (" + l.entry + ")").c_str(), r);
  }
  return Status::ok();
}

/** `launch` timed with CUDA events around it, runs + 1 times (the first warms up): the times of the others in ms, sorted. */
Expected<std::vector<double>> event_times_ms(const CudaDriver &d, int runs, const std::function<Status()> &launch) {
  const auto &a = d.api();
  CUevent start = nullptr, stop = nullptr;
  struct Destroy {
    const CudaDriver::Api &a;
    CUevent &start, &stop;
    ~Destroy() {
      if (start) a.cuEventDestroy(start);
      if (stop) a.cuEventDestroy(stop);
    }
  } destroy{a, start, stop};
  if (CUresult r = a.cuEventCreate(&start, 0)) return d.error("cuEventCreate", r);
  if (CUresult r = a.cuEventCreate(&stop, 0)) return d.error("cuEventCreate", r);
  std::vector<double> ms;
  for (int i = 0; i < std::max(runs, 1) + 1; ++i) {
    if (CUresult r = a.cuEventRecord(start, nullptr)) return d.error("cuEventRecord", r);
    AT_TRY(launch());
    float t = 0;
    if (CUresult r = a.cuEventRecord(stop, nullptr)) return d.error("cuEventRecord", r);
    if (CUresult r = a.cuEventSynchronize(stop)) return d.error("cuEventSynchronize (a kernel failed)", r);
    if (CUresult r = a.cuEventElapsedTime(&t, start, stop)) return d.error("cuEventElapsedTime", r);
    if (i > 0) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  return ms;
}
}  // namespace

Expected<std::unique_ptr<GpuModel>> GpuModel::compile(const Graph &fused, std::shared_ptr<CudaDriver> driver, int ordinal, TuningDb *db) {
  std::unique_ptr<GpuModel> m(new GpuModel());
  m->driver_ = driver;
  m->graph_ = fused;
  const auto &a = driver->api();
  AT_ASSIGN(target, driver->device_target(ordinal));
  m->target_ = target;
  CUdevice dev = 0;
  if (CUresult r = a.cuDeviceGet(&dev, ordinal)) return driver->error("cuDeviceGet", r);
  if (CUresult r = a.cuDevicePrimaryCtxRetain(&m->context_, dev)) return driver->error("cuDevicePrimaryCtxRetain", r);
  if (CUresult r = a.cuCtxSetCurrent(m->context_)) return driver->error("cuCtxSetCurrent", r);
  const Graph &g = m->graph_;
  size_t n = g.inputs.size() + g.constants.size() + g.nodes.size();
  m->values_.assign(n, 0);
  m->bytes_.assign(n, 0);
  auto alloc = [&](int s, size_t bytes) -> Status {
    m->bytes_[s] = bytes;
    if (CUresult r = a.cuMemAlloc(&m->values_[s], std::max<size_t>(bytes, 4))) return driver->error("cuMemAlloc", r);
    return Status::ok();
  };
  for (size_t i = 0; i < g.inputs.size(); ++i) AT_TRY(alloc(slot(g, ValueId::input(static_cast<int>(i))), g.inputs[i].type.nbytes()));
  for (size_t i = 0; i < g.constants.size(); ++i) {
    int s = slot(g, ValueId::constant(static_cast<int>(i)));
    const Tensor &t = g.constants[i].value;
    AT_TRY(alloc(s, t.nbytes()));
    if (t.nbytes())
      if (CUresult r = a.cuMemcpyHtoD(m->values_[s], t.raw(), t.nbytes())) return driver->error("cuMemcpyHtoD", r);
  }
  // Node values and kernel temporaries share one device arena planned by liveness, as on the
  // CPU (runtime/Runtime's plan_memory); graph outputs live to the end, to be copied out.
  std::vector<int> last = last_uses(g);
  for (ValueId v : g.outputs)
    if (v.kind == ValueId::Kind::kNode) last[v.index] = static_cast<int>(g.nodes.size());
  std::vector<size_t> bytes;
  std::vector<std::pair<int, int>> lifetimes;
  std::vector<std::pair<int, int>> owner;  // (node, -1): its value; (node, k): its group's temporary k
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node &node = g.nodes[i];
    bytes.push_back(node.type.nbytes());
    lifetimes.emplace_back(static_cast<int>(i), last[i]);
    owner.emplace_back(static_cast<int>(i), -1);
    Group grp;
    grp.node = static_cast<int>(i);
    for (ValueId v : node.inputs) grp.args.push_back(slot(g, v));
    grp.args.push_back(slot(g, ValueId::node(static_cast<int>(i))));
    GpuSchedule schedule;
    if (db && node.is_function()) {
      AT_ASSIGN(best, best_gpu_schedule(*db, *node.body, gpu_target_key(*driver, m->target_, ordinal)));
      schedule = best;
    }
    std::string group = "group %" + std::to_string(i) + (node.is_function() ? " " + group_ops(*node.body) : ""), note;
    auto k = node.is_function() && node.type.dtype == DType::kFloat32 ? lower_gpu_or_default(*node.body, "g" + std::to_string(i), m->target_, schedule, note)
                                                                        : Expected<LoweredKernel>(make_error("not a float group"));
    // A packed weight is packed once here, from its constant; a weight the graph computes keeps its layout (the tile unpacked).
    auto computed_weight = [&](const LoweredKernel &lk) {
      return std::any_of(lk.packings.begin(), lk.packings.end(), [&](const WeightPacking &p) { return node.inputs[p.param].kind != ValueId::Kind::kConstant; });
    };
    if (k && computed_weight(*k)) {
      schedule.pack_weights = false;
      k = lower_gpu_or_default(*node.body, "g" + std::to_string(i), m->target_, schedule, note);
    }
    if (!note.empty()) m->notes_.push_back(group + ": " + note);
    if (!k && node.is_function()) m->notes_.push_back(group + " runs on the host: " + k.error().message);
    if (k)
      for (const WeightPacking &p : k->packings) {
        if (node.inputs[p.param].kind != ValueId::Kind::kConstant) return make_error("group %" + std::to_string(i) + ": a packed weight that is not a constant");
        Tensor packed = pack_weight(g.constants[node.inputs[p.param].index].value, p);
        CUdeviceptr d = 0;
        if (CUresult r = a.cuMemAlloc(&d, std::max<size_t>(packed.nbytes(), 4))) return driver->error("cuMemAlloc (a packed weight)", r);
        m->packed_.push_back(d);
        if (CUresult r = a.cuMemcpyHtoD(d, packed.raw(), packed.nbytes())) return driver->error("cuMemcpyHtoD", r);
        grp.args[static_cast<size_t>(p.param)] = static_cast<int>(m->values_.size());
        m->values_.push_back(d);
        m->bytes_.push_back(packed.nbytes());
      }
    if (!k) {
      grp.on_host = true;
      m->groups_.push_back(std::move(grp));
      continue;
    }
    AT_ASSIGN(ptx, emit_ptx(*k, m->target_, default_kernel_cache_dir()));
    AT_TRY(load_module(*driver, ptx, "group %" + std::to_string(i), grp.module, grp.functions));
    grp.launches = ptx.launches;
    for (size_t b = static_cast<size_t>(k->num_params) + 1; b < k->buffers.size(); ++b) {
      bytes.push_back(k->buffers[b]->bytes());
      lifetimes.emplace_back(static_cast<int>(i), static_cast<int>(i));
      owner.emplace_back(static_cast<int>(i), static_cast<int>(grp.temps.size()));
      grp.temps.push_back(0);
    }
    m->groups_.push_back(std::move(grp));
  }
  MemoryPlan plan = plan_memory(bytes, lifetimes);
  if (CUresult r = a.cuMemAlloc(&m->arena_, std::max<size_t>(plan.total, 64))) return driver->error("cuMemAlloc (the activations' arena)", r);
  for (size_t b = 0; b < bytes.size(); ++b) {
    auto [node, temp] = owner[b];
    CUdeviceptr p = m->arena_ + plan.offsets[b];
    if (temp < 0) m->values_[slot(g, ValueId::node(node))] = p, m->bytes_[slot(g, ValueId::node(node))] = bytes[b];
    else m->groups_[static_cast<size_t>(node)].temps[static_cast<size_t>(temp)] = p;
  }
  return m;
}

GpuModel::~GpuModel() {
  if (!driver_) return;
  const auto &a = driver_->api();
  for (Group &g : groups_)
    if (g.module) a.cuModuleUnload(g.module);
  // Inputs and constants have allocations of their own; node values live in the arena.
  for (size_t s = 0; s < graph_.inputs.size() + graph_.constants.size() && s < values_.size(); ++s)
    if (values_[s]) a.cuMemFree(values_[s]);
  for (CUdeviceptr p : packed_) a.cuMemFree(p);
  if (arena_) a.cuMemFree(arena_);
}

Status GpuModel::upload_inputs(const std::vector<Tensor> &inputs) {
  const Graph &g = graph_;
  if (inputs.size() != g.inputs.size()) return make_error("the model takes " + std::to_string(g.inputs.size()) + " inputs, got " + std::to_string(inputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].type() != g.inputs[i].type) return make_error("input " + g.inputs[i].name + ": expected " + type_str(g.inputs[i].type) + ", got " + type_str(inputs[i].type()));
    int s = slot(g, ValueId::input(static_cast<int>(i)));
    if (CUresult r = driver_->api().cuMemcpyHtoD(values_[s], inputs[i].raw(), inputs[i].nbytes())) return driver_->error("cuMemcpyHtoD", r);
  }
  return Status::ok();
}

Status GpuModel::launch_all() {
  const auto &a = driver_->api();
  const Graph &g = graph_;
  for (Group &grp : groups_) {
    const Node &node = g.nodes[grp.node];
    if (grp.on_host) {
      // Through the host: the reference executor's answer for this node, copied back.
      std::vector<Tensor> in;
      for (size_t k = 0; k + 1 < grp.args.size(); ++k) {
        Tensor t(g.type_of(node.inputs[k]));
        if (CUresult r = a.cuMemcpyDtoH(t.raw(), values_[grp.args[k]], t.nbytes())) return driver_->error("cuMemcpyDtoH", r);
        in.push_back(t);
      }
      AT_ASSIGN(out, eval_node(node, in));
      if (CUresult r = a.cuMemcpyHtoD(values_[grp.args.back()], out.raw(), out.nbytes())) return driver_->error("cuMemcpyHtoD", r);
      continue;
    }
    std::vector<CUdeviceptr> ptrs;
    for (int s : grp.args) ptrs.push_back(values_[s]);
    for (CUdeviceptr p : grp.temps) ptrs.push_back(p);
    std::vector<void *> params;
    for (CUdeviceptr &p : ptrs) params.push_back(&p);
    AT_TRY(launch_stages(*driver_, grp.functions, grp.launches, params));
  }
  return Status::ok();
}

Expected<std::vector<Tensor>> GpuModel::run(const std::vector<Tensor> &inputs) {
  const auto &a = driver_->api();
  if (CUresult r = a.cuCtxSetCurrent(context_)) return driver_->error("cuCtxSetCurrent", r);
  AT_TRY(upload_inputs(inputs));
  AT_TRY(launch_all());
  if (CUresult r = a.cuCtxSynchronize()) return driver_->error("cuCtxSynchronize (a kernel failed)", r);
  std::vector<Tensor> out;
  for (ValueId v : graph_.outputs) {
    Tensor t(graph_.type_of(v));
    if (CUresult r = a.cuMemcpyDtoH(t.raw(), values_[slot(graph_, v)], t.nbytes())) return driver_->error("cuMemcpyDtoH", r);
    out.push_back(t);
  }
  return out;
}

Expected<double> GpuModel::median_ms(const std::vector<Tensor> &inputs, int runs) {
  const auto &a = driver_->api();
  if (CUresult r = a.cuCtxSetCurrent(context_)) return driver_->error("cuCtxSetCurrent", r);
  AT_TRY(upload_inputs(inputs));
  AT_ASSIGN(ms, event_times_ms(*driver_, runs, [&] { return launch_all(); }));
  return ms[ms.size() / 2];
}

std::string gpu_target_key(const CudaDriver &driver, const GpuTarget &device, int ordinal) {
  return device.sm + " " + driver.device_name(ordinal);
}

Expected<GpuSchedule> best_gpu_schedule(TuningDb &db, const Graph &body, const std::string &target_key) {
  AT_ASSIGN(best, db.best(workload_hash(body), target_key));
  if (!best) return GpuSchedule{};
  auto s = gpu_schedule_from_json(best->schedule);
  if (!s) return make_error("tuning database " + db.path() + ", record " + best->uid + ": " + s.error().message);
  return s.take();
}

Expected<DeviceKernelRun> run_kernel_on_device(CudaDriver &driver, int ordinal, const GpuTarget &target, const LoweredKernel &k,
                                               const std::vector<Tensor> &args, const TensorType &out, int runs) {
  const auto &a = driver.api();
  if (args.size() != static_cast<size_t>(k.num_params)) return make_error(k.name + ": " + std::to_string(args.size()) + " arguments for " + std::to_string(k.num_params) + " parameters");
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if (CUresult r = a.cuDeviceGet(&dev, ordinal)) return driver.error("cuDeviceGet", r);
  if (CUresult r = a.cuDevicePrimaryCtxRetain(&ctx, dev)) return driver.error("cuDevicePrimaryCtxRetain", r);
  // Everything taken below is given back on every path out.
  CUmodule module = nullptr;
  std::vector<CUdeviceptr> bufs(k.buffers.size(), 0);
  struct Release {
    const CudaDriver::Api &a;
    CUdevice dev;
    CUmodule &module;
    std::vector<CUdeviceptr> &bufs;
    ~Release() {
      for (CUdeviceptr p : bufs)
        if (p) a.cuMemFree(p);
      if (module) a.cuModuleUnload(module);
      a.cuDevicePrimaryCtxRelease(dev);
    }
  } release{a, dev, module, bufs};
  if (CUresult r = a.cuCtxSetCurrent(ctx)) return driver.error("cuCtxSetCurrent", r);
  auto t0 = std::chrono::steady_clock::now();
  AT_ASSIGN(ptx, emit_ptx(k, target, default_kernel_cache_dir()));
  std::vector<CUfunction> fns;
  AT_TRY(load_module(driver, ptx, k.name, module, fns));
  DeviceKernelRun run;
  run.compile_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<Tensor> in = args;
  for (const WeightPacking &p : k.packings) in[static_cast<size_t>(p.param)] = pack_weight(args[static_cast<size_t>(p.param)], p);
  for (size_t b = 0; b < k.buffers.size(); ++b) {
    if (CUresult r = a.cuMemAlloc(&bufs[b], std::max<size_t>(k.buffers[b]->bytes(), 4))) return driver.error("cuMemAlloc", r);
    if (b < in.size()) {
      if (in[b].nbytes() != k.buffers[b]->bytes()) return make_error(k.name + ": argument " + std::to_string(b) + " has " + std::to_string(in[b].nbytes()) + " bytes, its buffer " + std::to_string(k.buffers[b]->bytes()));
      if (CUresult r = a.cuMemcpyHtoD(bufs[b], in[b].raw(), in[b].nbytes())) return driver.error("cuMemcpyHtoD", r);
    }
  }
  std::vector<void *> params;
  for (CUdeviceptr &p : bufs) params.push_back(&p);
  AT_ASSIGN(ms, event_times_ms(driver, runs, [&] { return launch_stages(driver, fns, ptx.launches, params); }));
  run.median_s = ms[ms.size() / 2] / 1e3;
  run.min_s = ms[0] / 1e3;
  run.output = Tensor(out);
  if (run.output.nbytes() != k.buffers[args.size()]->bytes()) return make_error(k.name + ": the output buffer does not hold " + type_str(out));
  if (CUresult r = a.cuMemcpyDtoH(run.output.raw(), bufs[args.size()], run.output.nbytes())) return driver.error("cuMemcpyDtoH", r);
  return run;
}

}  // namespace autotune
