#!/usr/bin/env python3
"""Generates autotune's test models as ONNX files with seeded random weights.

  make_models.py --out DIR

ResNet-18 and ResNet-50 follow torchvision's architecture (7x7/2 stem conv, 3x3/2 max pool,
basic or bottleneck blocks with 1x1 downsample convs, global average pool, flatten, gemm) at
opset 13, in both forms torch.onnx.export writes: BatchNormalization folded into the convs
(resnetXX.onnx, as with do_constant_folding in eval mode) and kept as its own node
(resnetXX_bn.onnx). MobileNetV2 and EfficientNet-B0 follow torchvision's too (inverted residuals
with depthwise convs and ReLU6 as Clip; MBConv blocks with SiLU as Sigmoid + Mul and
squeeze-and-excitation), BN folded, at opset 13: the depthwise, small-channel and transcendental
work the ResNets lack. The small models exercise every supported op and opset-specific form:

  tiny_cnn.onnx   conv/bn/relu, residual add, depthwise conv with SAME_UPPER, Clip (input
                  form), HardSwish, pools with pads, count_include_pad and ceil_mode,
                  LeakyRelu, global pool, Flatten, Gemm, Softmax   (opset 14)
  mlp.onnx        MatMul, Gemm with transB=0 / alpha / beta, Sigmoid, HardSigmoid, Sub, Div,
                  Dropout, Identity, Softmax coerced to 2-D   (opset 12)
  shape_ops.onnx  Shape/Gather/Unsqueeze/Concat -> Reshape chains, Transpose, Pad, ReduceMean,
                  Squeeze, Gather of data, two outputs   (opset 13)
  legacy.onnx     attribute forms of Clip, Pad, Unsqueeze and Dropout, Softmax on 3-D   (opset 9)
  transformer.onnx  a BERT-style encoder in small: MatMul by constants (dense layers on 3-D
                  data), Split, batched MatMul, Softmax, LayerNorm decomposed (ReduceMean, Pow,
                  Sqrt, Div) and as LayerNormalization, GELU (Erf), Slice, Tanh, Exp, Log, Neg,
                  Abs, Reciprocal   (opset 17)

Needs only Debian's python3-onnx and python3-numpy. Deterministic: the same bytes every run.
"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class Builder:
    """Accumulates nodes and initializers with torch-exporter-like names (Conv_0, Relu_1, ...)."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []
        self.count = 0

    def init(self, name, array):
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op, inputs, n_out=1, **attrs):
        name = f"{op}_{self.count}"
        self.count += 1
        outs = [f"{name}_out{i}" if i else f"{name}_out" for i in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=name, **attrs))
        return outs[0] if n_out == 1 else outs

    def uniform(self, shape, lo, hi):
        return self.rng.uniform(lo, hi, size=shape).astype(np.float32)

    def conv_weight(self, cout, cin, k):
        std = np.sqrt(2.0 / (cout * k * k))  # kaiming_normal_, mode="fan_out", as torchvision
        return (self.rng.standard_normal((cout, cin, k, k)) * std).astype(np.float32)

    def bn_params(self, c):
        return (self.uniform(c, 0.5, 1.0), self.uniform(c, -0.1, 0.1),
                self.uniform(c, -0.1, 0.1), self.uniform(c, 0.5, 1.5))

    def model(self, inputs, outputs, opset, name):
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        m = helper.make_model(graph, producer_name="autotune-models",
                              opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 7
        onnx.checker.check_model(m)
        return m


def conv_bn(b, x, prefix, cin, cout, k, stride, pad, fold):
    """conv (no bias) + BatchNormalization, or the conv with the BN folded into weight and bias."""
    w = b.conv_weight(cout, cin, k)
    gamma, beta, mean, var = b.bn_params(cout)
    kw = dict(kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4)
    if fold:
        scale = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + 1e-5)
        wf = (w * scale[:, None, None, None]).astype(np.float32)
        bf = (beta - mean * scale).astype(np.float32)
        return b.node("Conv", [x, b.init(prefix + ".weight", wf), b.init(prefix + ".bias", bf)], **kw)
    y = b.node("Conv", [x, b.init(prefix + ".weight", w)], **kw)
    bn = prefix.replace("conv", "bn") if "conv" in prefix else prefix + ".bn"
    return b.node("BatchNormalization", [y, b.init(bn + ".weight", gamma), b.init(bn + ".bias", beta),
                                         b.init(bn + ".running_mean", mean), b.init(bn + ".running_var", var)],
                  epsilon=1e-5)


