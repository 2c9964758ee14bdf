// Files that lie about their sizes, indices out of range and names full of control bytes: each
// gets an error value with one printable line, checked before anything large is allocated. The
// triggering files are built here (tests/OnnxBuilder.h), one per review finding.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "ir/Files.h"
#include "ir/Npy.h"
#include "ir/Pass.h"
#include "ir/Reference.h"
#include "ir/passes/Passes.h"
#include "tests/OnnxBuilder.h"
#include "tests/ir/TestUtil.h"

namespace autotune {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::OnnxBuilder;

TEST(HostileInput, InitializerDimsBeyondItsDataFailBeforeAllocating) {
  // 2^34 floats claimed, 4 bytes present: the importer used to zero-fill 64 GiB first.
  std::string bytes = testing::x_plus_x_model().initializer_raw("w", onnx::TensorProto::FLOAT, {int64_t{1} << 34}, std::string(4, '\0')).bytes();
  EXPECT_LT(bytes.size(), 200u);
  std::string msg = error_of(import_onnx_bytes(bytes, "tiny.onnx"));
  EXPECT_EQ(msg, "tiny.onnx: initializer: tensor 'w': Tensor[(17179869184), float32] needs 17179869184 values "
                 "(68719476736 bytes), the file has 4 bytes");
}

TEST(HostileInput, ImportTimeFoldingHasABudgetRelativeToTheFile) {
  // arange(2^17) as int64, unsqueezed both ways and added: folding it at import would take 128 GiB.
  std::string bytes = testing::range_broadcast_model().bytes();
  EXPECT_LT(bytes.size(), size_t{1100} << 10);
  std::string msg = error_of(import_onnx_bytes(bytes, "range.onnx"));
  EXPECT_EQ(msg.rfind("range.onnx: node 'grid' (Add): folding this constant Tensor[(131072, 131072), int64] would need 128 GiB, "
                      "beyond the import budget of ", 0), 0u) << msg;
}

// Found by autotune_fuzz (tests/fuzz): ONNX's own shape inference trusts the file and crashed on
// a conv weight of rank 5 whose data matches its dims; it now runs only on models the importer
// has validated, so the importer's own message comes first.
TEST(HostileInput, AWeightOfTheWrongRankIsAnErrorBeforeONNXShapeInference) {
  std::vector<float> w(8 * 3 * 3 * 3, 0.5f);
  OnnxBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {1, 3, 8, 8})
      .initializer_f32("w", {8, 3, 3, 3, 1}, w)
      .node("Conv", {"x", "w"}, {"y"}, "conv")
      .output("y", onnx::TensorProto::FLOAT, {1, 8, 6, 6});
  std::string msg = error_of(import_onnx_bytes(b.bytes(), "rank5.onnx"));
  EXPECT_EQ(msg, "rank5.onnx: node 'conv' (Conv): only 2-D convolution is supported (data (1, 3, 8, 8), weight (8, 3, 3, 3, 1))");
}

TEST(HostileInput, SqueezingAScalarIsAnError) {  // found by autotune_fuzz: it read before a vector of size 0
  OnnxBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {1})
      .initializer_f32("s", {}, {2.0f})
      .initializer_i64("axes", {1}, {0})
      .node("Squeeze", {"s", "axes"}, {"t"}, "squeeze")
      .node("Mul", {"x", "t"}, {"y"}, "mul")
      .output("y", onnx::TensorProto::FLOAT, {1});
  std::string msg = error_of(import_onnx_bytes(b.bytes(), "scalar.onnx"));
  EXPECT_EQ(msg, "scalar.onnx: node 'squeeze' (Squeeze): axis 0 out of range for rank 0");
}

TEST(HostileInput, ANaNAttributeIsAnError) {  // found by autotune_fuzz: it broke the graph's own invariants (an abort)
  OnnxBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {4}).node("HardSigmoid", {"x"}, {"y"}, "hs").output("y", onnx::TensorProto::FLOAT, {4});
  onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(b.bytes()));
  auto *a = m.mutable_graph()->mutable_node(0)->add_attribute();
  a->set_name("alpha");
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(std::nanf(""));
  std::string msg = error_of(import_onnx_bytes(m.SerializeAsString(), "nan.onnx"));
  EXPECT_EQ(msg, "nan.onnx: node 'hs' (HardSigmoid): nn.hard_sigmoid: attribute 'alpha' is NaN");
}

