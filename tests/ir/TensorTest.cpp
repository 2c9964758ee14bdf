#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>

#include "ir/Tensor.h"

namespace autotune {
namespace {

// Buffers of 2 MiB and more are mapped on 2 MiB boundaries (huge pages where the kernel gives
// them, so a forked child copies few page-table entries); smaller ones come from the heap. Either
// way a new tensor is zero, 64-byte aligned, and a forked child sees the parent's values and its
// own writes stay its own.
TEST(Tensor, LargeBuffersStartOnHugePageBoundariesAndBehaveAsAnyOther) {
  for (int64_t n : {int64_t{1000}, int64_t{(2 << 20) / 4 - 1}, int64_t{(2 << 20) / 4}, int64_t{3 * (1 << 20) + 7}}) {
    Tensor t(TensorType{DType::kFloat32, {n}});
    auto addr = reinterpret_cast<uintptr_t>(t.raw());
    EXPECT_EQ(addr % 64, 0u) << n;
    if (t.nbytes() >= (size_t{2} << 20)) {
      EXPECT_EQ(addr % (size_t{2} << 20), 0u) << n;
    }
    float *f = t.f32();
    bool zero = true;
    for (int64_t i = 0; i < n; ++i) zero &= f[i] == 0.0f;
    EXPECT_TRUE(zero) << n;
    f[0] = 1.5f, f[n - 1] = 2.5f;
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      bool seen = f[0] == 1.5f && f[n - 1] == 2.5f;
      f[0] = 7.0f;  // copy-on-write: the parent keeps its value
      _exit(seen && f[0] == 7.0f ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << n;
    EXPECT_EQ(f[0], 1.5f) << n;
    Tensor copy = t;  // shares the buffer; released once, when the last holder goes
    EXPECT_EQ(copy.raw(), t.raw());
  }
}

}  // namespace
}  // namespace autotune