def resnet(depth, fold):
    bottleneck = depth == 50
    layers = {18: [2, 2, 2, 2], 50: [3, 4, 6, 3]}[depth]
    expansion = 4 if bottleneck else 1
    b = Builder(seed=depth)
    x = conv_bn(b, "input", "conv1", 3, 64, 7, 2, 3, fold)
    x = b.node("Relu", [x])
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    inplanes = 64
    for li, (planes, blocks) in enumerate(zip([64, 128, 256, 512], layers)):
        for bi in range(blocks):
            stride = 2 if (li > 0 and bi == 0) else 1
            p = f"layer{li + 1}.{bi}"
            identity = x
            if bottleneck:
                y = b.node("Relu", [conv_bn(b, x, p + ".conv1", inplanes, planes, 1, 1, 0, fold)])
                y = b.node("Relu", [conv_bn(b, y, p + ".conv2", planes, planes, 3, stride, 1, fold)])
                y = conv_bn(b, y, p + ".conv3", planes, planes * 4, 1, 1, 0, fold)
            else:
                y = b.node("Relu", [conv_bn(b, x, p + ".conv1", inplanes, planes, 3, stride, 1, fold)])
                y = conv_bn(b, y, p + ".conv2", planes, planes, 3, 1, 1, fold)
            if stride != 1 or inplanes != planes * expansion:
                identity = conv_bn(b, x, p + ".downsample.0", inplanes, planes * expansion, 1, stride, 0, fold)
            x = b.node("Relu", [b.node("Add", [y, identity])])
            inplanes = planes * expansion
    x = b.node("GlobalAveragePool", [x])
    x = b.node("Flatten", [x], axis=1)
    fan_in = 512 * expansion
    bound = 1 / np.sqrt(fan_in)
    x = b.node("Gemm", [x, b.init("fc.weight", b.uniform((1000, fan_in), -bound, bound)),
                        b.init("fc.bias", b.uniform(1000, -bound, bound))], alpha=1.0, beta=1.0, transB=1)
    b.nodes[-1].output[0] = "output"
    return b.model([helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 224, 224])],
                   [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 1000])],
                   13, f"resnet{depth}")


def conv_folded(b, x, prefix, cin, cout, k, stride, groups=1):
    """A conv with BatchNormalization folded in (torch.onnx.export in eval mode), 'same' padding."""
    w = b.conv_weight(cout, cin // groups, k)
    gamma, beta, mean, var = b.bn_params(cout)
    scale = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + 1e-5)
    wf = (w * scale[:, None, None, None]).astype(np.float32)
    bf = (beta - mean * scale).astype(np.float32)
    pad = (k - 1) // 2
    return b.node("Conv", [x, b.init(prefix + ".weight", wf), b.init(prefix + ".bias", bf)], kernel_shape=[k, k],
                  strides=[stride, stride], pads=[pad] * 4, group=groups)