TEST(HostileInput, NpyHeaderBeyondItsDataFailsBeforeAllocating) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (131072, 131072), }";
  while ((10 + header.size() + 1) % 64) header += ' ';
  header += '\n';
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(header.size()) + '\0' + header + "abcd";
  std::string msg = error_of(parse_npy_bytes(bytes, "big.npy"));
  EXPECT_EQ(msg, "big.npy: expected 68719476736 bytes of data for Tensor[(131072, 131072), float32], found 4");
}

TEST(HostileInput, DamagedNamesPrintOnOneLine) {
  OnnxBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {1}).node("Hardmax", {"x"}, {"y"}, "bad\nname\x01\xff\xe2\x82\xac").output("y", onnx::TensorProto::FLOAT, {1});
  std::string msg = error_of(import_onnx_bytes(b.bytes(), "names.onnx"));
  EXPECT_EQ(msg, "names.onnx: node 'bad\\nname\\x01\\xff\xe2\x82\xac' (Hardmax): op 'Hardmax' is not supported");  // valid UTF-8 (the euro sign) stays
}

TEST(HostileInput, PrintableEscapesControlBytesAndCutsLongText) {
  EXPECT_EQ(printable("a\tb\r\n\x7f"), "a\\tb\\r\\n\\x7f");
  EXPECT_EQ(printable("\xc0\xaf\xed\xa0\x80"), "\\xc0\\xaf\\xed\\xa0\\x80");  // an overlong '/' and a surrogate
  EXPECT_EQ(printable(std::string(50, 'x'), 10), std::string(10, 'x') + "...");
}

TEST(HostileInput, GatherIndicesOutOfRangeAreAnError) {
  Graph g = testing::parse_ok(
      "def @main(%t: Tensor[(5, 4), float32], %i: Tensor[(3), int64]) -> Tensor[(3, 4), float32] {\n"
      "  %0 = take(%t, %i, axis=0);\n  return %0;\n}");
  Tensor table = random_tensor(g.inputs[0].type, 1);
  auto ok = run_reference(g, {table, tensor_i64({3}, {-5, 0, 4})});  // negative indices count from the end
  ASSERT_TRUE(static_cast<bool>(ok)) << ok.error().message;
  EXPECT_EQ((*ok)[0].f32()[0], table.f32()[0]);
  for (int64_t bad : {int64_t{5}, int64_t{-6}, int64_t{1} << 40}) {
    std::string msg = error_of(run_reference(g, {table, tensor_i64({3}, {0, bad, 1})}));
    EXPECT_EQ(msg, "node %0 (take): index " + std::to_string(bad) + " is out of range [-5, 5)");
  }
}

TEST(HostileInput, AResultBeyondMemoryIsAnErrorNotAnAbort) {
  // A broadcast to 2^34 floats: the reference executor checks the result fits before allocating it.
  if (memory_limit_bytes() > (size_t{200} << 30)) GTEST_SKIP() << "this machine could hold the 128 GiB result";
  Graph g = testing::parse_ok(
      "def @main(%a: Tensor[(131072, 1), float32], %b: Tensor[(1, 131072), float32]) -> Tensor[(131072, 131072), float32] {\n"
      "  %0 = add(%a, %b);\n  return %0;\n}");
  std::string msg = error_of(run_reference(g, random_inputs(g, 1)));
  EXPECT_EQ(msg.rfind("node %0 (add): its result Tensor[(131072, 131072), float32] needs 128 GiB, more than the ", 0), 0u) << msg;
}

