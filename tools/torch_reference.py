#!/usr/bin/env python3
"""ptxlab's training recipe in PyTorch: the same network, init, loss, optimizer, schedule and logs.

    python3 tools/torch_reference.py [--layers 784,128,10 | --model SPEC] [--batch 64] [--lr 0.1] [--epochs 5] [--seed 1]
        [--init torch|he-uniform|he-normal|xavier|notebook] [--loss ce|mse|half-sse]
        [--optimizer sgd|momentum|nesterov|adam|adamw|rmsprop|nadam] [--momentum 0.9] [--weight-decay 0]
        [--beta1 0.9] [--beta2 0.999] [--eps 1e-8] [--alpha 0.99]
        [--schedule const|cosine|onecycle|step] [--warmup 0.2] [--step-every N] [--gamma 0.1]
        [--activation relu|leaky-relu|tanh|sigmoid|gelu] [--evals-per-epoch 20] [--target 0.98]
        [--stop-at-target] [--max-steps N] [--log LOG.csv] [--log-steps STEPS.csv]
        [--init-from ptxlab.safetensors] [--order torch|ptxlab] [--save OUT.safetensors]
        [--data data/mnist] [--device cuda] [--normalize] [--time-steps N]
    python3 tools/torch_reference.py --self-test        # no torch or numpy needed

The defaults are ptxlab train's recipe: softmax cross-entropy, SGD with Nesterov momentum 0.9,
one-cycle schedule (linear warm-up from 0 over the first 20 % of the steps, then linear decay to 0),
nn.Linear's default init, ReLU, batch 64, peak lr 0.1, 5 epochs.

Network: --layers 784,128,10 (an MLP) or --model SPEC, ptxlab's layer list (conv32,pool,conv64,
pool,fc128,fc10; `cnn` names that one; the grammar and the module are in tools/ptxlab_model.py).
Either way the module is an nn.Sequential whose parameters are named as in ptxlab's checkpoints
(conv1.weight, ..., fc1.weight, ...), so --init-from and --save exchange weights with ptxlab.

Data: MNIST from --data (IDX, raw or .gz), pixels float32(byte) / 255 as ptxlab (host/data/idx.cpp).
Each epoch runs K = floor(60000 / B) steps (the last partial batch is dropped); S = epochs * K.

Recipe (the formulas of host/reference/recipe.hpp):
  init      fan_in, fan_out as torch.nn.init computes them (conv: in*k*k, out*k*k);
            torch: weights and biases ~ U(+-1/sqrt(fan_in)) (nn.Linear's and nn.Conv2d's default);
            he-uniform: U(+-sqrt(6/fan_in)) weights; he-normal: N(0, 2/fan_in) weights;
            xavier: U(+-sqrt(6/(fan_in+fan_out))) weights (these three: zero biases);
            notebook: weights and biases ~ N(0, 0.01^2). Drawn from torch's RNG (--seed),
            so not the same numbers as ptxlab's; --init-from starts from ptxlab's weights.
  loss      ce = F.cross_entropy (mean over the batch); mse = F.mse_loss on one-hot targets;
            half-sse = 0.5 * sum((y - t)^2) / B.
  optimizer sgd / momentum / nesterov = torch.optim.SGD (dampening 0, momentum --momentum,
            nesterov for nesterov); adam, adamw = torch.optim.Adam / AdamW (--beta1 --beta2 --eps,
            --weight-decay, also for AdamW: default 0); nadam = torch.optim.NAdam (momentum_decay
            0.004, --weight-decay added to the gradient); rmsprop = torch.optim.RMSprop (--alpha, --eps,
            no momentum, not centered). --weight-decay goes to every optimizer.
  schedule  W = round(warmup * S) (halves away from 0, as C++ std::round); step s (0-based) uses
            lr(s) = peak * s / W for s < W, then const: peak; onecycle: peak * (S - s) / (S - W);
            cosine: peak * (1 + cos(pi (s - W) / (S - W))) / 2; step: peak * gamma^floor(s / step_every).
            Applied through torch.optim.lr_scheduler.LambdaLR, stepped after each optimizer.step().
            --max-steps stops early but does not shorten the schedule (S stays epochs * K).
  activation hidden layers only (every conv and fc but the last): relu, leaky-relu (slope 0.01), tanh,
            sigmoid, gelu (exact, erf).

Batch order: --order torch (default) draws each epoch's permutation with torch.randperm (seeded);
--order ptxlab follows ptxlab train's order exactly: its SplitMix64 seeded with seed ^ 0x5eed5eed5eed5eed,
the identity order shuffled by Fisher-Yates each epoch (host/platform/rng.cpp, host/train/train.cpp), batch k of an
epoch = order[k*B : (k+1)*B]. --self-test checks this port against SplitMix64's published outputs and
against values produced by host/platform/rng.cpp.

Evaluation: the 10,000 test images after epoch-local steps floor(j * K / N) for j = 1..N (N =
--evals-per-epoch; j = N is the end of the epoch, so N = 1 is once per epoch).

Logs (CSV):
  --log        step,epoch,train_loss,test_loss,test_accuracy,train_s,elapsed_s,lr  one row per evaluation:
               step = steps done; train_loss = mean batch loss since the previous evaluation;
               test_accuracy a fraction; train_s = training time so far without evaluation (the
               per-epoch shuffle order is drawn outside it, the gather of the batch rows inside);
               elapsed_s = train_s + evaluation time; lr = the lr the last step used.
  --log-steps  step,epoch,loss,lr  one row per step: step is 1-based (the row for the first step has
               step 1, the same numbering as --log), loss = the batch loss before that step's update,
               lr = the lr that step used.
Compare two --log-steps files with tools/compare_steps.py; plot --log files with tools/plot_curves.py.

Prints each evaluation, then the final accuracy and the step and training time at which --target was
first reached. --time-steps N also times N steps of this recipe eager and N replays of a CUDA graph of
one step (Adam, AdamW, RMSprop with capturable=True there). TF32 is off. Exit status: 0, 1 if the loss
went non-finite (training diverged) or --self-test failed, 2 for bad flags or files.
"""
import argparse
import contextlib
import io
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ptxlab_model  # noqa: E402 (beside this file; pure Python)

