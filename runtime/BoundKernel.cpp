#include "runtime/BoundKernel.h"

#include "codegen/Lower.h"

namespace autotune {

BoundKernel::BoundKernel(const LoweredKernel &k, const CompiledKernel &ck, const std::vector<Tensor> &args, Tensor out)
    : args_(args), out_(std::move(out)), stages_(ck.stages) {
  for (const WeightPacking &p : k.packings) args_[p.param] = pack_weight(args_[p.param], p);
  for (size_t b = k.num_params + 1; b < k.buffers.size(); ++b)
    temps_.emplace_back(TensorType{k.buffers[b]->type == loop::Type::kI64 ? DType::kInt64 : DType::kFloat32, {k.buffers[b]->size}});
  for (Tensor &a : args_) bufs_.push_back(a.raw());
  bufs_.push_back(out_.raw());
  for (Tensor &t : temps_) bufs_.push_back(t.raw());
  for (const KernelStage &s : k.stages) extents_.push_back(s.parallel_extent);
}

void BoundKernel::run(ThreadPool &pool) {
  for (size_t s = 0; s < stages_.size(); ++s) {
    StageFn fn = stages_[s];
    void **table = bufs_.data();
    pool.parallel_for(extents_[s], [fn, table](int64_t b, int64_t e) { fn(table, b, e); });
  }
}

}  // namespace autotune
