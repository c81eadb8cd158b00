"""Walk a secinfer IR graph on replicated shares with a pluggable non-linear backend.

Shared by STAMP (LTEE-assisted backend) and the Falcon+ baseline (pure MPC backend) so
both run exactly the same graph, sharing, input and output code and differ only in the
non-linear protocols being compared [STAMP 5.1 "Falcon+"].

Linear nodes (Conv, Gemm, MatMul, Mul of two shared tensors) are computed locally as a
3-out-of-3 product; the backend finishes them (re-share, truncation, bias) together
with the chain of non-linear nodes that follows when each intermediate tensor has a
single consumer: MatMulReLU, MatMulMaxPoolReLU, MatMulBatchNormReLU [STAMP 4.3-4.4], or a
Mul by a one-element weight after movement ops (``_scalar_mul_after_moves``).
Movement ops and additions are local on both components.

A backend with an ``output_receiver`` (STAMP) may fuse the graph's last product with the
opening of the output: a product with no non-linearity after it whose result reaches the
graph's only output through single-input movement ops alone (``_moves_to_output``) goes
to ``backend.product_output``, which returns the plaintext at the receiver; the moves
are applied to it there and the output is marked ``Opened``. Backends without that
attribute (Falcon+) run the product and the opening as before.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from secinfer.errors import UnsupportedOpError
from secinfer.ir.graph import Graph, Node
from secinfer.ir.movement import MOVEMENT
from secinfer.sharing import replicated as rss
from secinfer.sharing.replicated import Pair

LINEAR = ("Conv", "Gemm", "MatMul", "Mul")
FUSABLE = ("Relu", "MaxPool", "BatchNormalization")
CHAIN_OPS = ("Relu", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
             "BatchNormalization", "LayerNormalization", "Sigmoid", "Tanh", "Erf", "Gelu", "Exp", "Sqrt")
LOCAL_OPS = ("Add", "Sub", "Neg")


class Opened:
    """The graph's output, already opened to its receiver by the backend: ``value`` is the
    plaintext ring array at the receiver and None at the other parties."""

    def __init__(self, value: np.ndarray | None) -> None:
        self.value = value


class Backend(Protocol):
    def product(self, node: Node, x: Pair, w: Pair, bias: Pair | None, chain: list[Node],
                params: list[list[Pair]], out_shape: tuple) -> Pair: ...

    def chain(self, x: Pair, nodes: list[Node], params: list[list[Pair]], out_shape: tuple) -> Pair: ...

    def softmax(self, x: Pair, node: Node) -> Pair: ...


def supported_ops(extra: tuple = ()) -> set:
    return set(MOVEMENT) | set(LINEAR) | set(CHAIN_OPS) | set(LOCAL_OPS) | {"Softmax"} | set(extra)


def check_graph(graph: Graph, supported: set, protocol: str) -> None:
    for n in graph.nodes:
        if n.op not in supported:
            raise UnsupportedOpError(n.op, n.name, f"protocol {protocol} has no protocol for it")
        if n.op in LINEAR and n.op != "Mul" and len(n.inputs) < 2:
            raise UnsupportedOpError(n.op, n.name, "needs two operands")


def _follow(graph: Graph, start: str, allowed: tuple, consumers: dict, outputs: set) -> list[Node]:
    chain, cur = [], start
    while cur not in outputs and len(consumers.get(cur, [])) == 1:
        nxt = consumers[cur][0]
        if nxt.op not in allowed or nxt.inputs[0] != cur:
            break
        chain.append(nxt)
        cur = nxt.outputs[0]
    return chain


def _scalar_mul_after_moves(graph: Graph, start: str, consumers: dict, outputs: set) -> tuple[list, Node | None]:
    """Movement ops (single consumers) ending in a Mul by a one-element weight: the Mul
    commutes with the moves, so it can run in the product's device chain before them
    (attention's Q * 1/sqrt(d) after the head split). Returns (moves, mul) or ([], None)."""
    cur, moves = start, []
    while cur not in outputs and len(consumers.get(cur, [])) == 1:
        nxt = consumers[cur][0]
        if nxt.op in MOVEMENT and nxt.inputs and nxt.inputs[0] == cur and len(nxt.outputs) == 1:
            moves.append(nxt)
            cur = nxt.outputs[0]
            continue
        if (nxt.op == "Mul" and len(nxt.inputs) == 2 and nxt.inputs[0] == cur
                and nxt.inputs[1] in graph.weight_info
                and int(np.prod(graph.weight_info[nxt.inputs[1]].shape)) == 1):
            return moves, nxt
        break
    return [], None


def _moves_to_output(graph: Graph, start: str, consumers: dict, outputs: set) -> list[Node] | None:
    """The single-input movement ops (each the only consumer of its input) that lead from
    ``start`` to the graph's only output, which nothing else consumes: a list, possibly
    empty; None if there is no such path."""
    if len(graph.output_names) != 1:
        return None
    cur, moves = start, []
    while cur not in outputs:
        cons = consumers.get(cur, [])
        if len(cons) != 1:
            return None
        nxt = cons[0]
        if nxt.op not in MOVEMENT or list(nxt.inputs) != [cur] or len(nxt.outputs) != 1:
            return None
        moves.append(nxt)
        cur = nxt.outputs[0]
    return None if consumers.get(cur) else moves


def run_graph(ring, me: int, backend: Backend, graph: Graph, env: dict[str, Pair]) -> dict[str, Pair]:
    """Evaluate every node; ``env`` holds the shared inputs and weights by tensor name."""
    consumers = graph.consumers()
    outputs = set(graph.output_names)
    done: set = set()
    for node in graph.nodes:
        if node.name in done:
            continue
        op = node.op
        ins = [env[i] for i in node.inputs]
        if op in MOVEMENT:
            ya = MOVEMENT[op](node, [p.a for p in ins])
            yb = MOVEMENT[op](node, [p.b for p in ins])
            for o, a, b in zip(node.outputs, ya, yb):
                env[o] = Pair(np.asarray(a, np.uint64), np.asarray(b, np.uint64))
        elif op == "Add":
            env[node.outputs[0]] = rss.add(ring, ins[0], ins[1])
        elif op == "Sub":
            env[node.outputs[0]] = rss.sub(ring, ins[0], ins[1])
        elif op == "Neg":
            env[node.outputs[0]] = rss.neg(ring, ins[0])
        elif op in LINEAR:
            bias = ins[2] if op in ("Gemm", "Conv") and len(ins) > 2 else None
            chain = _follow(graph, node.outputs[0], FUSABLE, consumers, outputs)
            moves, smul = ([], None) if chain else _scalar_mul_after_moves(graph, node.outputs[0], consumers,
                                                                            outputs)
            to_out = None
            if not chain and smul is None and getattr(backend, "output_receiver", None) is not None:
                to_out = _moves_to_output(graph, node.outputs[0], consumers, outputs)
            if to_out is not None:   # the last product, fused with the opening
                y = backend.product_output(node, ins[0], ins[1], bias, tuple(graph.shapes[node.outputs[0]]))
                for mv in to_out:
                    y = None if y is None else np.asarray(MOVEMENT[mv.op](mv, [y])[0], np.uint64)
                env[to_out[-1].outputs[0] if to_out else node.outputs[0]] = Opened(y)
                done.update(mv.name for mv in to_out)
                continue
            if smul is not None:
                chain = [smul]
            params = [[env[i] for i in c.inputs[1:]] for c in chain]
            last = chain[-1].outputs[0] if chain else node.outputs[0]
            shape = graph.shapes[node.outputs[0]] if smul is not None else graph.shapes[last]
            y = backend.product(node, ins[0], ins[1], bias, chain, params, tuple(shape))
            for mv in moves:   # the scaled product through the moves (smul only)
                rest = [env[i] for i in mv.inputs[1:]]
                ya = MOVEMENT[mv.op](mv, [y.a] + [p.a for p in rest])[0]
                yb = MOVEMENT[mv.op](mv, [y.b] + [p.b for p in rest])[0]
                y = Pair(np.asarray(ya, np.uint64), np.asarray(yb, np.uint64))
            env[last] = y
            done.update(c.name for c in chain)
            done.update(mv.name for mv in moves)
        elif op in CHAIN_OPS:
            chain = [node] + _follow(graph, node.outputs[0], FUSABLE, consumers, outputs)
            params = [[env[i] for i in c.inputs[1:]] for c in chain]
            last = chain[-1].outputs[0]
            env[last] = backend.chain(ins[0], chain, params, tuple(graph.shapes[last]))
            done.update(c.name for c in chain)
        elif op == "Softmax":
            env[node.outputs[0]] = backend.softmax(ins[0], node)
        else:
            raise UnsupportedOpError(op, node.name, "no secure protocol")
    return env
