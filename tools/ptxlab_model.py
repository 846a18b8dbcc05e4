#!/usr/bin/env python3
"""ptxlab's --model grammar in Python: the layer list, its shapes, the PyTorch module and the checkpoint.

    python3 tools/ptxlab_model.py --self-test              # no torch, numpy or safetensors needed
    python3 tools/ptxlab_model.py --shapes cnn             # the layers and their shapes
    python3 tools/ptxlab_model.py --check-checkpoint FILE  # a ptxlab checkpoint's tensors against its spec

The grammar (host/reference/model.hpp, mirrored here; the messages name the layer's position as ptxlab's do):
a comma-separated list of layers read left to right from a 1x28x28 image,
  conv<N>       3x3 convolution to N channels, stride 1, same padding, bias, hidden activation
  conv<N>k<K>   the same with a KxK kernel, K = 1, 3 or 5 (padding K // 2)
  pool          2x2 max-pool, stride 2 (even height and width, at least 2)
  fc<N>         dense layer to N units; the first fc flattens its input in NCHW order
  bn            batch normalization of the conv (BatchNorm2d) or hidden fc (BatchNorm1d) right
                before it, which hands it its activation (Conv -> BN -> ReLU); not first, after a
                pool or a bn, nor last
  cnn           (alone) conv32,pool,conv64,pool,fc128,fc10
The last layer is fc10 with no activation; every other conv, fc and bn has the hidden activation
(a conv or fc under a bn: the bn has it); no conv or pool after an fc. Layers are named conv1,
conv2, pool1, fc1, bn1, ... (numbered per kind).

The PyTorch module (build_sequential) is an nn.Sequential whose children carry those names:
  input (nn.Unflatten to C x H x W, when the first layer is a conv or pool), conv1, conv1_act,
  pool1, ..., flatten (before the first fc, after a conv or pool), fc1, fc1_act, ..., fcN; a bn
  layer is bn1 (nn.BatchNorm2d after a conv, nn.BatchNorm1d after an fc; eps 1e-5, momentum 0.1)
  then bn1_act.
Its state_dict keys are therefore conv1.weight [out, in, k, k], conv1.bias [out], fc1.weight
[out, in], fc1.bias [out], bn1.weight [C], bn1.bias [C], and the bn buffers bn1.running_mean [C],
bn1.running_var [C] (F32), bn1.num_batches_tracked [] (I64) ... -- the tensor names of ptxlab's
checkpoints (host/data/safetensors.hpp); the parameters first in layer order, then the buffers.
An MLP (fc layers only) takes the flat 784 pixels and has the MLP checkpoints' fc1, fc2, ... keys.
"""
import argparse
import collections
import json
import os
import struct
import sys

MNIST_INPUT = (1, 28, 28)
CLASSES = 10
MAX_WIDTH = 1 << 20
CNN = "conv32,pool,conv64,pool,fc128,fc10"
GRAMMAR = "conv<N>[k<K>], pool, fc<N> or bn, e.g. conv32,pool,conv64,pool,fc128,fc10; or cnn"


class SpecError(ValueError):
    """A bad --model spec; the message names the layer's position (from 1)."""


def _count(spec, index, item, pos, what):
    end = pos
    while end < len(item) and item[end].isdigit():
        end += 1
    if end == pos:
        raise SpecError(f"--model '{spec}': layer {index} '{item}' needs {what} after '{item[:pos]}' ({GRAMMAR})")
    digits = item[pos:end]
    if len(digits) > 7 or int(digits) > MAX_WIDTH:
        raise SpecError(f"--model '{spec}': layer {index} '{item}': {what} {digits} is too large (at most {MAX_WIDTH})")
    n = int(digits)
    if n == 0:
        raise SpecError(f"--model '{spec}': layer {index} '{item}': {what} must be at least 1")
    return n, end


