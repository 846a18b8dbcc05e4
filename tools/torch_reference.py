#!/usr/bin/env python3
"""The ptxlab network, loss, initialisation, gradient scale and hyperparameters in PyTorch.

    python3 tools/torch_reference.py [--loss mse|half-sse] [--lr 0.2] [--batch 64] [--epochs 8]
                                     [--target 0.97] [--layers 784,128,10] [--bias zero|torch]
                                     [--normalize] [--seed 1] [--device cuda]

Reads MNIST from data/mnist (IDX, .gz or raw), pixels scaled to [0, 1] (--normalize:
standardised with the training mean and std instead). He-uniform weights (bound
sqrt(6/fan_in)); biases zero (--bias torch: PyTorch's default U(+-1/sqrt(fan_in))).
Losses: mse = nn.MSELoss (mean over samples and outputs), half-sse = 0.5 |y - t|^2 per
sample averaged over the batch (the notebook's, and ptxlab's half-sse). Plain SGD.
Prints test accuracy per epoch and the epoch and training time at which --target was
reached. --time-steps N also times N steps eager and N replays of a CUDA graph of one step.
"""
import argparse
import os
import sys
import time

import numpy as np
import torch

from mnist_idx import read_idx


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "mnist"))
    ap.add_argument("--loss", choices=["mse", "half-sse"], default="mse")
    ap.add_argument("--lr", type=float, default=0.2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--target", type=float, default=0.97)
    ap.add_argument("--layers", default="784,128,10")
    ap.add_argument("--bias", choices=["zero", "torch"], default="zero")
    ap.add_argument("--init", choices=["he-uniform", "normal"], default="he-uniform")
    ap.add_argument("--normalize", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--time-steps", type=int, default=0)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    torch.backends.cuda.matmul.allow_tf32 = False

    def load(prefix):
        x = read_idx(os.path.join(a.data, f"{prefix}-images-idx3-ubyte")).reshape(-1, 784).astype(np.float32) / 255.0
        y = read_idx(os.path.join(a.data, f"{prefix}-labels-idx1-ubyte")).astype(np.int64)
        return torch.from_numpy(x).to(dev), torch.from_numpy(y).to(dev)

    xtr, ytr = load("train")
    xte, yte = load("t10k")
    if a.normalize:
        m, s = xtr.mean(), xtr.std()
        xtr, xte = (xtr - m) / s, (xte - m) / s
    ttr = torch.nn.functional.one_hot(ytr, 10).float()

    sizes = [int(v) for v in a.layers.split(",")]
    layers = []
    for i in range(len(sizes) - 1):
        lin = torch.nn.Linear(sizes[i], sizes[i + 1])
        with torch.no_grad():
            if a.init == "he-uniform":
                b = (6.0 / sizes[i]) ** 0.5
                lin.weight.uniform_(-b, b)
                if a.bias == "zero":
                    lin.bias.zero_()
            else:
                lin.weight.normal_(0, 0.01)
                lin.bias.normal_(0, 0.01)
        layers += [lin, torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers[:-1]).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr)

    def loss_fn(y, t):
        if a.loss == "mse":
            return torch.nn.functional.mse_loss(y, t)
        return 0.5 * ((y - t) ** 2).sum(dim=1).mean()

    def step(x, t):
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(model(x), t)
        loss.backward()
        opt.step()
        return loss

    def accuracy():
        with torch.no_grad():
            return (model(xte).argmax(1) == yte).float().mean().item()

    B = a.batch
    steps = len(xtr) // B
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name() if dev.type == 'cuda' else 'cpu'}: "
          f"{a.layers} loss {a.loss} lr {a.lr} batch {B} bias {a.bias} normalize {a.normalize}")
    train_s = 0.0
    reached = None
    for epoch in range(1, a.epochs + 1):
        perm = torch.randperm(len(xtr), device=dev)
        xs, ts = xtr[perm], ttr[perm]
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for k in range(steps):
            step(xs[k * B:(k + 1) * B], ts[k * B:(k + 1) * B])
        if dev.type == "cuda":
            torch.cuda.synchronize()
        train_s += time.perf_counter() - t0
        acc = accuracy()
        print(f"epoch {epoch:2d}  test accuracy {100 * acc:.2f} %  training time {train_s:.2f} s", flush=True)
        if acc >= a.target and reached is None:
            reached = (epoch, train_s)
            break
    if reached:
        print(f"reached {100 * a.target:.2f} % in epoch {reached[0]} after {reached[1]:.2f} s of training")
    else:
        print(f"did not reach {100 * a.target:.2f} % in {a.epochs} epochs")

    if a.time_steps and dev.type == "cuda":
        x, t = xtr[:B].clone(), ttr[:B].clone()
        for _ in range(20):
            step(x, t)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(a.time_steps):
            step(x, t)
        torch.cuda.synchronize()
        eager = (time.perf_counter() - t0) / a.time_steps
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                step(x, t)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            step(x, t)
        for _ in range(20):
            g.replay()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(a.time_steps):
            g.replay()
        torch.cuda.synchronize()
        graph = (time.perf_counter() - t0) / a.time_steps
        print(f"per step at batch {B}: eager {1e6 * eager:.1f} us, CUDA graph {1e6 * graph:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