TEST(HostileInput, CheckAllocationCountsWhatIsAlreadyInUse) {
  size_t limit = memory_limit_bytes();
  EXPECT_TRUE(static_cast<bool>(check_allocation(limit / 2, "half")));
  EXPECT_FALSE(static_cast<bool>(check_allocation(limit / 2 + 1, "half", limit / 2)));
  EXPECT_FALSE(static_cast<bool>(check_allocation(SIZE_MAX, "everything")));
  if (limit < (size_t{64} << 30)) {
    auto t = Tensor::allocate({DType::kFloat32, {int64_t{1} << 34}}, "t");
    ASSERT_FALSE(static_cast<bool>(t));
    EXPECT_EQ(t.error().message.rfind("t needs 64 GiB, more than the ", 0), 0u) << t.error().message;
  }
}

TEST(HostileInput, FoldConstantsLeavesAGrowingBroadcastUnfolded) {
  // Folding [4096, 1] + [1, 4096] would turn 32 KiB of constants into a 64 MiB one.
  Graph g = testing::parse_ok(
      "def @main(%x: Tensor[(4096, 4096), float32]) -> Tensor[(4096, 4096), float32] {\n"
      "  %a = constant(Tensor[(4096, 1), float32]);\n  %b = constant(Tensor[(1, 4096), float32]);\n"
      "  %0 = add(%a, %b);\n  %1 = add(%x, %0);\n  return %1;\n}");
  auto folded = fold_constants(g);
  ASSERT_TRUE(static_cast<bool>(folded)) << folded.error().message;
  EXPECT_EQ(folded->nodes.size(), 2u);
  // A fold that does not grow the model still happens: a transposed weight.
  Graph t = testing::parse_ok(
      "def @main(%x: Tensor[(2, 8), float32]) -> Tensor[(2, 4), float32] {\n"
      "  %w = constant(Tensor[(8, 4), float32]);\n  %0 = transpose(%w, axes=[1, 0]);\n  %1 = nn.dense(%x, %0);\n  return %1;\n}");
  auto tf = fold_constants(t);
  ASSERT_TRUE(static_cast<bool>(tf));
  EXPECT_EQ(tf->nodes.size(), 1u);
}

TEST(HostileInput, TheFusedStageWithFuseOpsDisabledHasOneOpPerFunction) {
  Graph g = testing::load_model("tiny_cnn");
  PassContext ctx;
  ctx.disabled.insert("fuse-ops");
  auto fused = lower_to_stage(g, Stage::kFused, ctx);
  ASSERT_TRUE(static_cast<bool>(fused)) << fused.error().message;
  auto optimized = lower_to_stage(g, Stage::kOptimized, ctx);
  ASSERT_TRUE(static_cast<bool>(optimized));
  ASSERT_EQ(fused->nodes.size(), optimized->nodes.size());
  for (const Node &n : fused->nodes) {
    ASSERT_TRUE(n.is_function());
    EXPECT_EQ(n.body->nodes.size(), 1u);
  }
  auto inputs = random_inputs(g, 2);
  auto a = run_reference(*fused, inputs), b = run_reference(*optimized, inputs);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(compare((*a)[0], (*b)[0])->max_abs, 0.0);
}

TEST(HostileInput, AtomicWritesLeaveNoTemporaryBehind) {
  fs::path dir = fs::temp_directory_path() / ("autotune_atomic_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  ASSERT_TRUE(static_cast<bool>(write_npy((dir / "y.npy").string(), tensor_f32({2}, {1, 2}))));
  ASSERT_TRUE(static_cast<bool>(write_file_atomic((dir / "y.npy").string(), "replaced")));
  EXPECT_EQ(*read_file((dir / "y.npy").string()), "replaced");
  fs::create_directories(dir / "taken");  // a path that is a directory cannot be replaced by a file
  Status st = write_file_atomic((dir / "taken").string(), "x");
  ASSERT_FALSE(static_cast<bool>(st));
  EXPECT_NE(st.error().message.find("cannot rename into place"), std::string::npos) << st.error().message;
  EXPECT_FALSE(static_cast<bool>(write_file_atomic((dir / "missing" / "y.npy").string(), "x")));
  std::vector<std::string> names;
  for (const auto &e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"taken", "y.npy"}));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace autotune