MASK64 = (1 << 64) - 1
SHUFFLE_SEED_XOR = 0x5EED5EED5EED5EED  # host/train/train.cpp: Rng shuffle_rng(cfg.seed ^ 0x5eed5eed5eed5eedull)


# ---- ptxlab's PRNG (host/platform/rng.cpp), bit for bit ----------------------------------------------------

class SplitMix64:
    """ptxlab::Rng: SplitMix64 with uint64 wrap-around done by masking Python ints."""

    def __init__(self, seed):
        self.state = seed & MASK64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def below(self, n):
        """Uniform in [0, n) by rejection: drop the top partial range (Rng::below)."""
        limit = MASK64 - MASK64 % n
        while True:
            x = self.next()
            if x < limit:
                return x % n

    def shuffle(self, v):
        """Fisher-Yates in place, as Rng::shuffle: for i = len..2, swap v[i-1] with v[below(i)]."""
        for i in range(len(v), 1, -1):
            j = self.below(i)
            v[i - 1], v[j] = v[j], v[i - 1]


def ptxlab_orders(seed, n):
    """ptxlab train's training-set order of each epoch (an endless generator of lists)."""
    rng = SplitMix64(seed ^ SHUFFLE_SEED_XOR)
    while True:
        order = list(range(n))
        rng.shuffle(order)
        yield order


# ---- the schedule ---------------------------------------------------------------------------------

def round_half_away(x):
    """C++ std::round for x >= 0 (Python's round() rounds halves to even)."""
    return int(math.floor(x + 0.5))


def warmup_steps(warmup, total):
    return round_half_away(warmup * total)


