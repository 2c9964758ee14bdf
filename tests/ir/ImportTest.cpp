// The ONNX importer: what it builds, and the one-line errors it gives for bad input. Models are
// built here with ONNX's own protobuf API, so each test states exactly what the file holds.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <fstream>

#include "ir/Printer.h"
#include "ir/Reference.h"
#include "tests/ir/TestUtil.h"

namespace autotune {
namespace {

using testing::error_of;

/** A model with one float input "x" of `shape` and the given nodes; the last node's output is the graph's. */
struct ModelBuilder {
  onnx::ModelProto m;
  explicit ModelBuilder(std::vector<int64_t> shape, int opset = 13) {
    m.set_ir_version(7);
    auto *op = m.add_opset_import();
    op->set_domain("");
    op->set_version(opset);
    auto *in = m.mutable_graph()->add_input();
    in->set_name("x");
    auto *tt = in->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    for (int64_t d : shape) tt->mutable_shape()->add_dim()->set_dim_value(d);
    m.mutable_graph()->set_name("g");
  }
  onnx::NodeProto *node(const std::string &op, std::vector<std::string> inputs, const std::string &name) {
    auto *n = m.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (auto &i : inputs) n->add_input(i);
    n->add_output(name + "_out");
    return n;
  }
  void init_i64(const std::string &name, std::vector<int64_t> v) {
    auto *t = m.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<int64_t>(v.size()));
    for (int64_t x : v) t->add_int64_data(x);
  }
  /** The serialized model; the graph output is declared float32 of rank `out_rank`, dims unknown. */
  std::string bytes(int out_rank) {
    auto *out = m.mutable_graph()->add_output();
    out->set_name(m.graph().node(m.graph().node_size() - 1).output(0));
    auto *tt = out->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    for (int i = 0; i < out_rank; ++i) tt->mutable_shape()->add_dim();
    return m.SerializeAsString();
  }
};

TEST(Import, UnsupportedOpNamesFileNodeAndOp) {
  ModelBuilder b({1, 4});
  b.node("Relu", {"x"}, "relu_1");
  b.node("Hardmax", {"relu_1_out"}, "hardmax_7");
  EXPECT_EQ(error_of(import_onnx_bytes(b.bytes(2), "m.onnx")), "m.onnx: node 'hardmax_7' (Hardmax): op 'Hardmax' is not supported");
}

TEST(Import, EveryUnsupportedOpIsNamedAtOnce) {
  // The whole gap in one line: each op with its first node and how many more use it.
  ModelBuilder b({1, 4});
  b.node("Hardmax", {"x"}, "h1");
  b.node("Relu", {"h1_out"}, "relu_2");
  b.node("Hardmax", {"relu_2_out"}, "h3");
  b.node("Softsign", {"h3_out"}, "s4");
  EXPECT_EQ(error_of(import_onnx_bytes(b.bytes(2), "m.onnx")),
            "m.onnx: 2 unsupported ops: 'Hardmax' at node 'h1' and 1 more, 'Softsign' at node 's4'");
}

TEST(Import, MissingFile) {
  EXPECT_EQ(error_of(import_onnx_file("/nonexistent/model.onnx")),
            "/nonexistent/model.onnx: cannot open file (No such file or directory)");
}

TEST(Import, NotAProtobuf) {
  EXPECT_EQ(error_of(import_onnx_bytes("this is not a model", "t.onnx")), "t.onnx: not a valid ONNX protobuf (parse failed)");
  EXPECT_EQ(error_of(import_onnx_bytes("", "e.onnx")), "e.onnx: empty file");
}

TEST(Import, SymbolicInputDimensionIsRejectedWithAHint) {
  ModelBuilder b({1, 4});
  auto *dim = b.m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0);
  dim->set_dim_param("batch");
  b.node("Relu", {"x"}, "r");
  EXPECT_EQ(error_of(import_onnx_bytes(b.bytes(2), "d.onnx")),
            "d.onnx: input 'x' has symbolic dimension 'batch'; autotune needs static shapes (export with fixed input sizes)");
}

TEST(Import, OpsetOutOfRange) {
  ModelBuilder b({4}, 18);
  b.node("Relu", {"x"}, "r");
  EXPECT_EQ(error_of(import_onnx_bytes(b.bytes(1), "o.onnx")), "o.onnx: opset 18 is not supported (autotune reads opsets 1 to 17)");
}

