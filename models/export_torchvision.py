#!/usr/bin/env python3
"""Exports torchvision models with torch.onnx.export and records PyTorch's own output.

  export_torchvision.py --out DIR [--models resnet18,resnet50,...]

bert_encoder is BERT-base's shape as torch.nn.TransformerEncoder (12 layers, hidden 768, 12
heads, sequence 128), on a (1, 128, 768) input. For each model: seeded random weights (no download; BatchNorm statistics randomized too, so BN
is not an identity; a Linear layer initialized to zero and ConvNeXt's 1e-6 layer scale too, so
no block is hidden), eval mode, a fixed 1x3x224x224 input, opset 13. Two exports per model, the
two forms PyTorch writes: NAME.onnx with BatchNormalization folded into the convs
(TrainingMode.EVAL, constant folding) and NAME_bn.onnx with BatchNormalization kept as its own
node (TrainingMode.PRESERVE). Beside them NAME.input.npy and NAME.torch.npy, PyTorch's output on
that input. Needs Debian's python3-torchvision; never a build or test dependency.
"""
import argparse
import os

import numpy as np
import torch
import torchvision

MODELS = ["resnet18", "resnet50", "mobilenet_v2", "efficientnet_b0", "squeezenet1_0", "densenet121", "googlenet",
          "shufflenet_v2_x1_0", "convnext_tiny", "vit_b_16", "bert_encoder"]


def build(name):
    if name == "bert_encoder":
        # BERT-base's shape as a torch.nn.TransformerEncoder: 12 post-norm layers, hidden 768,
        # 12 heads, feed-forward 3072 with GELU; its input is the embedded sequence (1, 128, 768).
        torch.manual_seed(0)
        def layer():
            return torch.nn.TransformerEncoderLayer(768, 12, 3072, dropout=0.0, activation="gelu", batch_first=True)
        model = torch.nn.TransformerEncoder(layer(), 12, enable_nested_tensor=False)
        for l in model.layers:  # the encoder deep-copies one layer: give each its own weights
            l.load_state_dict(layer().state_dict())
            with torch.no_grad():  # and LayerNorms that are not the identity
                for norm in (l.norm1, l.norm2):
                    norm.weight.uniform_(0.5, 1.5)
                    norm.bias.uniform_(-0.1, 0.1)
        return model.eval()
    kwargs = {"weights": None}
    if name == "googlenet":
        kwargs.update(aux_logits=False, init_weights=True)
    model = getattr(torchvision.models, name)(**kwargs)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                c = m.num_features
                m.weight.copy_(torch.rand(c, generator=g) * 0.5 + 0.5)
                m.bias.copy_(torch.rand(c, generator=g) * 0.2 - 0.1)
                m.running_mean.copy_(torch.rand(c, generator=g) * 0.2 - 0.1)
                m.running_var.copy_(torch.rand(c, generator=g) + 0.5)
            elif isinstance(m, torch.nn.Linear) and not m.weight.any():
                # ViT's head starts at zero: its output would be all zeros and check nothing.
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) * 0.02)
        for name, p in model.named_parameters():
            if name.endswith("layer_scale"):
                # ConvNeXt's layer scale starts at 1e-6, which hides each block's output behind its shortcut.
                p.copy_(torch.rand(p.shape, generator=g) * 0.5 + 0.5)
    return model.eval()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    for name in args.models.split(","):
        model = build(name)
        shape = (1, 128, 768) if name == "bert_encoder" else (1, 3, 224, 224)
        x = torch.rand(*shape, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            y = model(x)
        np.save(os.path.join(args.out, name + ".input.npy"), x.numpy())
        np.save(os.path.join(args.out, name + ".torch.npy"), y.numpy())
        for suffix, mode in (("", torch.onnx.TrainingMode.EVAL), ("_bn", torch.onnx.TrainingMode.PRESERVE)):
            path = os.path.join(args.out, name + suffix + ".onnx")
            torch.onnx.export(model, x, path, opset_version=13, training=mode, do_constant_folding=True,
                              input_names=["input"], output_names=["output"])
        print(f"exported {name}: output {tuple(y.shape)}")


if __name__ == "__main__":
    main()