def _item(spec, index, item):
    if item == "":
        where = "start" if index == 1 else "end or in the middle"
        raise SpecError(f"--model '{spec}': layer {index} is empty (a comma too many at the {where}?)")
    if item == "cnn":
        raise SpecError(f"--model '{spec}': layer {index} 'cnn' names a whole model: give it alone (--model cnn)")
    if item in ("pool", "bn"):
        return {"kind": item, "width": 0, "ksize": 0}
    if item.startswith("conv"):
        width, pos = _count(spec, index, item, 4, "a channel count")
        ksize = 3
        if pos < len(item) and item[pos] == "k":
            ksize, pos = _count(spec, index, item, pos + 1, "a kernel size")
            if ksize not in (1, 3, 5):
                raise SpecError(f"--model '{spec}': layer {index} '{item}': kernel size {ksize} is not taken (1, 3 or "
                                f"5: odd, for same padding, and at most 5, as the conv kernels take)")
        layer = {"kind": "conv", "width": width, "ksize": ksize}
    elif item.startswith("fc"):
        width, pos = _count(spec, index, item, 2, "a width")
        layer = {"kind": "fc", "width": width, "ksize": 0}
    else:
        raise SpecError(f"--model '{spec}': layer {index} '{item}' is not a layer ({GRAMMAR})")
    if pos != len(item):
        raise SpecError(f"--model '{spec}': layer {index} '{item}': unexpected '{item[pos:]}' after '{item[:pos]}' "
                        f"({GRAMMAR})")
    return layer


def layer_text(layer):
    if layer["kind"] == "conv":
        return f"conv{layer['width']}" + ("" if layer["ksize"] == 3 else f"k{layer['ksize']}")
    return layer["kind"] if layer["kind"] in ("pool", "bn") else f"fc{layer['width']}"