def mobile_head(b, x, act, prefix, name):
    """The last 1x1 conv (320 -> 1280) with its activation, the pooled classifier, and the model."""
    x = act(conv_folded(b, x, prefix, 320, 1280, 1, 1))
    x = b.node("GlobalAveragePool", [x])
    x = b.node("Flatten", [x], axis=1)
    bound = 1 / np.sqrt(1280)
    x = b.node("Gemm", [x, b.init("classifier.weight", b.uniform((1000, 1280), -bound, bound)),
                        b.init("classifier.bias", b.uniform(1000, -bound, bound))], alpha=1.0, beta=1.0, transB=1)
    b.nodes[-1].output[0] = "output"
    return b.model([helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 224, 224])],
                   [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 1000])], 13, name)


def inverted_residual(b, x, p, cin, cout, ratio, k, stride, act, se=None):
    """MobileNetV2's block and EfficientNet's MBConv: expand (1x1), depthwise kxk, an optional
    squeeze-and-excitation, project (1x1, linear), and a residual add when the shape allows."""
    hidden = cin * ratio
    y = x if ratio == 1 else act(conv_folded(b, x, p + ".expand", cin, hidden, 1, 1))
    y = act(conv_folded(b, y, p + ".dw", hidden, hidden, k, stride, groups=hidden))
    if se:
        y = se(y, p, cin, hidden)
    y = conv_folded(b, y, p + ".project", hidden, cout, 1, 1)
    return b.node("Add", [x, y]) if stride == 1 and cin == cout else y


def mobilenet_v2():
    b = Builder(seed=102)
    zero, six = b.init("relu6.min", np.array(0.0, np.float32)), b.init("relu6.max", np.array(6.0, np.float32))
    relu6 = lambda x: b.node("Clip", [x, zero, six])
    x = relu6(conv_folded(b, "input", "features.0", 3, 32, 3, 2))
    cin = 32
    for i, (t, c, n, s) in enumerate([(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                                      (6, 160, 3, 2), (6, 320, 1, 1)]):
        for j in range(n):
            x = inverted_residual(b, x, f"features.{i + 1}.{j}", cin, c, t, 3, s if j == 0 else 1, relu6)
            cin = c
    return mobile_head(b, x, relu6, "features.18", "mobilenet_v2")


def efficientnet_b0():
    b = Builder(seed=200)
    silu = lambda x: b.node("Mul", [x, b.node("Sigmoid", [x])])
    x = silu(conv_folded(b, "input", "features.0", 3, 32, 3, 2))
    cin = 32
    stages = [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3), (6, 5, 2, 192, 4),
              (6, 3, 1, 320, 1)]
    def squeeze_excite(y, p, cin, hidden):
        squeeze = max(1, cin // 4)
        se = b.node("GlobalAveragePool", [y])
        se = silu(b.node("Conv", [se, b.init(p + ".se.fc1.weight", b.conv_weight(squeeze, hidden, 1)),
                                  b.init(p + ".se.fc1.bias", b.uniform(squeeze, -0.1, 0.1))]))
        se = b.node("Sigmoid", [b.node("Conv", [se, b.init(p + ".se.fc2.weight", b.conv_weight(hidden, squeeze, 1)),
                                                b.init(p + ".se.fc2.bias", b.uniform(hidden, -0.1, 0.1))])])
        return b.node("Mul", [y, se])

    for i, (ratio, k, s, c, n) in enumerate(stages):
        for j in range(n):
            x = inverted_residual(b, x, f"features.{i + 1}.{j}", cin, c, ratio, k, s if j == 0 else 1, silu, squeeze_excite)
            cin = c
    return mobile_head(b, x, silu, "features.8", "efficientnet_b0")


def tiny_cnn():
    b = Builder(seed=1)
    x = b.node("Relu", [conv_bn(b, "input", "conv1", 3, 8, 3, 1, 1, fold=False)])
    x = b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])                       # 16x16
    y = b.node("Relu", [b.node("Conv", [x, b.init("block.conv1.weight", b.conv_weight(8, 8, 3)),
                                        b.init("block.conv1.bias", b.uniform(8, -0.1, 0.1))], pads=[1, 1, 1, 1])])
    y = b.node("Conv", [y, b.init("block.conv2.weight", b.conv_weight(8, 8, 3)),
                        b.init("block.conv2.bias", b.uniform(8, -0.1, 0.1))], pads=[1, 1, 1, 1])
    x = b.node("Relu", [b.node("Add", [y, x])])
    x = b.node("Conv", [x, b.init("dw.weight", b.conv_weight(8, 1, 3))], group=8, strides=[2, 2],
               auto_pad="SAME_UPPER", kernel_shape=[3, 3])                                 # 8x8
    x = b.node("Clip", [x, b.init("clip.min", np.array(0.0, np.float32)), b.init("clip.max", np.array(6.0, np.float32))])
    x = b.node("Conv", [x, b.init("pw.weight", b.conv_weight(16, 8, 1)), b.init("pw.bias", b.uniform(16, -0.1, 0.1))])
    x = b.node("HardSwish", [x])
    x = b.node("AveragePool", [x], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], count_include_pad=0)
    x = b.node("LeakyRelu", [x], alpha=0.1)
    x = b.node("AveragePool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1)  # 4x4
    x = b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1, dilations=[1, 1])  # 2x2
    x = b.node("GlobalAveragePool", [x])
    x = b.node("Flatten", [x], axis=1)
    x = b.node("Gemm", [x, b.init("fc.weight", b.uniform((10, 16), -0.25, 0.25)), b.init("fc.bias", b.uniform(10, -0.25, 0.25))],
               transB=1)
    x = b.node("Softmax", [x], axis=1)
    b.nodes[-1].output[0] = "output"
    return b.model([helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 32, 32])],
                   [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 10])], 14, "tiny_cnn")