def lr_factor(kind, s, total, warm, step_every=0, gamma=0.1):
    """lr(s) / peak for the 0-based step s of `total` steps with `warm` warm-up steps."""
    if warm > 0 and s < warm:
        return s / warm
    if kind == "const":
        return 1.0
    if kind == "onecycle":
        return (total - s) / (total - warm)
    if kind == "cosine":
        return (1.0 + math.cos(math.pi * (s - warm) / (total - warm))) / 2.0
    if kind == "step":
        return gamma ** (s // step_every)
    raise ValueError(f"unknown schedule {kind!r}")


# ---- self-test (no torch, no numpy) -----------------------------------------------------------------

def fnv1a(values):
    """The fingerprint used below: h ^= v; h *= 1099511628211 (mod 2^64), from the FNV offset basis."""
    h = 1469598103934665603
    for v in values:
        h = ((h ^ v) * 1099511628211) & MASK64
    return h


def self_test():
    failures = []

    def check(what, got, want):
        ok = got == want

        def short(v):
            text = repr(v)
            return text if len(text) <= 120 else text[:110] + " ...]"

        print(f"{'ok  ' if ok else 'FAIL'} {what}: {short(got)}" + ("" if ok else f" (expected {short(want)})"))
        if not ok:
            failures.append(what)

    # Published SplitMix64 outputs (Vigna's splitmix64.c, also Java's SplittableRandom mixer):
    # seed 0 starts 0xe220a8397b1dcdaf, seed 1 starts 0x910a2dec89025cc1.
    published = {
        0: [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F, 0xF88BB8A8724C81EC],
        1: [0x910A2DEC89025CC1, 0xBEEB8DA1658EEC67, 0xF893A2EEFB32555E, 0x71C18690EE42C90B],
    }
    for seed, want in published.items():
        r = SplitMix64(seed)
        check(f"SplitMix64({seed}) first 4 outputs", [hex(r.next()) for _ in want], [hex(w) for w in want])

    # An independent restatement of the mixer (modular arithmetic instead of masks).
    def mix(state):
        z = state % 2**64
        z = (z ^ (z >> 30)) * 13787848793156543929 % 2**64
        z = (z ^ (z >> 27)) * 10723151780598845931 % 2**64
        return z ^ (z >> 31)

    r = SplitMix64(12345)
    check("SplitMix64(12345) == restated mixer, 100 outputs",
          [r.next() for _ in range(100)], [mix(12345 + k * 0x9E3779B97F4A7C15) for k in range(1, 101)])

    # The values below were produced by host/platform/rng.cpp (a throw-away C++ driver), so they pin the
    # port to ptxlab's code: below(), the Fisher-Yates order and the epoch loop's seeding.
    r = SplitMix64(7)
    check("Rng(7).below(1, 2, 3, 10, 60000, 2^63+1)",
          [r.below(n) for n in (1, 2, 3, 10, 60000, 0x8000000000000001)], [0, 0, 0, 3, 23674, 4601199455465548305])
    # n = 2^63 + 1 rejects about half of the raw draws, so this checks the rejection itself.
    r = SplitMix64(7)
    check("Rng(7).below(2^63+1) x 8", [r.below(0x8000000000000001) for _ in range(8)],
          [7191089600892374487, 309689372594955804, 8346079845500723674, 4601199455465548305,
           8632209307422871798, 6051947643683389182, 2476628477891077985, 7621113624420504425])
    for seed, n, want in ((3, 10, [[6, 3, 2, 0, 4, 9, 5, 7, 1, 8], [1, 8, 0, 5, 4, 6, 7, 3, 2, 9]]),
                          (0, 5, [[2, 1, 4, 0, 3], [2, 4, 0, 1, 3], [4, 0, 2, 3, 1]])):
        gen = ptxlab_orders(seed, n)
        check(f"ptxlab order, seed {seed}, n {n}, epochs 1..{len(want)}", [next(gen) for _ in want], want)
    gen = ptxlab_orders(1, 60000)
    want = [(13452, 13496, 461, 12433268228242729537), (18786, 51041, 19862, 6881752813538743223)]
    got = []
    for _ in want:
        o = next(gen)
        got.append((o[0], o[1], o[-1], fnv1a(o)))
    check("ptxlab order, seed 1, n 60000, epochs 1-2 (first, second, last, fingerprint)", got, want)

    # The schedule, against values worked out by hand.
    S = 10
    check("W = round(0.25 * 10) (half away from 0)", warmup_steps(0.25, S), 3)
    check("W = round(0.2 * 10)", warmup_steps(0.2, S), 2)
    check("onecycle S 10 W 2", [lr_factor("onecycle", s, S, 2) for s in range(S)],
          [0.0, 0.5, 1.0, 7 / 8, 6 / 8, 5 / 8, 4 / 8, 3 / 8, 2 / 8, 1 / 8])
    check("const S 10 W 2", [lr_factor("const", s, S, 2) for s in range(4)], [0.0, 0.5, 1.0, 1.0])
    cos = [lr_factor("cosine", s, S, 2) for s in (2, 6)]
    check("cosine S 10 W 2 at s = 2, 6 (1 and 1/2)", [round(c, 15) for c in cos], [1.0, 0.5])
    check("step every 3, gamma 0.5, W 0", [lr_factor("step", s, S, 0, 3, 0.5) for s in range(7)],
          [1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.25])
    # Flags: an optimizer constant the optimizer does not read is refused (exit 2), one it reads is taken,
    # and the defaults fill the rest; every (optimizer, flag) pair against ptxlab's rows.
    def parse_status(argv):
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                parse_args(argv)
            return 0
        except SystemExit as e:
            return e.code

    reads = {"sgd": "", "momentum": "m", "nesterov": "m", "adam": "12e", "adamw": "12e", "rmsprop": "ae",
             "nadam": "12e"}  # host/reference/optimizers.cpp: kFlagMomentum, kFlagBetas, kFlagEps, kFlagAlpha
    letter = {"momentum": "m", "beta1": "1", "beta2": "2", "eps": "e", "alpha": "a"}
    got, want = [], []
    for opt, flags in reads.items():
        for flag, c in letter.items():
            got.append((opt, flag, parse_status(["--optimizer", opt, f"--{flag}", "0.5"])))
            want.append((opt, flag, 0 if c in flags else 2))
    check("each optimizer takes the constants it reads and refuses the others (exit 2)", got, want)
    check("--optimizer momentum --momentum 0 is refused", parse_status(["--optimizer", "momentum", "--momentum", "0"]), 2)
    d = parse_args(["--optimizer", "nadam", "--beta2", "0.99"])
    check("nadam's constants (beta2 given, the rest defaults)", (d.momentum, d.beta1, d.beta2, d.eps, d.alpha),
          (0.9, 0.9, 0.99, 1e-8, 0.99))
    # The --model grammar's port (tools/ptxlab_model.py).
    if ptxlab_model.self_test() != 0:
        failures.append("ptxlab_model.self_test")
    print(f"self-test: {'all passed' if not failures else f'{len(failures)} FAILED'}")
    return 1 if failures else 0


# ---- training -----------------------------------------------------------------------------------------

def fail(msg):
    """Bad input (flags, files): the message on stderr, exit status 2."""
    print(f"torch_reference: {msg}", file=sys.stderr)
    sys.exit(2)


# The optimizer constants and the optimizers that read them (ptxlab's host/reference/optimizers.cpp rows).
OPTIMIZER_FLAGS = {
    "momentum": (0.9, ("momentum", "nesterov")),
    "beta1": (0.9, ("adam", "adamw", "nadam")),
    "beta2": (0.999, ("adam", "adamw", "nadam")),
    "eps": (1e-8, ("adam", "adamw", "rmsprop", "nadam")),
    "alpha": (0.99, ("rmsprop",)),
}


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--data", default=os.path.join(here, "..", "data", "mnist"), help="MNIST IDX directory")
    ap.add_argument("--layers", help="layer sizes, e.g. 784,128,10 (default; with --init-from: the checkpoint's)")
    ap.add_argument("--model", help="ptxlab's layer list, e.g. cnn or conv32,pool,conv64,pool,fc128,fc10")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.1, help="peak learning rate")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--init", choices=["torch", "he-uniform", "he-normal", "xavier", "notebook"], default="torch")
    ap.add_argument("--bias", choices=["zero", "torch"], help="override the biases --init draws (zero or U(+-1/sqrt(fan_in)))")
    ap.add_argument("--loss", choices=["ce", "mse", "half-sse"], default="ce")
    ap.add_argument("--optimizer", choices=["sgd", "momentum", "nesterov", "adam", "adamw", "rmsprop", "nadam"],
                    default="nesterov")
    ap.add_argument("--momentum", type=float, help="momentum, nesterov (default 0.9)")
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--beta1", type=float, help="adam, adamw, nadam (default 0.9)")
    ap.add_argument("--beta2", type=float, help="adam, adamw, nadam (default 0.999)")
    ap.add_argument("--eps", type=float, help="adam, adamw, rmsprop, nadam (default 1e-8)")
    ap.add_argument("--alpha", type=float, help="rmsprop (default 0.99)")
    ap.add_argument("--schedule", choices=["const", "cosine", "onecycle", "step"], default="onecycle")
    ap.add_argument("--warmup", type=float, default=0.2, help="fraction of the steps with a linear warm-up from 0")
    ap.add_argument("--step-every", type=float, default=0,
                    help="--schedule step: epochs between decays (default: a third of --epochs), as ptxlab's")
    ap.add_argument("--gamma", type=float, default=0.1, help="--schedule step: the decay factor")
    ap.add_argument("--activation", choices=["relu", "leaky-relu", "tanh", "sigmoid", "gelu"], default="relu")
    ap.add_argument("--evals-per-epoch", type=int, default=20)
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                    help="float64: the same run in double precision (data, weights, optimizer state)")
    ap.add_argument("--target", type=float, default=0.98, help="report when the test accuracy first reaches this")
    ap.add_argument("--stop-at-target", action="store_true")
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: no limit)")
    ap.add_argument("--log", help="CSV, one row per evaluation")
    ap.add_argument("--log-steps", help="CSV, one row per step")
    ap.add_argument("--init-from", help="start from a ptxlab checkpoint (.safetensors: an MLP's fc1.weight, ... or a "
                                        "--model checkpoint, its spec in the metadata)")
    ap.add_argument("--order", choices=["torch", "ptxlab"], default="torch", help="batch order")
    ap.add_argument("--save", help="write the final weights as .safetensors (ptxlab's tensor names)")
    ap.add_argument("--normalize", action="store_true", help="standardise pixels with the training mean and std")
    ap.add_argument("--device", help="torch device (default: cuda when available, else cpu)")
    ap.add_argument("--time-steps", type=int, default=0, help="also time N steps eager and N CUDA-graph replays")
    ap.add_argument("--tf32", action="store_true",
                    help="let cuDNN and cuBLAS take TF32 products (PyTorch's own default for convolutions; "
                         "ptxlab's --kernels tc); without it every product is full float32, as ptxlab's FP32 sets")
    ap.add_argument("--self-test", action="store_true", help="check the PRNG port and the schedule, then exit")
    a = ap.parse_args(argv)

    def bad(msg):
        ap.error(msg)  # exits with 2

    if a.self_test:
        return a
    # A constant the optimizer does not read is refused, as ptxlab train refuses it; then the defaults.
    for flag, (default, users) in OPTIMIZER_FLAGS.items():
        given = getattr(a, flag)
        if given is not None and a.optimizer not in users:
            bad(f"--{flag} does not apply to --optimizer {a.optimizer}: it sets {', '.join(users)}")
        setattr(a, flag, default if given is None else given)
    if a.batch < 1 or a.epochs < 1 or a.evals_per_epoch < 1 or a.max_steps < 0:
        bad("--batch, --epochs and --evals-per-epoch must be at least 1, --max-steps at least 0")
    if not (a.lr > 0 and math.isfinite(a.lr)):
        bad("--lr must be a positive number")
    if not (0 <= a.warmup < 1):
        bad("--warmup is a fraction of the steps in [0, 1)")
    if a.step_every < 0:
        bad("--step-every is a number of epochs >= 0")
    if a.optimizer in ("momentum", "nesterov") and not a.momentum > 0:
        bad(f"--optimizer {a.optimizer} needs --momentum > 0")
    if a.model and a.layers:
        bad("--model and --layers both set the network: give one of them")
    return a


