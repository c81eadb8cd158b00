"""Model zoo: every network the five papers benchmark, built on demand as ONNX.

Each builder returns an ``onnx.ModelProto`` (opset 17, standard ONNX ops only, fixed
batch size) with *random* weights drawn from the project's AES PRG, seeded by
(model name, seed, options): the same call gives the same bytes on every machine.
Weights are He-uniform (variance 2/fan_in ahead of a ReLU, 1/fan_in elsewhere) and the
last BatchNormalization of every residual branch is scaled by 1/sqrt(#blocks), so the
activations of a standard-normal or [0,1) input stay O(1): this matters for fixed point,
where a 32-bit ring with 13 fractional bits holds a pre-truncation dot product only
below 2^(31-26) = 32 in magnitude (``FX32.product_max_abs``).

No zoo model is committed as a file. ``build(name, seed, batch, **options)`` builds one,
``list_models()`` describes all of them (input shape, parameter count, source paper)
without materialising any weight.

Architectures and where they come from ([STAMP], [SAFHIRE], [CRISP] are the papers in
the design document; docs/models.md has the full notes):

* ``secureml-a`` -- Network-A [STAMP 5.1, "as in SecureML"]: FC 784-128-128-10, ReLU.
* ``network-b`` -- Network-B [STAMP 5.1, "as in [54] Chameleon"]. STAMP reuses Falcon's
  networks ([STAMP 5.2]: "Network-A, B, C and LeNet ... measured by Falcon"); Falcon's
  Network-B is conv(1->5, 2x2, stride 2) -> ReLU -> FC(980->100) -> ReLU -> FC(100->10).
* ``network-c`` -- Network-C [STAMP 5.1, "as in [38] MiniONN"], Falcon's form:
  conv(1->16,5x5) -> maxpool 2 -> ReLU -> conv(16->16,5x5) -> maxpool 2 -> ReLU ->
  FC(256->100) -> ReLU -> FC(100->10).
* ``lenet`` -- LeNet as benchmarked by Falcon/STAMP: conv(1->20,5x5) -> maxpool -> ReLU
  -> conv(20->50,5x5) -> maxpool -> ReLU -> FC(800->500) -> ReLU -> FC(500->10).
* ``alexnet`` -- the CIFAR-10 AlexNet of Falcon used by STAMP (conv 11x11/4 with 96
  maps, maxpool 3/2, BatchNorm, conv 5x5 256, maxpool 3/2, BN, three 3x3 convs
  384/384/256, FC 256-256-10). Falcon feeds a 33x33 image; we pad the 32x32 CIFAR image
  by (9, 10) so every later shape is Falcon's.
* ``vgg16`` -- VGG16 for CIFAR-10 as in Falcon/STAMP: 13 3x3 convs in five blocks
  (64,64 | 128,128 | 256x3 | 512x3 | 512x3), maxpool after each block, then FC
  512-4096-4096-10 (Falcon's code ends in 1000 units; we use CIFAR-10's 10 classes).
* ``resnet18`` -- ResNet-18 [STAMP 5.1 ImageNet 224x224; SAFHIRE 6 ImageNet/Tiny];
  option ``dataset="cifar10"|"tiny"`` gives the 3x3-stem, no-maxpool variant on 32x32
  (10 classes) or 64x64 (200 classes) images.
* ``resnet20`` -- ResNet-20 for CIFAR-10 [SAFHIRE 6: 0.27M parameters]: 3 stages x 3
  basic blocks, 16/32/64 channels, 1x1-conv projection shortcuts where shapes change.
* ``resnet34`` -- ResNet-34 on ImageNet with the stem max pooling replaced by average
  pooling [SAFHIRE 6: "we replace the max pooling with average pooling, as the latter is
  linear"]; the AveragePool counts padding (a constant 1/9 divisor: a linear map).
* ``muse-a`` -- SIMC/MUSE benchmark A [CRISP VI-C: "a 2-layer convolutional neural
  network trained on MNIST", networks of MUSE [10] / MiniONN [35]]: MiniONN's MNIST net
  as MUSE (built on Delphi) runs it: conv(1->16,5x5) -> ReLU -> avgpool 2 ->
  conv(16->16,5x5) -> ReLU -> avgpool 2 -> FC(256->100) -> ReLU -> FC(100->10).
* ``muse-b`` -- benchmark B [CRISP VI-C: "a 7-layer CNN architecture for CIFAR-10"],
  MiniONN's CIFAR-10 net: seven convs (3x3: 64,64, avgpool, 64,64, avgpool, 64;
  1x1: 64, 16), each followed by ReLU, then FC(1024->10).
* ``stamp-transformer`` -- the small Transformer of [STAMP 5.1] ("limited dimensions
  and a small number of multi-head attention", Wikitext-2). STAMP gives no sizes; we use
  a 2-layer post-LN encoder [Vaswani et al.], sequence 32, d_model 64, 4 heads, FFN 256,
  sinusoidal positions, and a 256-way output layer. The token embedding is looked up by
  the client: the model input is the embedded sequence (batch, 32, 64).
"""