def mlp():
    b = Builder(seed=2)
    x = b.node("MatMul", ["input", b.init("w1", b.uniform((32, 64), -0.2, 0.2))])
    x = b.node("Relu", [b.node("Add", [x, b.init("b1", b.uniform(64, -0.1, 0.1))])])
    x = b.node("Gemm", [x, b.init("w2", b.uniform((64, 16), -0.2, 0.2)), b.init("b2", b.uniform(16, -0.1, 0.1))],
               alpha=0.5, beta=2.0)
    s = b.node("Sigmoid", [x])
    h = b.node("HardSigmoid", [x], alpha=0.3, beta=0.4)
    x = b.node("Sub", [s, h])
    x = b.node("Div", [x, b.init("scale", b.uniform(16, 0.5, 1.5))])
    x = b.node("Clip", [x, b.init("lo", np.array(-0.3, np.float32)), ""])
    x = b.node("Dropout", [x, b.init("ratio", np.array(0.1, np.float32))])
    x = b.node("Identity", [x])
    x = b.node("Gemm", [b.init("a_t", b.uniform((4, 4), -1, 1)), x], transA=1, beta=0.0)  # A^T x, no C
    x = b.node("Reshape", [x, b.init("to3d", np.array([4, 2, 8], np.int64))])
    x = b.node("Softmax", [x], axis=1)  # before opset 13: over the trailing 2x8 block
    b.nodes[-1].output[0] = "output"
    return b.model([helper.make_tensor_value_info("input", TensorProto.FLOAT, [4, 32])],
                   [helper.make_tensor_value_info("output", TensorProto.FLOAT, [4, 2, 8])], 12, "mlp")