ACTIVATIONS = ["relu", "leaky-relu", "tanh", "sigmoid", "gelu"]


def build(a, torch):
    """The loss function and the optimizer factory (the model comes from ptxlab_model.build_sequential)."""
    F = torch.nn.functional

    def loss_fn(y, labels, onehot):
        if a.loss == "ce":
            return F.cross_entropy(y, labels)
        if a.loss == "mse":
            return F.mse_loss(y, onehot)
        return 0.5 * ((y - onehot) ** 2).sum() / y.shape[0]

    def make_optimizer(params, capturable=False):
        lr, wd = a.lr, a.weight_decay
        cap = {"capturable": True} if capturable else {}
        if a.optimizer in ("sgd", "momentum", "nesterov"):
            mu = 0.0 if a.optimizer == "sgd" else a.momentum
            return torch.optim.SGD(params, lr=lr, momentum=mu, dampening=0, weight_decay=wd,
                                   nesterov=a.optimizer == "nesterov")
        if a.optimizer == "nadam":  # momentum_decay 0.004 (the default), weight decay added to the gradient
            return torch.optim.NAdam(params, lr=lr, betas=(a.beta1, a.beta2), eps=a.eps, weight_decay=wd,
                                     momentum_decay=4e-3, **cap)
        if a.optimizer in ("adam", "adamw"):
            cls = torch.optim.Adam if a.optimizer == "adam" else torch.optim.AdamW
            return cls(params, lr=lr, betas=(a.beta1, a.beta2), eps=a.eps, weight_decay=wd, **cap)
        return torch.optim.RMSprop(params, lr=lr, alpha=a.alpha, eps=a.eps, weight_decay=wd, momentum=0,
                                   centered=False, **cap)

    return loss_fn, make_optimizer