def parse_model(spec, input_shape=MNIST_INPUT):
    """The layers of a --model spec: dicts with kind, width, ksize, name, in and out (C, H, W),
    activation, weight and bias shapes (None for pool). Raises SpecError as ptxlab would."""
    if spec == "":
        raise SpecError(f"--model is empty: give a layer list ({GRAMMAR})")
    if spec == "cnn":
        spec = CNN
    layers, shape, seen_fc, counts = [], tuple(input_shape), False, {"conv": 0, "pool": 0, "fc": 0, "bn": 0}
    items = spec.split(",")
    for index, item in enumerate(items, start=1):
        layer = _item(spec, index, item)
        if layer["kind"] == "bn":
            what = ("is the first layer" if not layers else "comes after a pool" if layers[-1]["kind"] == "pool"
                    else "comes after a bn" if layers[-1]["kind"] == "bn"
                    else f"comes after the last layer '{layer_text(layers[-1])}' (the logits)" if index == len(items)
                    else "")
            if what:
                raise SpecError(f"--model '{spec}': layer {index} 'bn' {what}: a bn normalizes the conv or hidden fc "
                                f"right before it")
        if seen_fc and layer["kind"] not in ("fc", "bn"):
            raise SpecError(f"--model '{spec}': layer {index} '{item}' comes after an fc layer: conv and pool layers "
                            f"come before the first fc (which flattens)")
        seen_fc = seen_fc or layer["kind"] == "fc"
        c, h, w = shape
        layer["in"] = shape
        if layer["kind"] == "conv":
            layer["out"] = (layer["width"], h, w)
            layer["weight"] = (layer["width"], c, layer["ksize"], layer["ksize"])
        elif layer["kind"] == "pool":
            if h < 2 or w < 2 or h % 2 or w % 2:
                raise SpecError(f"--model '{spec}': layer {index} 'pool' gets {c}x{h}x{w}: a 2x2 pool with stride 2 "
                                f"needs an even height and width of at least 2")
            layer["out"] = (c, h // 2, w // 2)
            layer["weight"] = None
        elif layer["kind"] == "bn":
            layer["width"] = c
            layer["out"] = shape
            layer["weight"] = (c,)
        else:
            if c * h * w > MAX_WIDTH:
                raise SpecError(f"--model '{spec}': layer {index} '{item}' flattens {c}x{h}x{w} = {c * h * w} inputs "
                                f"(at most {MAX_WIDTH})")
            layer["out"] = (layer["width"], 1, 1)
            layer["weight"] = (layer["width"], c * h * w)
        layer["bias"] = None if layer["weight"] is None else (layer["width"],)
        counts[layer["kind"]] += 1
        layer["name"] = f"{layer['kind']}{counts[layer['kind']]}"
        shape = layer["out"]
        layers.append(layer)
    last = layers[-1]
    if last["kind"] != "fc" or last["width"] != CLASSES:
        raise SpecError(f"--model '{spec}': the last layer is '{layer_text(last)}' (layer {len(layers)}); it must be "
                        f"fc{CLASSES}, the {CLASSES} classes of MNIST")
    for i, layer in enumerate(layers):
        under_bn = i + 1 < len(layers) and layers[i + 1]["kind"] == "bn"
        layer["activation"] = layer["kind"] != "pool" and i + 1 < len(layers) and not under_bn
    return layers


def model_text(layers):
    return ",".join(layer_text(layer) for layer in layers)


def spec_of_sizes(sizes):
    """--layers 784,128,10 as a spec: fc128,fc10."""
    return ",".join(f"fc{n}" for n in sizes[1:])


def state_dict_shapes(layers):
    """The module's parameters in order: name -> shape (ptxlab's flat layout is this order)."""
    out = collections.OrderedDict()
    for layer in layers:
        if layer["weight"] is not None:
            out[layer["name"] + ".weight"] = layer["weight"]
            out[layer["name"] + ".bias"] = layer["bias"]
    return out


def buffer_shapes(layers):
    """The bn layers' buffers in layer order: name -> (dtype, shape), after the parameters in a checkpoint."""
    out = collections.OrderedDict()
    for layer in layers:
        if layer["kind"] == "bn":
            out[layer["name"] + ".running_mean"] = ("F32", (layer["width"],))
            out[layer["name"] + ".running_var"] = ("F32", (layer["width"],))
            out[layer["name"] + ".num_batches_tracked"] = ("I64", ())
    return out


def param_count(layers):
    total = 0
    for shape in state_dict_shapes(layers).values():
        n = 1
        for d in shape:
            n *= d
        total += n
    return total


def shapes_text(layers):
    def s(shape):
        return "x".join(map(str, shape))

    text = s(layers[0]["in"])
    for layer in layers:
        flat = layer["kind"] == "fc" or (layer["kind"] == "bn" and layer["out"][1:] == (1, 1))
        text += f" -{layer_text(layer)}-> " + (str(layer["out"][0]) if flat else s(layer["out"]))
    return text


def module_names(layers):
    """The nn.Sequential's children, in order: (name, what) with what one of 'input', 'conv', 'act',
    'pool', 'flatten', 'fc', 'bn'."""
    names = []
    if layers[0]["kind"] != "fc":
        names.append(("input", "input"))
    previous = None
    for layer in layers:
        if layer["kind"] == "fc" and previous in ("conv", "pool"):
            names.append(("flatten", "flatten"))
        names.append((layer["name"], layer["kind"]))
        if layer["activation"]:
            names.append((layer["name"] + "_act", "act"))
        previous = layer["kind"]
    return names


def build_sequential(torch, layers, activation="relu"):
    """The nn.Sequential of a parsed spec (see the module docstring); input: [N, C*H*W] pixels."""
    nn = torch.nn
    acts = {"relu": nn.ReLU, "leaky-relu": lambda: nn.LeakyReLU(0.01), "tanh": nn.Tanh, "sigmoid": nn.Sigmoid,
            "gelu": lambda: nn.GELU(approximate="none")}
    by_name = {layer["name"]: layer for layer in layers}
    children = collections.OrderedDict()
    for name, what in module_names(layers):
        if what == "input":
            children[name] = nn.Unflatten(1, tuple(layers[0]["in"]))
        elif what == "flatten":
            children[name] = nn.Flatten()
        elif what == "act":
            children[name] = acts[activation]()
        elif what == "pool":
            children[name] = nn.MaxPool2d(2, 2)
        elif what == "bn":
            layer = by_name[name]
            norm = nn.BatchNorm1d if _after_fc(layers, layer) else nn.BatchNorm2d
            children[name] = norm(layer["width"], eps=1e-5, momentum=0.1)
        elif what == "conv":
            layer = by_name[name]
            children[name] = nn.Conv2d(layer["in"][0], layer["width"], layer["ksize"], stride=1,
                                       padding=layer["ksize"] // 2, bias=True)
        else:
            layer = by_name[name]
            c, h, w = layer["in"]
            children[name] = nn.Linear(c * h * w, layer["width"])
    return nn.Sequential(children)


def _after_fc(layers, layer):
    """Whether a bn layer normalizes an fc's output (BatchNorm1d) rather than a conv's (BatchNorm2d)."""
    i = layers.index(layer)
    return layers[i - 1]["kind"] == "fc"


def parse_input(text):
    parts = text.split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise SpecError(f"metadata 'input' is '{text}', not CxHxW (e.g. 1x28x28)")
    return tuple(int(p) for p in parts)


def read_header(path):
    """A safetensors file's metadata and tensors ({name: (dtype, shape, [begin, end])}), pure Python."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise SpecError(f"{path}: too short for a safetensors file")
        (n,) = struct.unpack("<Q", raw)
        header = json.loads(f.read(n).decode("utf-8"))
    meta = header.pop("__metadata__", {})
    return meta, {k: (v["dtype"], tuple(v["shape"]), v["data_offsets"]) for k, v in header.items()}


def checkpoint_layers(meta, tensors):
    """The layers of a ptxlab checkpoint: from its metadata 'model' (and 'input'), else (an MLP
    checkpoint) from its fc1, fc2, ... tensors."""
    if "model" in meta:
        shape = parse_input(meta["input"]) if "input" in meta else MNIST_INPUT
        return parse_model(meta["model"], shape)
    n = 0
    while f"fc{n + 1}.weight" in tensors:
        n += 1
    if n == 0:
        raise SpecError(f"no metadata 'model' and no fc1.weight (tensors: {', '.join(sorted(tensors)) or 'none'})")
    sizes = [tensors["fc1.weight"][1][1]] + [tensors[f"fc{k}.weight"][1][0] for k in range(1, n + 1)]
    shape = MNIST_INPUT if sizes[0] == 784 else (1, 1, sizes[0])
    return parse_model(spec_of_sizes(sizes), shape)


def check_checkpoint(path):
    """The model tensors of a ptxlab checkpoint against its spec: every name, shape and the order of
    the data (ptxlab's flat layout); returns (layers, list of problems)."""
    meta, tensors = read_header(path)
    layers = checkpoint_layers(meta, tensors)
    want = collections.OrderedDict((k, ("F32", v)) for k, v in state_dict_shapes(layers).items())
    want.update(buffer_shapes(layers))
    problems = []
    model_tensors = {k: v for k, v in tensors.items() if not k.startswith("optimizer.")}
    for name, (dtype, shape) in want.items():
        if name not in model_tensors:
            problems.append(f"lacks {name} {list(shape)}")
        elif model_tensors[name][1] != shape or model_tensors[name][0] != dtype:
            problems.append(f"{name} is {model_tensors[name][0]} {list(model_tensors[name][1])}, "
                            f"the spec needs {dtype} {list(shape)}")
    problems += [f"{name} is not a parameter of the model" for name in model_tensors if name not in want]
    order = sorted((v[2][0], k) for k, v in model_tensors.items())
    if not problems and [k for _, k in order] != list(want):
        problems.append(f"the data order is {[k for _, k in order]}, not the module's {list(want)}")
    return layers, problems


def self_test():
    failures = []

    def check(what, got, want):
        ok = got == want
        print(f"{'ok  ' if ok else 'FAIL'} {what}: {got!r}" + ("" if ok else f" (expected {want!r})"))
        if not ok:
            failures.append(what)

    def refusal(spec, shape=MNIST_INPUT):
        try:
            parse_model(spec, shape)
        except SpecError as e:
            return str(e)
        return ""

    cnn = parse_model("cnn")
    check("cnn text", model_text(cnn), CNN)
    check("cnn shapes", shapes_text(cnn), "1x28x28 -conv32-> 32x28x28 -pool-> 32x14x14 -conv64-> 64x14x14 "
                                          "-pool-> 64x7x7 -fc128-> 128 -fc10-> 10")
    check("cnn state_dict", list(state_dict_shapes(cnn).items()),
          [("conv1.weight", (32, 1, 3, 3)), ("conv1.bias", (32,)), ("conv2.weight", (64, 32, 3, 3)),
           ("conv2.bias", (64,)), ("fc1.weight", (128, 3136)), ("fc1.bias", (128,)), ("fc2.weight", (10, 128)),
           ("fc2.bias", (10,))])
    # host/reference/model.hpp's count for the same network (tests/cpu/reference/test_model.cpp).
    check("cnn parameters", param_count(cnn), 288 + 32 + 18432 + 64 + 401408 + 128 + 1280 + 10)
    check("cnn activations", [layer["activation"] for layer in cnn], [True, False, True, False, True, False])
    check("cnn modules", [n for n, _ in module_names(cnn)],
          ["input", "conv1", "conv1_act", "pool1", "conv2", "conv2_act", "pool2", "flatten", "fc1", "fc1_act", "fc2"])
    mlp = parse_model(spec_of_sizes([784, 128, 10]))
    check("--layers 784,128,10 as a spec", model_text(mlp), "fc128,fc10")
    check("MLP modules (the MLP checkpoints' fc1, fc2)", [n for n, _ in module_names(mlp)], ["fc1", "fc1_act", "fc2"])
    check("MLP fc1", state_dict_shapes(mlp)["fc1.weight"], (128, 784))
    small = parse_model("conv3,pool,conv2k5,pool,fc6,fc10", (2, 8, 8))
    check("small shapes", shapes_text(small),
          "2x8x8 -conv3-> 3x8x8 -pool-> 3x4x4 -conv2k5-> 2x4x4 -pool-> 2x2x2 -fc6-> 6 -fc10-> 10")
    check("small conv2", state_dict_shapes(small)["conv2.weight"], (2, 3, 5, 5))
    check("conv1k1 and conv8k5 text", model_text(parse_model("conv1k1,conv8k5,pool,fc10")), "conv1k1,conv8k5,pool,fc10")
    # Bad specs, with host/reference/model.cpp's messages (tests/cpu/reference/test_model.cpp checks the C++ side).
    check("empty", refusal(""), f"--model is empty: give a layer list ({GRAMMAR})")
    check("unknown layer", refusal("conv32,relu,fc10"),
          f"--model 'conv32,relu,fc10': layer 2 'relu' is not a layer ({GRAMMAR})")
    check("conv after fc", refusal("fc128,conv8,fc10"),
          "--model 'fc128,conv8,fc10': layer 2 'conv8' comes after an fc layer: conv and pool layers come before the "
          "first fc (which flattens)")
    check("pool of 7x7", refusal("pool,pool,pool,fc10"),
          "--model 'pool,pool,pool,fc10': layer 3 'pool' gets 1x7x7: a 2x2 pool with stride 2 needs an even height "
          "and width of at least 2")
    check("last layer", refusal("conv8,pool"),
          "--model 'conv8,pool': the last layer is 'pool' (layer 2); it must be fc10, the 10 classes of MNIST")
    check("kernel size", refusal("conv8k4,fc10"),
          "--model 'conv8k4,fc10': layer 1 'conv8k4': kernel size 4 is not taken (1, 3 or 5: odd, for same padding, "
          "and at most 5, as the conv kernels take)")
    check("zero width", refusal("fc0,fc10"), "--model 'fc0,fc10': layer 1 'fc0': a width must be at least 1")
    check("trailing text", refusal("conv8x,fc10"),
          f"--model 'conv8x,fc10': layer 1 'conv8x': unexpected 'x' after 'conv8' ({GRAMMAR})")
    check("empty item", refusal("conv8,,fc10"),
          "--model 'conv8,,fc10': layer 2 is empty (a comma too many at the end or in the middle?)")
    check("cnn inside", refusal("cnn,fc10"),
          "--model 'cnn,fc10': layer 1 'cnn' names a whole model: give it alone (--model cnn)")
    check("input shape", parse_input("1x28x28"), (1, 28, 28))
    bn = parse_model("conv32,bn,pool,fc128,bn,fc10")
    check("bn modules", [n for n, _ in module_names(bn)],
          ["input", "conv1", "bn1", "bn1_act", "pool1", "flatten", "fc1", "bn2", "bn2_act", "fc2"])
    check("bn state_dict", list(state_dict_shapes(bn).items())[:4],
          [("conv1.weight", (32, 1, 3, 3)), ("conv1.bias", (32,)), ("bn1.weight", (32,)), ("bn1.bias", (32,))])
    check("bn buffers", list(buffer_shapes(bn))[:3], ["bn1.running_mean", "bn1.running_var", "bn1.num_batches_tracked"])
    check("bn shapes", shapes_text(bn), "1x28x28 -conv32-> 32x28x28 -bn-> 32x28x28 -pool-> 32x14x14 -fc128-> 128 "
                                        "-bn-> 128 -fc10-> 10")
    check("bn first", refusal("bn,conv8,fc10"), "--model 'bn,conv8,fc10': layer 1 'bn' is the first layer: a bn "
                                                "normalizes the conv or hidden fc right before it")
    check("bn after pool", refusal("conv8,pool,bn,fc10"), "--model 'conv8,pool,bn,fc10': layer 3 'bn' comes after a "
                                                          "pool: a bn normalizes the conv or hidden fc right before it")
    check("bn last", refusal("conv8,fc10,bn"), "--model 'conv8,fc10,bn': layer 3 'bn' comes after the last layer "
                                               "'fc10' (the logits): a bn normalizes the conv or hidden fc right before it")
    print(f"self-test: {'all passed' if not failures else f'{len(failures)} FAILED'}")
    return 1 if failures else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--self-test", action="store_true", help="check the grammar port (no torch needed)")
    ap.add_argument("--shapes", metavar="SPEC", help="print the layers of SPEC and their shapes")
    ap.add_argument("--check-checkpoint", metavar="FILE", help="check a ptxlab checkpoint's tensors against its spec")
    a = ap.parse_args(argv)
    if a.self_test:
        return self_test()
    try:
        if a.shapes:
            layers = parse_model(a.shapes)
            print(shapes_text(layers))
            for name, shape in state_dict_shapes(layers).items():
                print(f"  {name} {list(shape)}")
            print(f"  {param_count(layers)} parameters")
            return 0
        if a.check_checkpoint:
            if not os.path.isfile(a.check_checkpoint):
                raise SpecError(f"{a.check_checkpoint}: file not found")
            layers, problems = check_checkpoint(a.check_checkpoint)
            for p in problems:
                print(f"{a.check_checkpoint}: {p}")
            print(f"{a.check_checkpoint}: model {model_text(layers)}: "
                  f"{'matches the module' if not problems else f'{len(problems)} problems'}")
            return 1 if problems else 0
    except (SpecError, OSError, ValueError, KeyError) as e:
        print(f"ptxlab_model: {e}", file=sys.stderr)
        return 2
    ap.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