def shape_ops():
    b = Builder(seed=3)
    # The Shape -> Gather -> Unsqueeze -> Concat -> Reshape chain older exporters emit for flatten.
    s = b.node("Shape", ["input"])
    n = b.node("Gather", [s, b.init("zero", np.array(0, np.int64))], axis=0)
    n = b.node("Unsqueeze", [n, b.init("axes0", np.array([0], np.int64))])
    c = b.node("Concat", [n, b.init("minus1", np.array([-1], np.int64))], axis=0)
    flat = b.node("Reshape", ["input", c])                                                   # (2, 60)
    t = b.node("Transpose", ["input"], perm=[0, 2, 3, 1])                                     # (2, 4, 5, 3)
    t = b.node("Pad", [t, b.init("pads", np.array([0, 1, 0, 0, 0, 0, 2, 0], np.int64)),
                       b.init("padv", np.array(0.5, np.float32))])                              # (2, 5, 7, 3)
    m = b.node("ReduceMean", [t], axes=[1, -2], keepdims=1)                                    # (2, 1, 1, 3)
    m = b.node("Squeeze", [m, b.init("axes12", np.array([1, 2], np.int64))])                   # (2, 3)
    g = b.node("Gather", [flat, b.init("cols", np.array([[0, 59], [7, -1]], np.int64))], axis=1)  # (2, 2, 2)
    g = b.node("Reshape", [g, b.init("shape24", np.array([0, 4], np.int64))])                  # (2, 4)
    o1 = b.node("Concat", [m, g, flat], axis=-1)                                               # (2, 67)
    b.nodes[-1].output[0] = "output"
    o2 = b.node("Softmax", [b.node("Mul", [m, b.init("k", np.array([[2.0]], np.float32))])])
    b.nodes[-1].output[0] = "probs"
    return b.model([helper.make_tensor_value_info("input", TensorProto.FLOAT, [2, 3, 4, 5])],
                   [helper.make_tensor_value_info("output", TensorProto.FLOAT, [2, 67]),
                    helper.make_tensor_value_info("probs", TensorProto.FLOAT, [2, 3])], 13, "shape_ops")


def legacy():
    b = Builder(seed=4)
    x = b.node("Clip", ["input"], min=-0.5, max=0.75)
    x = b.node("Pad", [x], pads=[0, 1, 0, 0, 2, 0], value=-1.0)                               # (2, 5, 4)
    x = b.node("Unsqueeze", [x], axes=[0])                                                     # (1, 2, 5, 4)
    x = b.node("Dropout", [x], ratio=0.2)
    x = b.node("Squeeze", [x], axes=[0])
    x = b.node("Softmax", [x], axis=1)
    b.nodes[-1].output[0] = "output"
    return b.model([helper.make_tensor_value_info("input", TensorProto.FLOAT, [2, 2, 4])],
                   [helper.make_tensor_value_info("output", TensorProto.FLOAT, [2, 5, 4])], 9, "legacy")