def init_model(model, a, torch):
    """--init (and --bias), drawn on the CPU from torch's generator seeded with --seed, layer by
    layer in the module's order (conv and fc alike: fan_in and fan_out as torch.nn.init computes
    them, in*k*k and out*k*k for a conv)."""
    with torch.no_grad():
        for layer in model.children():
            if not isinstance(layer, (torch.nn.Linear, torch.nn.Conv2d)):
                continue
            w, b = layer.weight, layer.bias
            fan_in, fan_out = torch.nn.init._calculate_fan_in_and_fan_out(w)
            if a.init == "torch":
                bound = 1.0 / math.sqrt(fan_in)
                w.uniform_(-bound, bound)
                b.uniform_(-bound, bound)
            elif a.init == "he-uniform":
                bound = math.sqrt(6.0 / fan_in)
                w.uniform_(-bound, bound)
                b.zero_()
            elif a.init == "he-normal":
                w.normal_(0.0, math.sqrt(2.0 / fan_in))
                b.zero_()
            elif a.init == "xavier":
                bound = math.sqrt(6.0 / (fan_in + fan_out))
                w.uniform_(-bound, bound)
                b.zero_()
            else:  # notebook
                w.normal_(0.0, 0.01)
                b.normal_(0.0, 0.01)
            if a.bias == "zero":
                b.zero_()
            elif a.bias == "torch":
                bound = 1.0 / math.sqrt(fan_in)
                b.uniform_(-bound, bound)


