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
  transformer.onnx  a BERT-style encoder in small: embeddings (Gather of int64 token ids),
                  MatMul by constants (dense layers on 3-D data), Split, batched MatMul,
                  Softmax, LayerNorm decomposed (ReduceMean, Pow, Sqrt, Div) and as
                  LayerNormalization, GELU (Erf), Slice, Tanh, Exp, Log, Neg, Abs, Reciprocal
                  (opset 17)
  vit_tiny.onnx   a ViT-style encoder in small: patches by a strided conv, the class token as
                  torch exports it (ConstantOfShape, Equal, Where, Expand, Cast, Concat),
                  pre-norm layers with LayerNormalization   (opset 17)
  modern_cnn.onnx a ConvNeXt block (7x7 depthwise conv, channels-last LayerNorm, GELU MLP,
                  layer scale) and a ShuffleNetV2 block (Split, Concat, channel shuffle)
                  (opset 13)

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


class Encoder:
    """Transformer pieces as torch.onnx.export writes them (opset 13 forms; LayerNormalization
    where asked), for `tokens` tokens of width `hidden` on a [1, tokens, hidden] sequence."""

    def __init__(self, b, tokens, hidden, heads, ffn):
        self.b, self.T, self.H, self.heads, self.F = b, tokens, hidden, heads, ffn

    def const(self, name, value, dtype=np.float32):
        return self.b.init(name, np.array(value, dtype))

    def linear(self, x, cin, cout, p):  # nn.Linear on [1, T, cin]: MatMul by a constant, then the bias
        b = self.b
        w = b.init(p + ".w", b.uniform((cin, cout), -1 / np.sqrt(cin), 1 / np.sqrt(cin)))
        return b.node("Add", [b.node("MatMul", [x, w]), b.init(p + ".b", b.uniform(cout, -0.1, 0.1))])

    def layer_norm(self, x, p, fused, width=None):
        b, width = self.b, width or self.H
        g, beta = b.init(p + ".g", b.uniform(width, 0.5, 1.5)), b.init(p + ".beta", b.uniform(width, -0.1, 0.1))
        if fused:  # opset 17's LayerNormalization
            return b.node("LayerNormalization", [x, g, beta], axis=-1, epsilon=1e-5)
        c = b.node("Sub", [x, b.node("ReduceMean", [x], axes=[-1])])
        v = b.node("ReduceMean", [b.node("Pow", [c, self.const(p + ".two", 2.0)])], axes=[-1])
        y = b.node("Div", [c, b.node("Sqrt", [b.node("Add", [v, self.const(p + ".eps", 1e-5)])])])
        return b.node("Add", [b.node("Mul", [y, g]), beta])

    def gelu(self, x, p):  # the erf form: x * 0.5 * (1 + erf(x / sqrt(2)))
        b = self.b
        e = b.node("Erf", [b.node("Div", [x, self.const(p + ".sqrt2", np.sqrt(2.0))])])
        return b.node("Mul", [b.node("Mul", [x, b.node("Add", [e, self.const(p + ".one", 1.0)])]), self.const(p + ".half", 0.5)])

    def attention(self, x, p):
        b, T, H, heads = self.b, self.T, self.H, self.heads
        d = H // heads
        qkv = self.linear(x, H, 3 * H, p + ".qkv")
        q, k, v = b.node("Split", [qkv, self.const(p + ".split", [H, H, H], np.int64)], n_out=3, axis=-1)
        split_heads = self.const(p + ".heads", [1, T, heads, d], np.int64)
        qh, kh, vh = (b.node("Transpose", [b.node("Reshape", [t, split_heads])], perm=[0, 2, 1, 3]) for t in (q, k, v))
        s = b.node("MatMul", [qh, b.node("Transpose", [kh], perm=[0, 1, 3, 2])])   # batched: [1, heads, T, T]
        a = b.node("Softmax", [b.node("Div", [s, self.const(p + ".scale", np.sqrt(d))])], axis=-1)
        o = b.node("Transpose", [b.node("MatMul", [a, vh])], perm=[0, 2, 1, 3])
        return self.linear(b.node("Reshape", [o, self.const(p + ".merge", [1, T, H], np.int64)]), H, H, p + ".out")

    def layer(self, x, p, pre_norm, fused_ln=False):
        """BERT's post-norm layer (LN after each residual add) or ViT's pre-norm one."""
        b, H, F = self.b, self.H, self.F
        mlp = lambda y: self.linear(self.gelu(self.linear(y, H, F, p + ".ff1"), p + ".gelu"), F, H, p + ".ff2")
        if pre_norm:
            x = b.node("Add", [x, self.attention(self.layer_norm(x, p + ".norm1", fused_ln), p + ".attn")])
            return b.node("Add", [x, mlp(self.layer_norm(x, p + ".norm2", fused_ln))])
        x = self.layer_norm(b.node("Add", [x, self.attention(x, p + ".attn")]), p + ".norm1", False)
        return self.layer_norm(b.node("Add", [x, mlp(x)]), p + ".norm2", fused_ln)

    def first_token(self, x, p):
        """x[:, 0] as [1, hidden]: a Slice of the token axis (the pooler's and ViT's class token)."""
        b = self.b
        t = b.node("Slice", [x, self.const(p + ".start", [0], np.int64), self.const(p + ".end", [1], np.int64),
                             self.const(p + ".axes", [1], np.int64)])
        return b.node("Reshape", [t, self.const(p + ".shape", [1, self.H], np.int64)])