def transformer():
    """A BERT-style encoder in small (2 post-norm layers, hidden 64, 4 heads, 16 tokens, GELU),
    written as torch.onnx.export writes nn.TransformerEncoder, plus a pooler and a classifier."""
    b = Builder(seed=5)
    T, H, heads, F = 16, 64, 4, 128
    d = H // heads

    def const(name, value, dtype=np.float32):
        return b.init(name, np.array(value, dtype))

    def linear(x, cin, cout, p):  # nn.Linear on [1, T, cin]: MatMul by a constant, then the bias
        w = b.init(p + ".w", b.uniform((cin, cout), -1 / np.sqrt(cin), 1 / np.sqrt(cin)))
        return b.node("Add", [b.node("MatMul", [x, w]), b.init(p + ".b", b.uniform(cout, -0.1, 0.1))])

    def layer_norm(x, p, fused):
        g, beta = b.init(p + ".g", b.uniform(H, 0.5, 1.5)), b.init(p + ".beta", b.uniform(H, -0.1, 0.1))
        if fused:  # opset 17's LayerNormalization
            return b.node("LayerNormalization", [x, g, beta], axis=-1, epsilon=1e-5)
        c = b.node("Sub", [x, b.node("ReduceMean", [x], axes=[-1])])
        v = b.node("ReduceMean", [b.node("Pow", [c, const(p + ".two", 2.0)])], axes=[-1])
        y = b.node("Div", [c, b.node("Sqrt", [b.node("Add", [v, const(p + ".eps", 1e-5)])])])
        return b.node("Add", [b.node("Mul", [y, g]), beta])

    def gelu(x, p):  # the erf form: x * 0.5 * (1 + erf(x / sqrt(2)))
        e = b.node("Erf", [b.node("Div", [x, const(p + ".sqrt2", np.sqrt(2.0))])])
        return b.node("Mul", [b.node("Mul", [x, b.node("Add", [e, const(p + ".one", 1.0)])]), const(p + ".half", 0.5)])

    def attention(x, p):
        qkv = linear(x, H, 3 * H, p + ".qkv")
        q, k, v = b.node("Split", [qkv, const(p + ".split", [H, H, H], np.int64)], n_out=3, axis=-1)
        split_heads = const(p + ".heads", [1, T, heads, d], np.int64)
        qh, kh, vh = (b.node("Transpose", [b.node("Reshape", [t, split_heads])], perm=[0, 2, 1, 3]) for t in (q, k, v))
        s = b.node("MatMul", [qh, b.node("Transpose", [kh], perm=[0, 1, 3, 2])])   # batched: [1, heads, T, T]
        a = b.node("Softmax", [b.node("Div", [s, const(p + ".scale", np.sqrt(d))])], axis=-1)
        o = b.node("Transpose", [b.node("MatMul", [a, vh])], perm=[0, 2, 1, 3])
        return linear(b.node("Reshape", [o, const(p + ".merge", [1, T, H], np.int64)]), H, H, p + ".out")

    x = "input"
    for layer in range(2):
        p = f"layers.{layer}"
        x = layer_norm(b.node("Add", [x, attention(x, p + ".attn")]), p + ".norm1", fused=False)
        ffn = linear(gelu(linear(x, H, F, p + ".ff1"), p + ".gelu"), F, H, p + ".ff2")
        x = layer_norm(b.node("Add", [x, ffn]), p + ".norm2", fused=layer == 1)
    # The pooler reads the first token (Slice), then the classifier; a softplus-like tail
    # (Neg, Abs, Exp, Log, Reciprocal) exercises the remaining unary ops.
    cls = b.node("Reshape", [b.node("Slice", [x, const("cls.start", [0], np.int64), const("cls.end", [1], np.int64),
                                               const("cls.axes", [1], np.int64)]), const("cls.shape", [1, H], np.int64)])
    pooled = b.node("Tanh", [b.node("Gemm", [cls, b.init("pool.w", b.uniform((H, H), -0.2, 0.2)),
                                             b.init("pool.b", b.uniform(H, -0.1, 0.1))], transB=1)])
    logits = b.node("Gemm", [pooled, b.init("cls.w", b.uniform((H, 10), -0.3, 0.3)), b.init("cls.b", b.uniform(10, -0.1, 0.1))])
    soft = b.node("Log", [b.node("Add", [b.node("Exp", [b.node("Neg", [b.node("Abs", [logits])])]), const("tail.one", 1.0)])])
    b.node("Add", [logits, b.node("Reciprocal", [b.node("Add", [soft, const("tail.two", 2.0)])])])
    b.nodes[-1].output[0] = "output"
    return b.model([helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, T, H])],
                   [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 10])], 17, "transformer")


def save(model, path):
    tmp = path + ".tmp"
    onnx.save(model, tmp)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    models = {"tiny_cnn": tiny_cnn, "mlp": mlp, "shape_ops": shape_ops, "legacy": legacy,
              "mobilenet_v2": mobilenet_v2, "efficientnet_b0": efficientnet_b0, "transformer": transformer}
    for depth in (18, 50):
        models[f"resnet{depth}"] = lambda d=depth: resnet(d, fold=True)
        models[f"resnet{depth}_bn"] = lambda d=depth: resnet(d, fold=False)
    for name, make in models.items():
        save(make(), os.path.join(args.out, name + ".onnx"))
    print(f"wrote {len(models)} models to {args.out}")


if __name__ == "__main__":
    main()