from __future__ import annotations

import hashlib
import inspect
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from secinfer.crypto.prg import PRG
from secinfer.errors import ConfigError

OPSET = 17
IR_VERSION = 8  # the IR version that goes with opset 17; accepted by every onnxruntime


# ---- weight source -----------------------------------------------------------------------


class _WeightSource:
    """Uniform draws in [0, 1) from the AES PRG, 16 bits of resolution per draw."""

    def __init__(self, name: str, seed: int, options: dict) -> None:
        # fold_bn changes the graph, not the function: the folded model draws the same
        # numbers in the same order, so it computes what the unfolded one does.
        opts = sorted((k, v) for k, v in options.items() if k != "fold_bn")
        tag = f"secinfer-zoo/{name}/{int(seed)}/{opts!r}".encode()
        self._prg = PRG(hashlib.sha256(tag).digest()[:16], "zoo-weights")

    def uniform(self, shape: tuple[int, ...], lo: float, hi: float) -> np.ndarray:
        n = int(np.prod(shape, dtype=np.int64))
        raw = np.frombuffer(self._prg.bytes(2 * n), dtype=np.uint16)
        u = (raw.astype(np.float32) + np.float32(0.5)) * np.float32(1.0 / 65536.0)
        return (np.float32(lo) + np.float32(hi - lo) * u).reshape(shape)


# ---- graph under construction ------------------------------------------------------------