def transformer():
    """A BERT-style encoder in small: token and position embeddings (Gather of int64 ids), 2
    post-norm layers (hidden 64, 4 heads, 16 tokens, GELU), a pooler and a classifier."""
    b = Builder(seed=5)
    e = Encoder(b, tokens=16, hidden=64, heads=4, ffn=128)
    words = b.node("Gather", [b.init("embed.words", b.uniform((100, 64), -1, 1)), "input"], axis=0)   # [1, 16, 64]
    x = e.layer_norm(b.node("Add", [words, b.init("embed.pos", b.uniform((1, 16, 64), -0.5, 0.5))]), "embed.norm", False)
    for layer in range(2):
        x = e.layer(x, f"layers.{layer}", pre_norm=False, fused_ln=layer == 1)
    pooled = b.node("Tanh", [b.node("Gemm", [e.first_token(x, "cls"), b.init("pool.w", b.uniform((64, 64), -0.2, 0.2)),
                                             b.init("pool.b", b.uniform(64, -0.1, 0.1))], transB=1)])
    logits = b.node("Gemm", [pooled, b.init("cls.w", b.uniform((64, 10), -0.3, 0.3)), b.init("cls.b", b.uniform(10, -0.1, 0.1))])
    # A softplus-like tail (Neg, Abs, Exp, Log, Reciprocal) exercises the remaining unary ops.
    soft = b.node("Log", [b.node("Add", [b.node("Exp", [b.node("Neg", [b.node("Abs", [logits])])]), e.const("tail.one", 1.0)])])
    b.node("Add", [logits, b.node("Reciprocal", [b.node("Add", [soft, e.const("tail.two", 2.0)])])])
    b.nodes[-1].output[0] = "output"
    return b.model([helper.make_tensor_value_info("input", TensorProto.INT64, [1, 16])],
                   [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 10])], 17, "transformer")


def vit_tiny():
    """A ViT-style encoder in small: 4x4 patches of a 32x32 image (a strided conv), the class
    token prepended as torch exports it (ConstantOfShape, Equal, Where, Expand, Concat), position
    embeddings, 2 pre-norm layers with LayerNormalization, the class token's head."""
    b = Builder(seed=6)
    e = Encoder(b, tokens=65, hidden=48, heads=3, ffn=96)
    patches = b.node("Conv", ["input", b.init("patch.w", b.conv_weight(48, 3, 4)), b.init("patch.b", b.uniform(48, -0.1, 0.1))],
                     kernel_shape=[4, 4], strides=[4, 4])                                           # [1, 48, 8, 8]
    seq = b.node("Transpose", [b.node("Reshape", [patches, e.const("seq", [1, 48, 64], np.int64)])], perm=[0, 2, 1])
    ones = b.node("ConstantOfShape", [e.const("cls.rank", [3], np.int64)],
                  value=helper.make_tensor("one", TensorProto.INT64, [1], [1]))
    want = e.const("cls.want", [1, -1, -1], np.int64)  # expand(1, -1, -1): -1 keeps a dim
    keep = b.node("Equal", [want, b.node("Mul", [ones, e.const("cls.minus1", -1, np.int64)])])
    shape = b.node("Where", [keep, ones, want])
    cls = b.node("Expand", [b.init("cls.token", b.uniform((1, 1, 48), -1, 1)), b.node("Mul", [shape, b.node("Cast", [ones], to=TensorProto.INT64)])])
    x = b.node("Add", [b.node("Concat", [cls, seq], axis=1), b.init("pos", b.uniform((1, 65, 48), -0.5, 0.5))])
    for layer in range(2):
        x = e.layer(x, f"layers.{layer}", pre_norm=True, fused_ln=True)
    x = e.layer_norm(x, "final", fused=True)
    b.node("Gemm", [e.first_token(x, "head"), b.init("head.w", b.uniform((10, 48), -0.3, 0.3)), b.init("head.b", b.uniform(10, -0.1, 0.1))], transB=1)
    b.nodes[-1].output[0] = "output"
    return b.model([helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 32, 32])],
                   [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 10])], 17, "vit_tiny")