def load_checkpoint(path, torch):
    """The layers and model tensors of a ptxlab checkpoint (an MLP's fc1, fc2, ... or a --model
    checkpoint with its spec in the metadata); other tensors (optimizer state) listed apart."""
    from safetensors.torch import load_file

    if not os.path.isfile(path):
        fail(f"--init-from: {path}: file not found")
    try:
        layers, problems = ptxlab_model.check_checkpoint(path)
    except (ptxlab_model.SpecError, ValueError, KeyError) as e:
        fail(f"--init-from: {path}: {e}")
    if problems:
        fail(f"--init-from: {path}: " + "; ".join(problems))
    state = load_file(path)
    names = ptxlab_model.state_dict_shapes(layers)
    params = {k: state[k].to(torch.float32) for k in names}
    others = sorted(set(state) - set(params))
    return layers, params, others


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    if a.self_test:
        return self_test()

    import numpy as np
    import torch

    from mnist_idx import read_idx

    dev = torch.device(a.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    # No TF32 unless --tf32: full float32 products, as ptxlab's FP32 sets.
    torch.set_float32_matmul_precision("high" if a.tf32 else "highest")
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.allow_tf32 = a.tf32
    torch.manual_seed(a.seed)
    cuda = dev.type == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize()

    # ---- data
    def load(prefix):
        paths = [os.path.join(a.data, f"{prefix}-{kind}-idx{d}-ubyte") for kind, d in (("images", 3), ("labels", 1))]
        for p in paths:
            if not (os.path.exists(p) or os.path.exists(p + ".gz")):
                fail(f"{p}: file not found (raw or .gz); fetch MNIST with tools/fetch_mnist.sh or pass --data")
        images = read_idx(paths[0])
        x = images.reshape(len(images), -1).astype(np.float32) / np.float32(255.0)  # float(byte) / 255.0f
        y = read_idx(paths[1]).astype(np.int64)
        return torch.from_numpy(x).to(dev), torch.from_numpy(y).to(dev)

    xtr, ytr = load("train")
    xte, yte = load("t10k")
    if a.normalize:
        m, s = xtr.mean(), xtr.std()
        xtr, xte = (xtr - m) / s, (xte - m) / s

    # ---- model
    loss_fn, make_optimizer = build(a, torch)
    try:
        if a.init_from:
            layers, params, others = load_checkpoint(a.init_from, torch)
        elif a.model:
            layers = ptxlab_model.parse_model(a.model)
        else:
            sizes = [int(v) for v in (a.layers or "784,128,10").split(",")]
            if len(sizes) < 2 or min(sizes) < 1 or sizes[0] != xtr.shape[1]:
                fail(f"--layers {a.layers}: at least two positive sizes, the first {xtr.shape[1]} (MNIST's pixels)")
            layers = ptxlab_model.parse_model(ptxlab_model.spec_of_sizes(sizes))
    except ptxlab_model.SpecError as e:
        fail(str(e))
    spec = ptxlab_model.model_text(layers)
    if a.init_from:
        wanted = a.model or (a.layers and ptxlab_model.spec_of_sizes([int(v) for v in a.layers.split(",")]))
        if wanted and ptxlab_model.model_text(ptxlab_model.parse_model(wanted)) != spec:
            fail(f"--model/--layers {a.model or a.layers} differs from the checkpoint's {spec}")
    if tuple(layers[0]["in"]) != ptxlab_model.MNIST_INPUT:
        fail(f"model {spec} takes {layers[0]['in']} images; MNIST's are 1x28x28")
    model = ptxlab_model.build_sequential(torch, layers, a.activation)
    if a.init_from:
        model.load_state_dict(params)  # strict: every tensor, shapes checked
        if others:
            print(f"note: {a.init_from} also holds {', '.join(others)}: not loaded, the optimizer starts from zero state")
    else:
        init_model(model, a, torch)
    # --dtype float64: the same run in double precision, to tell a difference in semantics from
    # float32 rounding amplified by training (compare_steps of float32 against float64).
    dtype = torch.float64 if a.dtype == "float64" else torch.float32
    model = model.to(dev, dtype)
    xtr, xte = xtr.to(dtype), xte.to(dtype)
    O = ptxlab_model.CLASSES
    ttr = torch.nn.functional.one_hot(ytr, O).to(dtype)
    tte = torch.nn.functional.one_hot(yte, O).to(dtype)

    # ---- schedule and optimizer
    N, B = xtr.shape[0], a.batch
    K = N // B
    if K == 0:
        fail(f"--batch {B} is larger than the training set ({N})")
    S = a.epochs * K
    W = warmup_steps(a.warmup, S)
    if W >= S and a.schedule in ("onecycle", "cosine"):
        fail(f"--warmup {a.warmup} takes all {S} steps; nothing is left for the {a.schedule} decay")
    opt = make_optimizer(model.parameters())
    # ptxlab's step interval: --step-every epochs (default a third of the epochs) in steps, rounded
    # half away from zero, at least 1.
    every_epochs = a.step_every if a.step_every > 0 else max(1.0, a.epochs / 3.0)
    step_every = max(1, int(math.floor(every_epochs * K + 0.5)))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_factor(a.schedule, s, S, W, step_every, a.gamma))
    evals = sorted({j * K // a.evals_per_epoch for j in range(1, a.evals_per_epoch + 1)} - {0})

    def train_step(x, labels, onehot):
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(model(x), labels, onehot)
        loss.backward()
        opt.step()
        return loss

    def evaluate():
        model.eval()  # BatchNorm on its running statistics (a no-op without bn layers)
        with torch.no_grad():
            y = model(xte)
        model.train()
        return loss_fn(y, yte, tte).item(), (y.argmax(1) == yte).float().mean().item()

    name = torch.cuda.get_device_name(dev) if cuda else "cpu"
    print(f"torch {torch.__version__} on {name}: model {spec} {a.activation}, "
          f"init {'from ' + a.init_from if a.init_from else a.init}, loss {a.loss}, optimizer {a.optimizer}, "
          f"schedule {a.schedule} (peak lr {a.lr}, warm-up {W} of {S} steps), batch {B}, {a.epochs} epochs, "
          f"order {a.order}, seed {a.seed}", flush=True)

    log = open(a.log, "w", newline="") if a.log else None
    steps_log = open(a.log_steps, "w", newline="") if a.log_steps else None
    if log:
        log.write("step,epoch,train_loss,test_loss,test_accuracy,train_s,elapsed_s,lr\n")
    if steps_log:
        steps_log.write("step,epoch,loss,lr\n")

    orders = ptxlab_orders(a.seed, N) if a.order == "ptxlab" else None
    loss_buf = torch.zeros(K, device=dev)  # the batch losses of the current epoch, read at evaluations
    step = 0
    train_s = eval_s = 0.0
    reached = None
    diverged = None
    stop = False
    final = (math.nan, 0.0)
    for epoch in range(1, a.epochs + 1):
        if orders is not None:
            perm = torch.tensor(next(orders), dtype=torch.int64).to(dev)
        else:
            perm = torch.randperm(N).to(dev)
        sync()
        t0 = time.perf_counter()
        xs, ys, ts = xtr[perm], ytr[perm], ttr[perm]
        first = 0  # epoch-local index of the first step since the last evaluation
        lrs = []
        for k in range(K):
            lrs.append(opt.param_groups[0]["lr"])
            loss_buf[k] = train_step(xs[k * B:(k + 1) * B], ys[k * B:(k + 1) * B], ts[k * B:(k + 1) * B]).detach()
            sched.step()
            step += 1
            last = k + 1 == K or (a.max_steps and step >= a.max_steps)
            if k + 1 not in evals and not last:
                continue
            sync()
            train_s += time.perf_counter() - t0
            # The losses of the steps since the last evaluation.
            losses = loss_buf[first:k + 1].tolist()
            if steps_log:
                for j, loss in enumerate(losses):
                    steps_log.write(f"{step - len(losses) + j + 1},{epoch},{loss:.9g},{lrs[first + j]:.9g}\n")
                steps_log.flush()
            bad = [j for j, v in enumerate(losses) if not math.isfinite(v)]
            if bad:
                diverged = (step - len(losses) + bad[0] + 1, epoch, losses[bad[0]])
                stop = True
                break
            t1 = time.perf_counter()
            test_loss, acc = evaluate()
            eval_s += time.perf_counter() - t1
            final = (test_loss, acc)
            train_loss = sum(losses) / len(losses)
            print(f"epoch {epoch:2d}  step {step:6d}  train loss {train_loss:.5f}  test loss {test_loss:.5f}  "
                  f"test accuracy {100 * acc:.2f} %  training {1e3 * train_s:.1f} ms", flush=True)
            if log:
                log.write(f"{step},{epoch},{train_loss:.9g},{test_loss:.9g},{acc:.6f},{train_s:.6f},"
                          f"{train_s + eval_s:.6f},{lrs[k]:.9g}\n")
                log.flush()
            if reached is None and acc >= a.target:
                reached = (step, epoch, train_s)
                stop = a.stop_at_target
            if a.max_steps and step >= a.max_steps:
                stop = True
            if stop:
                break
            first = k + 1
            sync()
            t0 = time.perf_counter()
        if stop:
            break
    for f in (log, steps_log):
        if f:
            f.close()

    def ms(seconds):
        """Milliseconds with three significant digits, never in exponent form."""
        v = 1e3 * seconds
        if v <= 0:
            return "0 ms"
        e = math.floor(math.log10(v))
        return f"{round(v, 2 - e):.{max(0, 2 - e)}f} ms"

    if diverged:
        print(f"training diverged: the loss is {diverged[2]} at step {diverged[0]} (epoch {diverged[1]}); "
              f"try a lower --lr or a warm-up")
    else:
        print(f"final test accuracy {100 * final[1]:.2f} % (test loss {final[0]:.5f}) after {step} steps; "
              f"training {ms(train_s)}, evaluation {ms(eval_s)} apart")
        if reached:
            print(f"reached {100 * a.target:.2f} % at step {reached[0]} (epoch {reached[1]}) after "
                  f"{ms(reached[2])} of training")
        else:
            print(f"did not reach {100 * a.target:.2f} %")
    if a.save:
        from safetensors.torch import save_file
        # ptxlab's metadata: an MLP's "layers", another model's spec and input shape (host/data/safetensors.hpp).
        if all(layer["kind"] == "fc" for layer in layers) and len(layers) in (2, 3):
            meta = {"format": "pt", "layers": ",".join(str(n) for n in [784] + [l["width"] for l in layers])}
        else:
            meta = {"format": "pt", "model": spec, "input": "x".join(map(str, layers[0]["in"]))}
        save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}, a.save, metadata=meta)
        print(f"saved {a.save}")

    if a.time_steps and cuda:
        time_steps(a, torch, model, make_optimizer, loss_fn, xtr[:B].clone(), ytr[:B].clone(), ttr[:B].clone())
    return 1 if diverged else 0


def time_steps(a, torch, model, make_optimizer, loss_fn, x, labels, onehot):
    """Per-step time of this recipe at the peak lr: eager, and replays of a CUDA graph of one step."""
    import copy

    def timer(run, n):
        for _ in range(20):
            run()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            run()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / n

    def stepper(m, opt):
        def run():
            opt.zero_grad(set_to_none=False)
            loss_fn(m(x), labels, onehot).backward()
            opt.step()
        return run

    m = copy.deepcopy(model)
    eager = timer(stepper(m, make_optimizer(m.parameters())), a.time_steps)

    m = copy.deepcopy(model)
    run = stepper(m, make_optimizer(m.parameters(), capturable=True))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            run()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        run()
    graph = timer(g.replay, a.time_steps)
    print(f"per step at batch {x.shape[0]} ({a.loss}, {a.optimizer}): eager {1e6 * eager:.1f} us, "
          f"CUDA graph {1e6 * graph:.1f} us")


if __name__ == "__main__":
    sys.exit(main())