class _Net:
    """Collects nodes and initializers; in ``dry`` mode it only counts parameters."""

    def __init__(self, name: str, seed: int, options: dict, dry: bool = False) -> None:
        self.name = name
        self.dry = dry
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.n_params = 0
        self._count: dict[str, int] = {}
        self._src = None if dry else _WeightSource(name, seed, options)

    def fresh(self, hint: str) -> str:
        k = self._count.get(hint, 0)
        self._count[hint] = k + 1
        return f"{hint}{k}"

    # -- tensors --
    def const(self, value: np.ndarray, hint: str = "const") -> str:
        """A public constant (shape, scale, positional table): not a parameter."""
        name = self.fresh(hint)
        if not self.dry:
            self.inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def param(self, shape: tuple[int, ...], lo: float, hi: float, hint: str,
              counted: bool = True) -> str:
        name = self.fresh(hint)
        if counted:
            self.n_params += int(np.prod(shape))
        if not self.dry:
            self.inits.append(numpy_helper.from_array(self._src.uniform(shape, lo, hi), name))
        return name

    def weight(self, shape: tuple[int, ...], fan_in: int, gain: float, hint: str) -> str:
        a = math.sqrt(3.0 * gain / fan_in)  # uniform(-a, a) has variance gain / fan_in
        return self.param(shape, -a, a, hint)

    def node(self, op: str, inputs: list[str], hint: str | None = None, **attrs) -> str:
        out = self.fresh(hint or op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    # -- layers --
    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, pad=0,
             gain: float = 2.0, bias: bool = True) -> str:
        pads = [pad] * 4 if isinstance(pad, int) else list(pad)
        w = self.weight((cout, cin, k, k), cin * k * k, gain, "conv_w")
        ins = [x, w]
        if bias:
            ins.append(self.param((cout,), -0.05, 0.05, "conv_b"))
        return self.node("Conv", ins, "conv", kernel_shape=[k, k], strides=[stride, stride],
                         pads=pads)

    def batchnorm(self, x: str, c: int, gamma_scale: float = 1.0) -> str:
        gamma = self.param((c,), 0.8 * gamma_scale, 1.2 * gamma_scale, "bn_gamma")
        beta = self.param((c,), -0.1, 0.1, "bn_beta")
        mean = self.param((c,), -0.1, 0.1, "bn_mean", counted=False)
        var = self.param((c,), 0.8, 1.2, "bn_var", counted=False)
        return self.node("BatchNormalization", [x, gamma, beta, mean, var], "bn",
                         epsilon=1e-5)

    def conv_bn(self, x: str, cin: int, cout: int, k: int, stride: int = 1, pad: int = 0,
                gain: float = 2.0, gamma_scale: float = 1.0, fold: bool = False) -> str:
        """Conv (no bias) + BatchNorm, or, with ``fold``, one Conv whose weights and bias
        already include the BatchNorm: W*g/sqrt(v+eps), beta-m*g/sqrt(v+eps)."""
        if not fold:
            return self.batchnorm(self.conv(x, cin, cout, k, stride, pad, gain, bias=False),
                                  cout, gamma_scale)
        wname = self.fresh("conv_w")
        bname = self.fresh("conv_b")
        self.n_params += cout * cin * k * k + cout
        if not self.dry:
            a = math.sqrt(3.0 * gain / (cin * k * k))
            w = self._src.uniform((cout, cin, k, k), -a, a)
            g = self._src.uniform((cout,), 0.8 * gamma_scale, 1.2 * gamma_scale)
            beta = self._src.uniform((cout,), -0.1, 0.1)
            mean = self._src.uniform((cout,), -0.1, 0.1)
            var = self._src.uniform((cout,), 0.8, 1.2)
            s = (g / np.sqrt(var + np.float32(1e-5))).astype(np.float32)
            self.inits.append(numpy_helper.from_array((w * s[:, None, None, None]), wname))
            self.inits.append(numpy_helper.from_array((beta - mean * s).astype(np.float32),
                                                      bname))
        return self.node("Conv", [x, wname, bname], "conv", kernel_shape=[k, k],
                         strides=[stride, stride], pads=[pad] * 4)

    def relu(self, x: str) -> str:
        return self.node("Relu", [x])

    def maxpool(self, x: str, k: int, s: int, pad: int = 0) -> str:
        return self.node("MaxPool", [x], kernel_shape=[k, k], strides=[s, s], pads=[pad] * 4)

    def avgpool(self, x: str, k: int, s: int, pad: int = 0) -> str:
        return self.node("AveragePool", [x], kernel_shape=[k, k], strides=[s, s],
                         pads=[pad] * 4, count_include_pad=1)

    def flatten(self, x: str) -> str:
        return self.node("Flatten", [x], axis=1)

    def gemm(self, x: str, fin: int, fout: int, gain: float = 2.0) -> str:
        """y = x W^T + b with W stored (fout, fin), as a dense layer is usually exported."""
        w = self.weight((fout, fin), fin, gain, "fc_w")
        b = self.param((fout,), -0.05, 0.05, "fc_b")
        return self.node("Gemm", [x, w, b], "fc", transB=1)

    def linear3d(self, x: str, fin: int, fout: int, gain: float = 1.0) -> str:
        """MatMul by a (fin, fout) weight on the last axis of a 3-D tensor, then + bias."""
        w = self.weight((fin, fout), fin, gain, "lin_w")
        b = self.param((fout,), -0.05, 0.05, "lin_b")
        return self.node("Add", [self.node("MatMul", [x, w]), b])

    def finish(self, x_shape: list[int], out: str, out_shape: list[int]) -> onnx.ModelProto:
        inp = helper.make_tensor_value_info("input", TensorProto.FLOAT, x_shape)
        # Rename the last value to "output" so every zoo model has the same I/O names.
        last = self.nodes[-1]
        if last.output[0] != out:
            raise ConfigError(f"zoo builder for {self.name} did not end on its output node")
        last.output[0] = "output"
        outp = helper.make_tensor_value_info("output", TensorProto.FLOAT, out_shape)
        graph = helper.make_graph(self.nodes, self.name.replace("-", "_"), [inp], [outp],
                                  initializer=self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="secinfer.ir.zoo")
        model.ir_version = IR_VERSION
        return model


