#pragma once
// Dense tensors: a dtype, a static shape and a 64-byte aligned buffer shared by copies
// (a Tensor is a handle; the graph's constants are never written after creation).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/Error.h"

namespace autotune {

enum class DType { kFloat32, kInt64 };

const char *dtype_name(DType t);                 // "float32", "int64"
Expected<DType> parse_dtype(const std::string &s);
size_t dtype_size(DType t);

using Shape = std::vector<int64_t>;

/** Largest element count of one tensor we accept; guards shape arithmetic on hostile input. */
constexpr int64_t kMaxTensorElements = int64_t{1} << 34;

struct TensorType {
  DType dtype = DType::kFloat32;
  Shape shape;

  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  int rank() const { return static_cast<int>(shape.size()); }
  bool operator==(const TensorType &o) const { return dtype == o.dtype && shape == o.shape; }
  bool operator!=(const TensorType &o) const { return !(*this == o); }
};

/** A checked TensorType: every dim >= 0 and the element count within kMaxTensorElements. */
Expected<TensorType> make_type(DType dtype, Shape shape);

/**
 * The most memory this process may hold at once: its address-space or data-segment limit
 * (ulimit -v, -d) or the machine's physical memory, whichever is smaller. Sizes that come from
 * input files (a tensor's dims, a model's activations) are checked against it before anything is
 * allocated, so a hostile or damaged file gets an error instead of an abort or the OOM killer.
 */
size_t memory_limit_bytes();
/** An error saying `what` needs `bytes`, more than memory_limit_bytes() (minus `in_use`) allows. */
Status check_allocation(size_t bytes, const std::string &what, size_t in_use = 0);
/**
 * A zero-filled, 64-byte aligned buffer of at least `bytes` (64 for none), or null; one of 2 MiB or
 * more starts on a 2 MiB boundary in transparent huge pages where the kernel grants them.
 */
std::shared_ptr<uint8_t> zeroed_buffer(size_t bytes);
/** "1.5 GiB", "64 MiB", "512 bytes". */
std::string format_bytes(double bytes);

std::string shape_str(const Shape &s);           // "(1, 3, 224, 224)"
std::string type_str(const TensorType &t);       // "Tensor[(1, 3, 224, 224), float32]"

class Tensor {
 public:
  Tensor() = default;
  /** A zero-filled tensor of the given type (running out of memory is a bug: see allocate). */
  explicit Tensor(TensorType type);
  /** A zero-filled tensor whose size comes from input: an error, not an abort, when it cannot fit. */
  static Expected<Tensor> allocate(TensorType type, const std::string &what);

  const TensorType &type() const { return type_; }
  DType dtype() const { return type_.dtype; }
  const Shape &shape() const { return type_.shape; }
  int64_t numel() const { return type_.numel(); }
  size_t nbytes() const { return type_.nbytes(); }
  bool defined() const { return data_ != nullptr || numel() == 0; }

  float *f32();
  const float *f32() const;
  int64_t *i64();
  const int64_t *i64() const;
  void *raw() { return data_.get(); }
  const void *raw() const { return data_.get(); }

  /** The same data viewed with another shape of equal element count. */
  Tensor reshaped(const Shape &shape) const;
  /** A deep copy. */
  Tensor clone() const;

 private:
  TensorType type_;
  std::shared_ptr<uint8_t> data_;
};

Tensor scalar_f32(float v);
Tensor tensor_f32(const Shape &shape, const std::vector<float> &values);
Tensor tensor_i64(const Shape &shape, const std::vector<int64_t> &values);

/** Uniform values in [lo, hi) from a seeded generator: deterministic across runs and machines. */
Tensor random_tensor(const TensorType &type, uint64_t seed, float lo = -1.0f, float hi = 1.0f);

/** Element-wise comparison for tests and verification. */
struct Difference {
  double max_abs = 0;       // largest |a - b|
  double max_ref = 0;       // largest |b|
  double mse = 0;           // mean squared error
  int64_t first_index = -1; // first element with the largest error, -1 if equal
  bool nan_mismatch = false;
  /** max_abs relative to the reference's largest magnitude (max_abs itself when that is 0). */
  double relative() const { return max_ref > 0 ? max_abs / max_ref : max_abs; }
};
/** Compares two tensors of the same type (an error if the types differ). */
Expected<Difference> compare(const Tensor &a, const Tensor &b);

}  // namespace autotune
