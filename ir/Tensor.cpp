#include "ir/Tensor.h"

#include "ir/Hash.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <sstream>

namespace autotune {

const char *dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kInt64: return "int64";
  }
  return "?";
}

Expected<DType> parse_dtype(const std::string &s) {
  if (s == "float32") return DType::kFloat32;
  if (s == "int64") return DType::kInt64;
  return make_error("unknown dtype '" + s + "' (expected float32 or int64)");
}

size_t dtype_size(DType t) { return t == DType::kFloat32 ? 4 : 8; }

int64_t TensorType::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Expected<TensorType> make_type(DType dtype, Shape shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return make_error("negative dimension in shape " + shape_str(shape));
    if (d > 0 && n > kMaxTensorElements / d)
      return make_error("shape " + shape_str(shape) + " has more than 2^34 elements");
    n *= d;
  }
  return TensorType{dtype, std::move(shape)};
}

size_t memory_limit_bytes() {
  uint64_t limit = UINT64_MAX;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) limit = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
  for (int resource : {RLIMIT_AS, RLIMIT_DATA}) {
    rlimit r{};
    if (getrlimit(resource, &r) == 0 && r.rlim_cur != RLIM_INFINITY) limit = std::min<uint64_t>(limit, r.rlim_cur);
  }
  return static_cast<size_t>(std::min<uint64_t>(limit, SIZE_MAX));
}

std::string format_bytes(double bytes) {
  const char *units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (bytes >= 1024 && u < 5) bytes /= 1024, ++u;
  char buf[48];
  if (u == 0) std::snprintf(buf, sizeof buf, "%.0f bytes", bytes);
  else std::snprintf(buf, sizeof buf, "%.3g %s", bytes, units[u]);
  return buf;
}

Status check_allocation(size_t bytes, const std::string &what, size_t in_use) {
  size_t limit = memory_limit_bytes();
  if (bytes <= limit && in_use <= limit - bytes) return Status::ok();
  return make_error(what + " needs " + format_bytes(static_cast<double>(bytes)) +
                    (in_use ? " beside " + format_bytes(static_cast<double>(in_use)) + " already in use" : "") +
                    ", more than the " + format_bytes(static_cast<double>(limit)) + " this process may use");
}

std::string shape_str(const Shape &s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + ")";
}

std::string type_str(const TensorType &t) {
  return "Tensor[" + shape_str(t.shape) + ", " + dtype_name(t.dtype) + "]";
}

namespace {
constexpr size_t kHugePage = size_t{2} << 20;
}  // namespace

/**
 * A zero-filled, 64-byte aligned buffer of at least `bytes` (64 for none), or null.
 *
 * One of 2 MiB or more is mapped on its own, starting on a 2 MiB boundary, with transparent huge
 * pages asked for (MADV_HUGEPAGE: granted when the kernel's THP setting is `always` or `madvise`,
 * ignored under `never`). The tuner forks a child for every compile and every measurement, and
 * fork copies one page-table entry for each 4 KiB page of the parent, whose tensors (a task's
 * data, its packed weights) are most of its 600 MiB: a fork, exit and wait of a 640 MiB process
 * took 19.5 ms in 4 KiB pages and 0.6 ms in huge pages (Zen 4). The length is not rounded up: a tail short of 2 MiB stays in small pages,
 * so no memory is wasted, and the pages are zero as mapped (and faulted in when first used).
 */
std::shared_ptr<uint8_t> zeroed_buffer(size_t bytes) {
  size_t alloc = std::max<size_t>(64, (bytes + 63) / 64 * 64);
  if (alloc >= kHugePage) {
    size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    size_t len = (alloc + page - 1) / page * page;
    void *m = mmap(nullptr, len + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m != MAP_FAILED) {
      // Keep [start, start + len) with start on a 2 MiB boundary; give back the rest.
      uintptr_t base = reinterpret_cast<uintptr_t>(m), start = (base + kHugePage - 1) / kHugePage * kHugePage;
      if (start > base) munmap(m, start - base);
      if (size_t tail = base + len + kHugePage - (start + len); tail > 0) munmap(reinterpret_cast<void *>(start + len), tail);
      auto *p = reinterpret_cast<uint8_t *>(start);
      (void)madvise(p, len, MADV_HUGEPAGE);  // a kernel without THP ignores it: small pages, as before
      return std::shared_ptr<uint8_t>(p, [len](uint8_t *q) { munmap(q, len); });
    }
  }
  void *p = std::aligned_alloc(64, alloc);
  if (!p) return nullptr;
  std::memset(p, 0, alloc);
  return std::shared_ptr<uint8_t>(static_cast<uint8_t *>(p), [](uint8_t *q) { std::free(q); });
}