def modern_cnn():
    """A ConvNeXt block (7x7 depthwise conv, channels-last LayerNorm, MLP with GELU, layer
    scale, residual) and a ShuffleNetV2 block (Split, branch, Concat, channel shuffle), opset 13."""
    b = Builder(seed=7)
    e = Encoder(b, tokens=64, hidden=32, heads=1, ffn=128)
    x = b.node("Conv", ["input", b.init("stem.w", b.conv_weight(32, 3, 4)), b.init("stem.b", b.uniform(32, -0.1, 0.1))],
               kernel_shape=[4, 4], strides=[4, 4])                                                   # [1, 32, 8, 8]
    # ConvNeXt: dwconv 7x7 -> NHWC -> LN -> Linear 4x -> GELU -> Linear -> layer scale -> NCHW -> + x.
    y = b.node("Conv", [x, b.init("cnx.dw.w", b.conv_weight(32, 1, 7)), b.init("cnx.dw.b", b.uniform(32, -0.1, 0.1))],
               kernel_shape=[7, 7], pads=[3, 3, 3, 3], group=32)
    y = e.layer_norm(b.node("Transpose", [y], perm=[0, 2, 3, 1]), "cnx.norm", False)               # [1, 8, 8, 32]
    y = e.linear(e.gelu(e.linear(y, 32, 128, "cnx.pw1"), "cnx.gelu"), 128, 32, "cnx.pw2")
    y = b.node("Transpose", [b.node("Mul", [y, b.init("cnx.scale", b.uniform(32, 0.5, 1.0))])], perm=[0, 3, 1, 2])
    x = b.node("Add", [x, y])
    # ShuffleNetV2, stride 1: half the channels through 1x1, dw 3x3, 1x1; concat; shuffle 2 groups.
    keep, go = b.node("Split", [x, e.const("shf.split", [16, 16], np.int64)], n_out=2, axis=1)
    y = b.node("Relu", [conv_folded(b, go, "shf.pw1", 16, 16, 1, 1)])
    y = conv_folded(b, y, "shf.dw", 16, 16, 3, 1, groups=16)
    y = b.node("Relu", [conv_folded(b, y, "shf.pw2", 16, 16, 1, 1)])
    y = b.node("Reshape", [b.node("Concat", [keep, y], axis=1), e.const("shf.groups", [1, 2, 16, 8, 8], np.int64)])
    x = b.node("Reshape", [b.node("Transpose", [y], perm=[0, 2, 1, 3, 4]), e.const("shf.back", [1, 32, 8, 8], np.int64)])
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])])
    b.node("Gemm", [x, b.init("fc.w", b.uniform((10, 32), -0.3, 0.3)), b.init("fc.b", b.uniform(10, -0.1, 0.1))], transB=1)
    b.nodes[-1].output[0] = "output"
    return b.model([helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 32, 32])],
                   [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 10])], 13, "modern_cnn")


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
              "mobilenet_v2": mobilenet_v2, "efficientnet_b0": efficientnet_b0, "transformer": transformer,
              "vit_tiny": vit_tiny, "modern_cnn": modern_cnn}
    for depth in (18, 50):
        models[f"resnet{depth}"] = lambda d=depth: resnet(d, fold=True)
        models[f"resnet{depth}_bn"] = lambda d=depth: resnet(d, fold=False)
    for name, make in models.items():
        save(make(), os.path.join(args.out, name + ".onnx"))
    print(f"wrote {len(models)} models to {args.out}")


if __name__ == "__main__":
    main()