TEST(Import, ThreeDimensionalConvIsRejected) {
  ModelBuilder b({1, 1, 4, 4, 4});
  auto *w = b.m.mutable_graph()->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  for (int i = 0; i < 5; ++i) w->add_dims(1);
  w->add_float_data(1.0f);
  b.node("Conv", {"x", "w"}, "conv3d");
  EXPECT_EQ(error_of(import_onnx_bytes(b.bytes(5), "c.onnx")),
            "c.onnx: node 'conv3d' (Conv): only 2-D convolution is supported (data (1, 1, 4, 4, 4), weight (1, 1, 1, 1, 1))");
}

TEST(Import, InitializerWithWrongDataSizeIsRejected) {
  ModelBuilder b({2});
  auto *t = b.m.mutable_graph()->add_initializer();
  t->set_name("c");
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_dims(2);
  t->set_raw_data(std::string(7, '\0'));
  b.node("Add", {"x", "c"}, "add");
  std::string msg = error_of(import_onnx_bytes(b.bytes(1), "s.onnx"));
  EXPECT_NE(msg.find("s.onnx: "), std::string::npos);
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "errors are one line";
}

TEST(Import, ShapeChainsFoldToConstantsAtImport) {
  // Shape -> Gather -> Unsqueeze -> Concat -> Reshape: the exporter's flatten. Only the reshape remains.
  ModelBuilder b({2, 3, 4});
  b.node("Shape", {"x"}, "shape");
  b.init_i64("zero", {0});
  b.m.mutable_graph()->mutable_initializer(0)->clear_dims();  // a scalar index
  b.node("Gather", {"shape_out", "zero"}, "gather");
  b.init_i64("axes", {0});
  b.node("Unsqueeze", {"gather_out", "axes"}, "unsq");
  b.init_i64("minus1", {-1});
  auto *cat = b.node("Concat", {"unsq_out", "minus1"}, "cat");
  auto *axis = cat->add_attribute();
  axis->set_name("axis");
  axis->set_type(onnx::AttributeProto::INT);
  axis->set_i(0);
  b.node("Reshape", {"x", "cat_out"}, "reshape");
  auto g = import_onnx_bytes(b.bytes(2), "chain.onnx");
  ASSERT_TRUE(static_cast<bool>(g)) << g.error().message;
  ASSERT_EQ(g->nodes.size(), 1u);
  EXPECT_EQ(g->nodes[0].op, "reshape");
  EXPECT_EQ(g->nodes[0].attrs.ints("newshape"), (std::vector<int64_t>{2, 12}));
}

TEST(Import, GemmBecomesDensePlusBias) {
  Graph g = testing::load_model("resnet18");
  const Node &last = g.nodes.back();
  EXPECT_EQ(last.op, "add");
  EXPECT_EQ(g.nodes[last.inputs[0].index].op, "nn.dense");
  EXPECT_EQ(last.type.shape, (Shape{1, 1000}));
}

TEST(Import, ResNetBlocksImportAsConvBnReluAdd) {
  Graph g = testing::load_model("resnet18_bn");
  int convs = 0, bns = 0, adds = 0;
  for (const Node &n : g.nodes) {
    convs += n.op == "nn.conv2d";
    bns += n.op == "nn.batch_norm";
    adds += n.op == "add";
  }
  EXPECT_EQ(convs, 20);  // stem + 8 blocks x 2 + 3 downsamples
  EXPECT_EQ(bns, 20);
  EXPECT_EQ(adds, 8 + 1);  // residual adds + the fc bias
}

TEST(Import, TypesAgreeWithOnnxShapeInferenceOnEveryModel) {
  // The importer checks each node's type against ONNX shape inference as it goes; this makes sure
  // the check ran on real models (not just that import succeeded) by re-verifying the graph.
  for (const char *name : {"tiny_cnn", "mlp", "shape_ops", "legacy", "resnet50_bn", "transformer", "vit_tiny", "modern_cnn"}) {
    SCOPED_TRACE(name);
    Graph g = testing::load_model(name);
    EXPECT_TRUE(static_cast<bool>(verify_graph(g)));
  }
}

}  // namespace
}  // namespace autotune
