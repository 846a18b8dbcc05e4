#!/usr/bin/env python3
"""Load a ptxlab checkpoint in PyTorch through safetensors and evaluate it on MNIST.

    python3 tools/torch_eval_checkpoint.py model.safetensors [--data data/mnist] [--expect 0.9712]

The checkpoint holds fc1.weight [H][I], fc1.bias [H], fc2.weight [O][H], fc2.bias [O]
(and fc3.* for 3 layers): the state_dict of the torch module below. Prints the test
accuracy in float32 and float64; with --expect, exits 1 unless the float32 accuracy
equals the given one (the accuracy `ptxlab train` printed).
"""
import argparse
import os
import sys

import numpy as np
import torch

from mnist_idx import read_idx
from safetensors.torch import load_file


class MLP(torch.nn.Module):
    def __init__(self, sizes):
        super().__init__()
        for k in range(len(sizes) - 1):
            setattr(self, f"fc{k + 1}", torch.nn.Linear(sizes[k], sizes[k + 1]))
        self.layers = len(sizes) - 1

    def forward(self, x):
        for k in range(1, self.layers + 1):
            x = getattr(self, f"fc{k}")(x)
            if k < self.layers:
                x = torch.relu(x)
        return x


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint")
    ap.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "data", "mnist"))
    ap.add_argument("--expect", type=float, help="accuracy printed by ptxlab train (a fraction)")
    args = ap.parse_args()

    # A ptxlab checkpoint may also hold the optimizer's state ("optimizer.*", for train --resume).
    state = {k: v for k, v in load_file(args.checkpoint).items() if k.startswith("fc")}
    n = len(state) // 2
    sizes = [state["fc1.weight"].shape[1]] + [state[f"fc{k}.weight"].shape[0] for k in range(1, n + 1)]
    model = MLP(sizes)
    model.load_state_dict(state)  # strict: names and shapes must match

    images = read_idx(os.path.join(args.data, "t10k-images-idx3-ubyte"))
    labels = torch.from_numpy(read_idx(os.path.join(args.data, "t10k-labels-idx1-ubyte")).astype(np.int64))
    x = torch.from_numpy(images.reshape(len(images), -1).astype(np.float32)) / 255.0

    torch.backends.cuda.matmul.allow_tf32 = False
    results = {}
    with torch.no_grad():
        for name, dtype in (("float32", torch.float32), ("float64", torch.float64)):
            pred = model.to(dtype)(x.to(dtype)).argmax(dim=1)
            results[name] = (pred == labels).float().mean().item()
    sizes_text = "-".join(map(str, sizes))
    print(f"torch {torch.__version__}: {args.checkpoint} ({sizes_text}) test accuracy "
          f"float32 {100 * results['float32']:.2f} %, float64 {100 * results['float64']:.2f} % on {len(labels)} images")
    if args.expect is not None:
        same = round(results["float32"] * len(labels)) == round(args.expect * len(labels))
        print(f"ptxlab reported {100 * args.expect:.2f} %: {'same' if same else 'DIFFERENT'}")
        return 0 if same else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
