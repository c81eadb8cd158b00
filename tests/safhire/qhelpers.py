"""Small models for the SAFHIRE tests (tiny ResNet with max pooling, bundled digits)."""

from __future__ import annotations

import functools

import numpy as np

from secinfer.ir import bundled, zoo
from secinfer.ir.onnx_import import load_model
from secinfer.ir import quantize as Q


@functools.lru_cache(maxsize=None)
def tiny_resnet():
    """8x8x3 input: conv-bn-relu stem + 2x2 max pool, two basic blocks (one with a 1x1
    downsampling shortcut), global average pool, 10 logits."""
    net = zoo._Net("tiny-resnet", 3, {})
    h = net.relu(net.conv_bn("input", 3, 4, 3, 1, 1, gain=1.0, fold=True))
    h = net.maxpool(h, 2, 2)                                    # 4 x 4 x 4
    return blocks_and_head(net, h, 8, fold=True)


def blocks_and_head(net, h: str, size: int, fold: bool):
    """Two basic blocks on ``h`` (4 channels; the second one strided, with a 1x1 shortcut),
    global average pool and 10 logits; the model of a 1x3x``size``x``size`` input."""
    cin = 4
    for cout, stride in ((4, 1), (6, 2)):
        y = net.relu(net.conv_bn(h, cin, cout, 3, stride, 1, fold=fold))
        y = net.conv_bn(y, cout, cout, 3, 1, 1, fold=fold)
        if stride != 1 or cin != cout:
            h = net.conv_bn(h, cin, cout, 1, stride, 0, gain=1.0, fold=fold)
        h = net.relu(net.node("Add", [h, y]))
        cin = cout
    h = net.flatten(net.node("GlobalAveragePool", [h]))
    out = net.gemm(h, cin, 10, gain=1.0)
    return load_model(net.finish([1, 3, size, size], out, [1, 10]).SerializeToString())


@functools.lru_cache(maxsize=None)
def digits(name: str = "digits-cnn"):
    g = load_model(str(bundled.bundled_path(name)))
    x, y = bundled.bundled_testset(name)
    return g, x, y


@functools.lru_cache(maxsize=None)
def quantized(name: str, b: int):
    if name in ("tiny-resnet", "gap-resnet"):
        g = tiny_resnet() if name == "tiny-resnet" else gap_resnet()
        cal = Q.calibration_inputs(g, None, 32)
        return g, Q.quantize(g, b, cal)
    g, x, _ = digits(name)
    return g, Q.quantize_searched(g, b, x[: len(x) // 2])


@functools.lru_cache(maxsize=None)
def mlp3():
    """12 -> 8 -> ReLU -> 8 -> ReLU -> 10: a first, a middle and a last round."""
    net = zoo._Net("mlp3", 11, {})
    h = net.relu(net.gemm("input", 12, 8, gain=1.0))
    h = net.relu(net.gemm(h, 8, 8))
    out = net.gemm(h, 8, 10, gain=1.0)
    return load_model(net.finish([1, 12], out, [1, 10]).SerializeToString())


@functools.lru_cache(maxsize=None)
def gap_resnet(width: int = 16):
    """ResNet-20 in small (8x8x3 input): conv-bn-relu stem, two basic blocks whose second
    batch norm is damped by 1/sqrt(9) as the zoo's ResNet-20 does, global average pooling
    over 8 x 8, then FC to 10 logits [issue 18: fused with the FC, the pooling's 1/64 rounds
    the whole head to 0 at b = 12]."""
    import math

    net = zoo._Net("gap-resnet", 7, {})
    h = net.relu(net.conv_bn("input", 3, width, 3, 1, 1, gain=1.0, fold=True))
    for _ in range(2):
        y = net.relu(net.conv_bn(h, width, width, 3, 1, 1, fold=True))
        y = net.conv_bn(y, width, width, 3, 1, 1, gamma_scale=1.0 / math.sqrt(9), fold=True)
        h = net.relu(net.node("Add", [h, y]))
    h = net.flatten(net.node("GlobalAveragePool", [h]))
    out = net.gemm(h, width, 10, gain=1.0)
    return load_model(net.finish([1, 3, 8, 8], out, [1, 10]).SerializeToString())