# ---- builders: each takes (net, batch, **options), returns (input shape, output, out shape)


def _secureml_a(net: _Net, batch: int):
    x = "input"
    h = net.relu(net.gemm(x, 784, 128, gain=1.0))
    h = net.relu(net.gemm(h, 128, 128))
    return [batch, 784], net.gemm(h, 128, 10), [batch, 10]


def _network_b(net: _Net, batch: int):
    h = net.relu(net.conv("input", 1, 5, 2, stride=2, gain=1.0))      # 5x14x14 = 980
    h = net.relu(net.gemm(net.flatten(h), 980, 100))
    return [batch, 1, 28, 28], net.gemm(h, 100, 10), [batch, 10]


def _minionn_mnist(net: _Net, batch: int, pool: str, c1: int, c2: int, hidden: int):
    """Two 5x5 convs with 2x2 pooling and two dense layers (MiniONN / LeNet family)."""
    def pool2(t: str) -> str:
        return net.maxpool(t, 2, 2) if pool == "max" else net.avgpool(t, 2, 2)

    h = net.conv("input", 1, c1, 5, gain=1.0)                     # c1 x 24 x 24
    h = net.relu(pool2(h)) if pool == "max" else pool2(net.relu(h))
    h = net.conv(h, c1, c2, 5)                                    # c2 x 8 x 8
    h = net.relu(pool2(h)) if pool == "max" else pool2(net.relu(h))
    h = net.relu(net.gemm(net.flatten(h), c2 * 16, hidden))
    return [batch, 1, 28, 28], net.gemm(h, hidden, 10), [batch, 10]


def _network_c(net: _Net, batch: int):
    return _minionn_mnist(net, batch, "max", 16, 16, 100)


def _lenet(net: _Net, batch: int):
    return _minionn_mnist(net, batch, "max", 20, 50, 500)


def _muse_a(net: _Net, batch: int):
    return _minionn_mnist(net, batch, "avg", 16, 16, 100)