Tensor::Tensor(TensorType type) : type_(std::move(type)), data_(zeroed_buffer(type_.nbytes())) {
  AT_CHECK(data_ != nullptr, "out of memory allocating " + format_bytes(static_cast<double>(type_.nbytes())));
}

Expected<Tensor> Tensor::allocate(TensorType type, const std::string &what) {
  AT_TRY(check_allocation(type.nbytes(), what));
  Tensor t;
  t.type_ = std::move(type);
  t.data_ = zeroed_buffer(t.type_.nbytes());
  if (!t.data_) return make_error(what + ": out of memory allocating " + format_bytes(static_cast<double>(t.type_.nbytes())));
  return t;
}

float *Tensor::f32() {
  AT_CHECK(type_.dtype == DType::kFloat32, "tensor is " + std::string(dtype_name(type_.dtype)));
  return reinterpret_cast<float *>(data_.get());
}
const float *Tensor::f32() const { return const_cast<Tensor *>(this)->f32(); }
int64_t *Tensor::i64() {
  AT_CHECK(type_.dtype == DType::kInt64, "tensor is " + std::string(dtype_name(type_.dtype)));
  return reinterpret_cast<int64_t *>(data_.get());
}
const int64_t *Tensor::i64() const { return const_cast<Tensor *>(this)->i64(); }

Tensor Tensor::reshaped(const Shape &shape) const {
  Tensor t = *this;
  t.type_.shape = shape;
  AT_CHECK(t.numel() == numel(), "reshape " + shape_str(type_.shape) + " -> " + shape_str(shape));
  return t;
}

Tensor Tensor::clone() const {
  Tensor t(type_);
  if (nbytes()) std::memcpy(t.raw(), raw(), nbytes());
  return t;
}

Tensor scalar_f32(float v) { return tensor_f32({}, {v}); }

Tensor tensor_f32(const Shape &shape, const std::vector<float> &values) {
  Tensor t(TensorType{DType::kFloat32, shape});
  AT_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "value count does not match shape");
  std::memcpy(t.raw(), values.data(), values.size() * sizeof(float));
  return t;
}

Tensor tensor_i64(const Shape &shape, const std::vector<int64_t> &values) {
  Tensor t(TensorType{DType::kInt64, shape});
  AT_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "value count does not match shape");
  std::memcpy(t.raw(), values.data(), values.size() * sizeof(int64_t));
  return t;
}

Tensor random_tensor(const TensorType &type, uint64_t seed, float lo, float hi) {
  Tensor t(type);
  uint64_t state = seed;
  int64_t n = t.numel();
  if (type.dtype == DType::kFloat32) {
    float *p = t.f32();
    for (int64_t i = 0; i < n; ++i) {
      double u = static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53;  // [0, 1)
      p[i] = static_cast<float>(lo + (hi - lo) * u);
    }
  } else {
    int64_t *p = t.i64();
    auto span = static_cast<uint64_t>(std::max<int64_t>(1, static_cast<int64_t>(hi - lo)));
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<int64_t>(lo) + static_cast<int64_t>(splitmix64(state) % span);
  }
  return t;
}

Expected<Difference> compare(const Tensor &a, const Tensor &b) {
  if (a.type() != b.type())
    return make_error("type mismatch: " + type_str(a.type()) + " vs " + type_str(b.type()));
  Difference d;
  int64_t n = a.numel();
  double sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    double x = a.dtype() == DType::kFloat32 ? a.f32()[i] : static_cast<double>(a.i64()[i]);
    double y = b.dtype() == DType::kFloat32 ? b.f32()[i] : static_cast<double>(b.i64()[i]);
    if (std::isnan(x) || std::isnan(y)) {
      if (std::isnan(x) != std::isnan(y)) {
        if (!d.nan_mismatch) d.first_index = i;
        d.nan_mismatch = true;
      }
      continue;
    }
    if (std::isinf(x) || std::isinf(y)) {
      if (x != y && !d.nan_mismatch) {
        d.nan_mismatch = true;
        d.first_index = i;
      }
      continue;
    }
    double e = std::fabs(x - y);
    if (e > d.max_abs) {
      d.max_abs = e;
      d.first_index = i;
    }
    d.max_ref = std::max(d.max_ref, std::fabs(y));
    sq += e * e;
  }
  d.mse = n ? sq / static_cast<double>(n) : 0.0;
  return d;
}

}  // namespace autotune
