#!/usr/bin/env python3
"""Load a ptxlab checkpoint in PyTorch through safetensors and evaluate it on MNIST.

    python3 tools/torch_eval_checkpoint.py model.safetensors [--data data/mnist] [--expect 0.9712]

An MLP checkpoint holds fc1.weight [H][I], fc1.bias [H], fc2.weight [O][H], fc2.bias [O] (and fc3.*
for 3 layers); a --model checkpoint (a CNN) holds conv1.weight [out][in][k][k], conv1.bias, ...,
fc1.weight [out][C*H*W] (the NCHW flatten), ..., and for a bn layer bn1.weight, bn1.bias and its
buffers bn1.running_mean, bn1.running_var, bn1.num_batches_tracked (I64), with its spec in the
metadata ("model"). Either is
the state_dict of the nn.Sequential that tools/ptxlab_model.py builds from the spec, loaded
strictly (names and shapes must match), and evaluated in eval mode (BatchNorm on its running
statistics, as `ptxlab eval` and the test evaluations of `ptxlab train`). The hidden activation is the metadata's
"train.activation" (ReLU when absent, as older checkpoints). Prints the test accuracy in float32
and float64; with --expect, exits 1 unless the float32 accuracy equals the given one (the accuracy
`ptxlab train` printed). Exit 2 for a file that is not a ptxlab checkpoint.
"""
import argparse
import os
import sys

import numpy as np
import torch

from mnist_idx import read_idx
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ptxlab_model  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint")
    ap.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "data", "mnist"))
    ap.add_argument("--expect", type=float, help="accuracy printed by ptxlab train (a fraction)")
    args = ap.parse_args()

    # A ptxlab checkpoint may also hold the optimizer's state ("optimizer.*", for train --resume).
    try:
        layers, problems = ptxlab_model.check_checkpoint(args.checkpoint)
        meta, _ = ptxlab_model.read_header(args.checkpoint)
    except (ptxlab_model.SpecError, OSError, ValueError, KeyError) as e:
        print(f"torch_eval_checkpoint: {args.checkpoint}: {e}", file=sys.stderr)
        return 2
    if problems:
        print(f"torch_eval_checkpoint: {args.checkpoint}: " + "; ".join(problems), file=sys.stderr)
        return 2
    activation = meta.get("train.activation", "relu")
    state = {k: v for k, v in load_file(args.checkpoint).items() if not k.startswith("optimizer.")}
    model = ptxlab_model.build_sequential(torch, layers, activation)
    model.load_state_dict(state)  # strict: names and shapes must match (the bn buffers included)
    model.eval()  # BatchNorm on its running statistics
    spec = ptxlab_model.model_text(layers)

    images = read_idx(os.path.join(args.data, "t10k-images-idx3-ubyte"))
    labels = torch.from_numpy(read_idx(os.path.join(args.data, "t10k-labels-idx1-ubyte")).astype(np.int64))
    x = torch.from_numpy(images.reshape(len(images), -1).astype(np.float32)) / 255.0

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False  # full float32 convolutions, as ptxlab
    results = {}
    with torch.no_grad():
        for name, dtype in (("float32", torch.float32), ("float64", torch.float64)):
            pred = model.to(dtype)(x.to(dtype)).argmax(dim=1)
            results[name] = (pred == labels).float().mean().item()
    print(f"torch {torch.__version__}: {args.checkpoint} ({spec}, {activation}) test accuracy "
          f"float32 {100 * results['float32']:.2f} %, float64 {100 * results['float64']:.2f} % on {len(labels)} images")
    if args.expect is not None:
        same = round(results["float32"] * len(labels)) == round(args.expect * len(labels))
        print(f"ptxlab reported {100 * args.expect:.2f} %: {'same' if same else 'DIFFERENT'}")
        return 0 if same else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