def _muse_b(net: _Net, batch: int):
    h = "input"
    plan = [(3, 64, 3), (64, 64, 3), "pool", (64, 64, 3), (64, 64, 3), "pool",
            (64, 64, 3), (64, 64, 1), (64, 16, 1)]
    first = True
    for step in plan:
        if step == "pool":
            h = net.avgpool(h, 2, 2)
            continue
        cin, cout, k = step
        h = net.relu(net.conv(h, cin, cout, k, pad=k // 2, gain=1.0 if first else 2.0))
        first = False
    return [batch, 3, 32, 32], net.gemm(net.flatten(h), 1024, 10), [batch, 10]


def _alexnet(net: _Net, batch: int):
    h = net.conv("input", 3, 96, 11, stride=4, pad=(9, 9, 10, 10), gain=1.0)  # 96x11x11
    h = net.relu(net.maxpool(h, 3, 2))                                        # 96x5x5
    h = net.batchnorm(h, 96)          # after ReLU, as Falcon: not foldable into a conv
    h = net.conv(h, 96, 256, 5, pad=1)                                        # 256x3x3
    h = net.relu(net.maxpool(h, 3, 2))                                        # 256x1x1
    h = net.batchnorm(h, 256)
    for cin, cout in [(256, 384), (384, 384), (384, 256)]:
        h = net.relu(net.conv(h, cin, cout, 3, pad=1))
    h = net.relu(net.gemm(net.flatten(h), 256, 256))
    h = net.relu(net.gemm(h, 256, 256))
    return [batch, 3, 32, 32], net.gemm(h, 256, 10), [batch, 10]


def _vgg16(net: _Net, batch: int):
    h, cin, first = "input", 3, True
    for block in [[64, 64], [128, 128], [256] * 3, [512] * 3, [512] * 3]:
        for i, cout in enumerate(block):
            h = net.conv(h, cin, cout, 3, pad=1, gain=1.0 if first else 2.0)
            first = False
            cin = cout
            # Falcon's order: the block's last conv is pooled before its ReLU.
            h = net.relu(net.maxpool(h, 2, 2)) if i == len(block) - 1 else net.relu(h)
    h = net.relu(net.gemm(net.flatten(h), 512, 4096))
    h = net.relu(net.gemm(h, 4096, 4096))
    return [batch, 3, 32, 32], net.gemm(h, 4096, 10), [batch, 10]


def _resnet(net: _Net, batch: int, blocks: list[int], widths: list[int], stem: str,
            image: int, classes: int, fold_bn: bool):
    """Basic-block ResNet. ``stem``: "imagenet" (7x7/2 conv + 3x3/2 max pool),
    "imagenet-avg" (same with average pool, [SAFHIRE 6]) or "cifar" (3x3/1 conv)."""
    res_scale = 1.0 / math.sqrt(sum(blocks))
    if stem.startswith("imagenet"):
        h = net.relu(net.conv_bn("input", 3, widths[0], 7, 2, 3, gain=1.0, fold=fold_bn))
        h = net.avgpool(h, 3, 2, 1) if stem == "imagenet-avg" else net.maxpool(h, 3, 2, 1)
    else:
        h = net.relu(net.conv_bn("input", 3, widths[0], 3, 1, 1, gain=1.0, fold=fold_bn))
    cin = widths[0]
    for stage, (n, cout) in enumerate(zip(blocks, widths)):
        for b in range(n):
            stride = 2 if (stage > 0 and b == 0) else 1
            y = net.relu(net.conv_bn(h, cin, cout, 3, stride, 1, fold=fold_bn))
            y = net.conv_bn(y, cout, cout, 3, 1, 1, gamma_scale=res_scale, fold=fold_bn)
            if stride != 1 or cin != cout:
                h = net.conv_bn(h, cin, cout, 1, stride, 0, gain=1.0, fold=fold_bn)
            h = net.relu(net.node("Add", [h, y]))
            cin = cout
    h = net.flatten(net.node("GlobalAveragePool", [h]))
    return [batch, 3, image, image], net.gemm(h, cin, classes, gain=1.0), [batch, classes]


_RESNET18_DATA = {"imagenet": ("imagenet", 224, 1000), "cifar10": ("cifar", 32, 10),
                  "tiny": ("cifar", 64, 200)}


def _resnet18(net: _Net, batch: int, dataset: str = "imagenet", fold_bn: bool = False):
    if dataset not in _RESNET18_DATA:
        raise ConfigError(f"resnet18: dataset must be one of {sorted(_RESNET18_DATA)}")
    stem, image, classes = _RESNET18_DATA[dataset]
    return _resnet(net, batch, [2, 2, 2, 2], [64, 128, 256, 512], stem, image, classes,
                   fold_bn)


def _resnet20(net: _Net, batch: int, fold_bn: bool = False):
    return _resnet(net, batch, [3, 3, 3], [16, 32, 64], "cifar", 32, 10, fold_bn)


def _resnet34(net: _Net, batch: int, fold_bn: bool = False):
    return _resnet(net, batch, [3, 4, 6, 3], [64, 128, 256, 512], "imagenet-avg", 224,
                   1000, fold_bn)


def _sinusoid(seq: int, d: int) -> np.ndarray:
    pos = np.arange(seq, dtype=np.float64)[:, None]
    i = np.arange(d // 2, dtype=np.float64)[None, :]
    ang = pos / np.power(10000.0, 2.0 * i / d)
    pe = np.zeros((seq, d))
    pe[:, 0::2], pe[:, 1::2] = np.sin(ang), np.cos(ang)
    return pe.astype(np.float32)


def _stamp_transformer(net: _Net, batch: int, seq: int = 32, d_model: int = 64,
                       heads: int = 4, d_ff: int = 256, layers: int = 2, vocab: int = 256):
    if d_model % heads or d_model % 2:
        raise ConfigError("stamp-transformer: d_model must be even and divisible by heads")
    dh = d_model // heads
    split = net.const(np.array([batch, seq, heads, dh], dtype=np.int64), "shape")
    merge = net.const(np.array([batch, seq, d_model], dtype=np.int64), "shape")
    scale = net.const(np.array(1.0 / math.sqrt(dh), dtype=np.float32), "scale")

    def layer_norm(t: str) -> str:
        g = net.param((d_model,), 0.9, 1.1, "ln_gamma")
        b = net.param((d_model,), -0.05, 0.05, "ln_beta")
        return net.node("LayerNormalization", [t, g, b], "ln", axis=-1, epsilon=1e-5)

    def heads_first(t: str) -> str:      # (B,S,D) -> (B,H,S,dh)
        return net.node("Transpose", [net.node("Reshape", [t, split])], perm=[0, 2, 1, 3])

    h = net.node("Add", ["input", net.const(_sinusoid(seq, d_model), "pos")])
    for _ in range(layers):
        q = heads_first(net.linear3d(h, d_model, d_model))
        k = heads_first(net.linear3d(h, d_model, d_model))
        v = heads_first(net.linear3d(h, d_model, d_model))
        kt = net.node("Transpose", [k], perm=[0, 1, 3, 2])
        # Scale Q before the product: same function, and the product stays small.
        scores = net.node("MatMul", [net.node("Mul", [q, scale]), kt])
        attn = net.node("Softmax", [scores], axis=-1)
        ctx = net.node("Transpose", [net.node("MatMul", [attn, v])], perm=[0, 2, 1, 3])
        ctx = net.node("Reshape", [ctx, merge])
        h = layer_norm(net.node("Add", [h, net.linear3d(ctx, d_model, d_model)]))
        f = net.relu(net.linear3d(h, d_model, d_ff, gain=1.0))
        h = layer_norm(net.node("Add", [h, net.linear3d(f, d_ff, d_model, gain=2.0)]))
    out = net.linear3d(h, d_model, vocab)
    return [batch, seq, d_model], out, [batch, seq, vocab]


# ---- registry ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ZooEntry:
    name: str
    fn: Callable
    dataset: str
    description: str
    source: str
    options: dict = field(default_factory=dict)   # defaults this entry passes to fn


_ENTRIES = [
    ZooEntry("secureml-a", _secureml_a, "MNIST", "Network-A: FC 784-128-128-10, ReLU",
             "STAMP 5.1 / SecureML; Falcon"),
    ZooEntry("network-b", _network_b, "MNIST",
             "Network-B: conv 2x2/2 (5 maps) + FC 980-100-10, ReLU",
             "STAMP 5.1 / Chameleon [54]; Falcon's implementation"),
    ZooEntry("network-c", _network_c, "MNIST",
             "Network-C: 2x(conv 5x5 16 + maxpool 2 + ReLU) + FC 256-100-10",
             "STAMP 5.1 / MiniONN [38]; Falcon"),
    ZooEntry("lenet", _lenet, "MNIST",
             "LeNet: conv 5x5 20, conv 5x5 50 (maxpool + ReLU) + FC 800-500-10",
             "STAMP 5.1; Falcon"),
    ZooEntry("alexnet", _alexnet, "CIFAR-10",
             "AlexNet (CIFAR-10 variant): 5 convs, 2 maxpools, 2 BatchNorms, FC 256-256-10",
             "STAMP 5.1; Falcon's CIFAR-10 AlexNet"),
    ZooEntry("vgg16", _vgg16, "CIFAR-10", "VGG16 (CIFAR-10): 13 convs + FC 512-4096-4096-10",
             "STAMP 5.1; Falcon's CIFAR-10 VGG16"),
    ZooEntry("resnet18", _resnet18, "ImageNet",
             "ResNet-18, 224x224, 1000 classes (options: dataset=cifar10|tiny, fold_bn)",
             "STAMP 5.1; SAFHIRE 6"),
    ZooEntry("resnet18-cifar", _resnet18, "CIFAR-10", "ResNet-18, 3x3 stem, 32x32, 10 classes",
             "SAFHIRE 6 (CIFAR option)", {"dataset": "cifar10"}),
    ZooEntry("resnet18-tiny", _resnet18, "Tiny ImageNet",
             "ResNet-18, 3x3 stem, 64x64, 200 classes", "SAFHIRE 6 (Tiny)",
             {"dataset": "tiny"}),
    ZooEntry("resnet20", _resnet20, "CIFAR-10", "ResNet-20: 3x3 basic blocks, 16/32/64",
             "SAFHIRE 6"),
    ZooEntry("resnet34", _resnet34, "ImageNet",
             "ResNet-34 with the stem max pooling replaced by average pooling",
             "SAFHIRE 6 (ImageNet)"),
    ZooEntry("muse-a", _muse_a, "MNIST",
             "Benchmark A: 2x(conv 5x5 16 + ReLU + avgpool 2) + FC 256-100-10",
             "CRISP VI-C / MUSE [10] / MiniONN [35]"),
    ZooEntry("muse-b", _muse_b, "CIFAR-10",
             "Benchmark B: 7 convs (3x3/1x1, 64..16) + 2 avgpools + FC 1024-10",
             "CRISP VI-C / MUSE [10] / MiniONN [35]"),
    ZooEntry("stamp-transformer", _stamp_transformer, "Wikitext-2 (embedded)",
             "2-layer encoder: seq 32, d_model 64, 4 heads, FFN 256, 256-way output",
             "STAMP 5.1 (sizes ours: STAMP gives none)"),
]

ZOO: dict[str, ZooEntry] = {e.name: e for e in _ENTRIES}


def _run(name: str, seed: int, batch: int, options: dict, dry: bool):
    if name not in ZOO:
        raise ConfigError(f"unknown zoo model {name!r}; known: {sorted(ZOO)}")
    if not isinstance(batch, int) or batch < 1:
        raise ConfigError("batch must be a positive integer")
    entry = ZOO[name]
    allowed = list(inspect.signature(entry.fn).parameters)[2:]   # after (net, batch)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ConfigError(f"zoo model {name!r} has no option(s) {unknown}; options: {allowed}")
    opts = {**entry.options, **options}
    net = _Net(name, seed, opts, dry=dry)
    x_shape, out, out_shape = entry.fn(net, batch, **opts)
    return net, x_shape, out, out_shape


def build(name: str, seed: int = 0, batch: int = 1, **options) -> onnx.ModelProto:
    """Build zoo model ``name`` with weights seeded by ``seed``; input is named "input",
    output "output"; ``options`` are the builder's keyword options (e.g. fold_bn)."""
    net, x_shape, out, out_shape = _run(name, seed, batch, options, dry=False)
    return net.finish(x_shape, out, out_shape)


@dataclass(frozen=True)
class ModelInfo:
    name: str
    input_shape: tuple[int, ...]     # with batch 1
    output_shape: tuple[int, ...]
    params: int
    dataset: str
    description: str
    source: str


def describe(name: str, **options) -> ModelInfo:
    """Shapes and parameter count of one model, without drawing any weight."""
    net, x_shape, _, out_shape = _run(name, 0, 1, options, dry=True)
    e = ZOO[name]
    return ModelInfo(name, tuple(x_shape), tuple(out_shape), net.n_params, e.dataset,
                     e.description, e.source)


def list_models() -> list[ModelInfo]:
    return [describe(name) for name in ZOO]
