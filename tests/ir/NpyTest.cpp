#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "ir/Npy.h"
#include "tests/ir/TestUtil.h"

namespace autotune {
namespace {

namespace fs = std::filesystem;

std::string tmp(const std::string &name) { return (fs::temp_directory_path() / ("autotune_npy_" + name)).string(); }

TEST(Npy, RoundTripsFloatAndInt) {
  for (const Tensor &t : {random_tensor({DType::kFloat32, {2, 3, 5}}, 9), tensor_i64({3}, {1, -2, 3}), scalar_f32(2.5f)}) {
    std::string p = tmp("rt.npy");
    ASSERT_TRUE(static_cast<bool>(write_npy(p, t)));
    auto r = read_npy(p);
    ASSERT_TRUE(static_cast<bool>(r)) << r.error().message;
    EXPECT_EQ(r->type(), t.type());
    EXPECT_EQ(compare(*r, t)->max_abs, 0.0);
    fs::remove(p);
  }
}

std::string write_raw(const std::string &name, const std::string &header, size_t data_bytes) {
  std::string h = header;
  while ((10 + h.size() + 1) % 64) h += ' ';
  h += '\n';
  std::string p = tmp(name);
  std::ofstream f(p, std::ios::binary);
  f.write("\x93NUMPY\x01\x00", 8);
  char len[2] = {static_cast<char>(h.size() & 0xff), static_cast<char>(h.size() >> 8)};
  f.write(len, 2);
  f << h << std::string(data_bytes, '\0');
  return p;
}

TEST(Npy, BoolsReadAsInt64ZeroAndOne) {
  // numpy's bool (an attention mask): one byte each, any nonzero byte is true.
  std::string p = write_raw("mask.npy", "{'descr': '|b1', 'fortran_order': False, 'shape': (2, 2), }", 0);
  std::ofstream(p, std::ios::binary | std::ios::app).write("\x00\x01\x07\x00", 4);
  auto t = read_npy(p);
  ASSERT_TRUE(static_cast<bool>(t)) << t.error().message;
  EXPECT_EQ(type_str(t->type()), "Tensor[(2, 2), int64]");
  EXPECT_EQ(std::vector<int64_t>(t->i64(), t->i64() + 4), (std::vector<int64_t>{0, 1, 1, 0}));
  fs::remove(p);
}

TEST(Npy, RejectsOtherDtypesFortranOrderAndTruncation) {
  EXPECT_EQ(testing::error_of(read_npy(write_raw("f8.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", 16))),
            tmp("f8.npy") + ": dtype '<f8' is not supported (float32 '<f4', int64 '<i8' or bool '|b1')");
  EXPECT_EQ(testing::error_of(read_npy(write_raw("fo.npy", "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16))),
            tmp("fo.npy") + ": Fortran-order arrays are not supported (save with np.ascontiguousarray)");
  EXPECT_EQ(testing::error_of(read_npy(write_raw("tr.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }", 12))),
            tmp("tr.npy") + ": expected 16 bytes of data for Tensor[(2, 2), float32], found 12");
  EXPECT_EQ(testing::error_of(read_npy(write_raw("b1.npy", "{'descr': '|b1', 'fortran_order': False, 'shape': (2, 3), }", 5))),
            tmp("b1.npy") + ": expected 6 bytes of data for bool(2, 3), found 5");
  std::ofstream(tmp("junk.npy")) << "junk";
  EXPECT_EQ(testing::error_of(read_npy(tmp("junk.npy"))), tmp("junk.npy") + ": not a .npy file (bad magic)");
  for (const char *name : {"f8.npy", "fo.npy", "tr.npy", "b1.npy", "junk.npy"}) fs::remove(tmp(name));
}

}  // namespace
}  // namespace autotune
