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
attribute (Falcon+) run the product and the opening as before. Likewise only a backend
with ``products`` (STAMP) finishes sibling products of one input in one call
(``product_siblings``), and only one with ``fuse_residual`` takes a residual Add and the
non-linear ops after it into a product's chain (``_residual_chain``).
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


def _residual_chain(graph: Graph, start: str, consumers: dict, outputs: set, env: dict) -> list[Node]:
    """``start`` (a product's output) -> Add of a tensor already computed -> non-linear ops
    (each the single consumer of the one before): [Add, ...] for the product's device chain,
    which then adds the residual after the exact truncation and bias, as the oracle does
    (the Transformer's out-projection + residual + LayerNorm, FFN2 + residual + LayerNorm).
    [] if there is no such chain."""
    cons = consumers.get(start, [])
    if start in outputs or len(cons) != 1:
        return []
    add = cons[0]
    if add.op != "Add" or len(add.inputs) != 2 or add.inputs[0] == add.inputs[1]:
        return []
    other = add.inputs[1] if add.inputs[0] == start else add.inputs[0]
    if other not in env or other in graph.weight_info:
        return []
    if tuple(graph.shapes.get(other, ())) != tuple(graph.shapes.get(start, ())):
        return []
    rest = _follow(graph, add.outputs[0], CHAIN_OPS, consumers, outputs)
    if not rest:
        return []
    # the residual goes to the device as the Add's parameter, the product's output first
    return [Node(add.name, "Add", [start, other], list(add.outputs), dict(add.attrs))] + rest


def plan_product(graph: Graph, node: Node, consumers: dict, outputs: set, backend, env: dict) -> dict:
    """What runs with a product: its fused chain (MatMulReLU etc. [STAMP 4.3-4.4]; a scalar
    Mul after movement ops; with backends that take it, a residual Add and the non-linear
    ops after it), the moves applied after it, or the moves to the output (fused opening)."""
    chain = _follow(graph, node.outputs[0], FUSABLE, consumers, outputs)
    moves, smul = ([], None) if chain else _scalar_mul_after_moves(graph, node.outputs[0], consumers, outputs)
    to_out = None
    if not chain and smul is None and getattr(backend, "fuse_residual", False):
        chain = _residual_chain(graph, node.outputs[0], consumers, outputs, env)
    if not chain and smul is None and getattr(backend, "output_receiver", None) is not None:
        to_out = _moves_to_output(graph, node.outputs[0], consumers, outputs)
    if smul is not None:
        chain = [smul]
    last = chain[-1].outputs[0] if chain else node.outputs[0]
    shape = graph.shapes[node.outputs[0]] if smul is not None else graph.shapes[last]
    return {"chain": chain, "moves": moves, "to_out": to_out, "last": last, "shape": tuple(shape)}


def product_siblings(graph: Graph, node: Node, consumers: dict, done: set) -> list[Node]:
    """The other products with the same first operand and a weight as the second (attention's
    Q, K, V projections): independent of each other, so one device step can finish them."""
    if node.op not in ("Gemm", "MatMul", "Conv") or len(node.inputs) < 2 or node.inputs[1] not in graph.weight_info:
        return []
    x = node.inputs[0]
    return [c for c in consumers.get(x, []) if c is not node and c.name not in done
            and c.op in ("Gemm", "MatMul", "Conv") and len(c.inputs) > 1 and c.inputs[0] == x
            and c.inputs[1] in graph.weight_info]


def run_graph(ring, me: int, backend: Backend, graph: Graph, env: dict[str, Pair],
              mark=None) -> dict[str, Pair]:
    """Evaluate every node; ``env`` holds the shared inputs and weights by tensor name.
    ``mark(name)`` (e.g. ``Endpoint.mark``) is told each node that is not a data movement as
    it starts: the live progress of ``secinfer run`` shows the last one."""
    consumers = graph.consumers()
    outputs = set(graph.output_names)
    done: set = set()
    count = sum(n.op not in MOVEMENT for n in graph.nodes)
    k = 0
    for node in graph.nodes:
        if node.name in done:
            continue
        op = node.op
        if mark is not None and op not in MOVEMENT:
            k += 1
            mark(f"layer {k}/{count} {op}")
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
            plan = plan_product(graph, node, consumers, outputs, backend, env)
            if plan["to_out"] is not None:   # the last product, fused with the opening
                to_out = plan["to_out"]
                bias = ins[2] if op in ("Gemm", "Conv") and len(ins) > 2 else None
                y = backend.product_output(node, ins[0], ins[1], bias, tuple(graph.shapes[node.outputs[0]]))
                for mv in to_out:
                    y = None if y is None else np.asarray(MOVEMENT[mv.op](mv, [y])[0], np.uint64)
                env[to_out[-1].outputs[0] if to_out else node.outputs[0]] = Opened(y)
                done.update(mv.name for mv in to_out)
                continue
            group = [(node, plan)]
            if hasattr(backend, "products"):   # sibling products of the same input, one device step
                for sib in product_siblings(graph, node, consumers, done):
                    sp = plan_product(graph, sib, consumers, outputs, backend, env)
                    if sp["to_out"] is None and all(i in env for c in sp["chain"] for i in c.inputs[1:]):
                        group.append((sib, sp))
            items = []
            for nd, pl in group:
                xs = [env[i] for i in nd.inputs]
                bias = xs[2] if nd.op in ("Gemm", "Conv") and len(xs) > 2 else None
                params = [[env[i] for i in c.inputs[1:]] for c in pl["chain"]]
                items.append((nd, xs[0], xs[1], bias, pl["chain"], params, pl["shape"]))
            ys = backend.products(items) if len(items) > 1 else [backend.product(*items[0])]
            for (nd, pl), y in zip(group, ys):
                for mv in pl["moves"]:   # the scaled product through the moves (smul only)
                    rest = [env[i] for i in mv.inputs[1:]]
                    ya = MOVEMENT[mv.op](mv, [y.a] + [p.a for p in rest])[0]
                    yb = MOVEMENT[mv.op](mv, [y.b] + [p.b for p in rest])[0]
                    y = Pair(np.asarray(ya, np.uint64), np.asarray(yb, np.uint64))
                env[pl["last"]] = y
                done.add(nd.name)
                done.update(c.name for c in pl["chain"])
                done.update(mv.name for mv in pl["moves"])
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
