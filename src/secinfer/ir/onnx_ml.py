"""ONNX import of the ``ai.onnx.ml`` operators scikit-learn models are exported with
(a mixin of the importer in onnx_import.py), and of the label steps around them.

What ``skl2onnx.to_onnx(estimator, X)`` produces for linear models, MLPs and scalers is
mapped onto canonical ops (docs/ir.md, docs/models.md):

* ``Scaler``            -> Sub(x, offset) -> Mul(., scale)
* ``LinearRegressor``   -> Gemm(x, W, b)
* ``SVMRegressor`` (kernel LINEAR) -> Gemm(x, sum_i c_i sv_i, rho)
* ``LinearClassifier``  -> Gemm(x, W, b) [-> Softmax | Sigmoid] for the scores. A binary
  model (skl2onnx writes the rows -w, w and the intercepts -b, b) is computed as ONE
  column s = x.w + b [-> Sigmoid]: the ONNX scores [f(-s), f(s)] are rebuilt from it on
  the client (``secinfer.ir.outputs``), so the secure graph is the [Sub, Mul] -> Gemm
  [-> Sigmoid] form every linear protocol (ASTRA's prediction functions) knows.
* ``Normalizer`` L1 of probabilities that already sum to one (a Softmax output, or a
  binary logistic pair) is the identity and is dropped; any other Normalizer is refused.
* ``ZipMap`` (scores as a list of dicts) is a presentation step: the scores tensor is the
  protocol's output and the class labels are kept in the graph's ``meaning``.
* Label outputs (``LinearClassifier``'s label, ``ArgMax`` -> ``ArrayFeatureExtractor``
  (classes, .) -> ``Reshape`` -> ``Cast`` chains) are not computed by the protocol: the
  label is the argmax of the scores, taken after the output is revealed (or, where a
  protocol has a secure comparison and the user asks for labels only, by the protocol).

Everything else in the domain (tree ensembles, kernel SVMs, imputers, encoders, ...) is
refused with the node named and a pointer to docs/models.md.
"""

from __future__ import annotations

import numpy as np

from secinfer.errors import ModelError

ML_DOMAIN = "ai.onnx.ml"
MODELS_DOC = "docs/models.md (\"Export your own model\")"
# ops of the default domain that may carry a label (an integer class index or class value)
_LABEL_CHAIN = {"Cast", "Reshape", "Identity", "Squeeze", "Unsqueeze", "Flatten", "ArrayFeatureExtractor"}
_TREE_HINT = ("tree ensembles compare each feature with secret thresholds along secret paths; no "
              "protocol here evaluates them: train a linear model or an MLP instead")


def ml_refusal_hint(op: str) -> str:
    if op.startswith("TreeEnsemble"):
        return _TREE_HINT
    if op == "SVMClassifier":
        return ("SVMClassifier (one-vs-one votes) is not supported; use LinearSVC, or "
                "LogisticRegression, which export as LinearClassifier")
    return "this ai.onnx.ml operator is not supported"


class MLImports:
    """ml_<Name> handlers for the ai.onnx.ml domain, ArgMax and the label chains.

    State kept on the importer: ``labels`` (tensor -> {"scores": tensor, "classes": list or
    None}), ``pairs`` (ONNX tensor [f(-s), f(s)] -> (IR tensor s or p, "score" | "proba")),
    ``simplex`` (tensors whose rows are probabilities summing to one), ``zipmaps``
    (output -> input) and ``classes`` (the model's class labels, once known)."""

    def ml_init(self) -> None:
        self.labels: dict[str, dict] = {}
        self.pairs: dict[str, tuple[str, str]] = {}
        self.simplex: set[str] = set()
        self.zipmaps: dict[str, str] = {}
        self.classes: list | None = None
        self.task: str | None = None
        self.score_kind: dict[str, str] = {}
        self.complements: dict[str, str] = {}   # Sub(1, p) output -> p

    # ---- dispatch -------------------------------------------------------------------------
    def ml_handler(self, op: str):
        return getattr(self, f"ml_{op}", None)

    def import_label_step(self, node, ins, attrs) -> None:
        """A node that reads a label: only label bookkeeping steps are allowed."""
        op = node.op_type
        lab = next(self.labels[i] for i in ins if i in self.labels)
        if node.domain in ("", "ai.onnx") and op in _LABEL_CHAIN and op != "ArrayFeatureExtractor":
            self.labels[node.output[0]] = dict(lab)
            return
        if op == "ArrayFeatureExtractor" and len(ins) == 2 and ins[1] in self.labels \
                and ins[0] in self.consts:
            classes = np.asarray(self.consts[ins[0]]).reshape(-1).tolist()
            if lab.get("classes") is None:
                self.labels[node.output[0]] = {**lab, "classes": classes}
            else:  # indexing a list of labels by labels: keep the chain's composition
                self.labels[node.output[0]] = {**lab, "classes": [classes[int(c)] for c in lab["classes"]]}
            if self.classes is None:
                self.classes = self.labels[node.output[0]]["classes"]
            return
        raise self.unsupported(op, "computes with the predicted class label; secinfer outputs the "
                                   "scores and takes the label (argmax) after the output is revealed")

    def materialize_pair(self, name: str) -> str:
        """The full ONNX tensor [f(-s), f(s)] of a binary pair, for a consumer that needs it."""
        s, mode = self.pairs[name]
        neg = self.fresh(f"{name}_neg")
        if mode == "proba":
            one = self.weight(np.ones((1,)), f"{name}_one", "LinearClassifier")
            self.emit("Sub", [one, s], [neg], name=f"{self.cur}_complement")
        else:
            self.emit("Neg", [s], [neg], name=f"{self.cur}_negate")
        full = self.fresh(f"{name}_pair")
        self.emit("Concat", [neg, s], [full], {"axis": 1}, name=f"{self.cur}_pair")
        del self.pairs[name]
        self.alias[name] = full
        if mode == "proba":
            self.simplex.add(full)
        return full

    # ---- default-domain helpers for classifiers -----------------------------------------------
    def binary_pair_step(self, node, ins, attrs) -> bool:
        """The binary-probability pattern of skl2onnx's MLPClassifier: p (one column, a Sigmoid
        output), Sub(1, p), Concat([1 - p, p], axis 1) is the pair [1 - p, p] of p (the client
        rebuilds it; the secure graph ends at p); ArgMax of a pair is its label. True when
        the node was taken care of here."""
        op = node.op_type
        if op == "Sub" and len(ins) == 2 and ins[0] in self.consts and ins[1] not in self.consts:
            c = np.asarray(self.consts[ins[0]])
            if c.size == 1 and float(c.reshape(-1)[0]) == 1.0 and self.shapes.get(ins[1], (None, 0))[-1] == 1:
                self.complements[node.output[0]] = ins[1]
            return False
        if op == "Concat" and len(ins) == 2 and int(attrs.get("axis", 0)) % 2 == 1 \
                and self.complements.get(ins[0]) == ins[1] and len(self.shapes[ins[1]]) == 2 \
                and self.score_kind.get(ins[1]) == "probabilities":
            self.pairs[node.output[0]] = (ins[1], "proba")
            self.shapes[node.output[0]] = (self.shapes[ins[1]][0], 2)
            return True
        if op == "ArgMax" and ins and ins[0] in self.pairs:
            self.check_attrs("ArgMax", attrs, {"axis", "keepdims", "select_last_index"})
            if int(attrs.get("axis", 0)) % 2 != 1 or attrs.get("select_last_index", 0):
                raise self.unsupported("ArgMax", "only the argmax over the classes")
            self.labels[node.output[0]] = {"scores": ins[0], "classes": None}
            return True
        if op == "Sigmoid" and ins:
            self.score_kind[node.output[0]] = "probabilities"
        return False


    def op_ArgMax(self, node, ins, attrs):
        self.check_attrs("ArgMax", attrs, {"axis", "keepdims", "select_last_index"})
        x = ins[0]
        r = len(self.shapes[x])
        if r != 2 or int(attrs.get("axis", 0)) % r != 1 or attrs.get("select_last_index", 0):
            raise self.unsupported("ArgMax", "only the argmax over the classes of (batch, classes) scores, "
                                             "as the predicted label")
        self.labels[node.output[0]] = {"scores": x, "classes": None}

    # ---- ai.onnx.ml ------------------------------------------------------------------------
    def _floats(self, attrs, key, op, required=True) -> np.ndarray | None:
        v = attrs.get(key)
        if v is None:
            if required:
                raise ModelError(f"node {self.cur!r} ({op}): attribute {key!r} is required")
            return None
        a = np.asarray(v, np.float64).reshape(-1)
        if not np.all(np.isfinite(a)):
            raise ModelError(f"node {self.cur!r} ({op}): attribute {key!r} holds NaN or infinity")
        return a

    def _features(self, x: str, op: str) -> int:
        s = self.shapes[x]
        if len(s) != 2 or s[1] is None:
            raise self.unsupported(op, f"input must be (batch, features), got {s}")
        return int(s[1])

    def ml_Scaler(self, node, ins, attrs):
        self.check_attrs("Scaler", attrs, {"offset", "scale"})
        x = ins[0]
        k = self._features(x, "Scaler")
        off = self._floats(attrs, "offset", "Scaler", required=False)
        sc = self._floats(attrs, "scale", "Scaler", required=False)
        for name, v in (("offset", off), ("scale", sc)):
            if v is not None and v.size not in (1, k):
                raise ModelError(f"node {self.cur!r} (Scaler): {name} has {v.size} values for {k} features")
        cur = x
        if off is not None and np.any(off != 0):
            mid = self.fresh(f"{self.cur}_centered")
            self.emit("Sub", [cur, self.weight(np.broadcast_to(off, (k,)).copy(), f"{self.cur}_offset", "Scaler")],
                      [mid], name=f"{self.cur}_sub")
            cur = mid
        if sc is not None and np.any(sc != 1):
            self.emit("Mul", [cur, self.weight(np.broadcast_to(sc, (k,)).copy(), f"{self.cur}_scale", "Scaler")],
                      [node.output[0]], name=f"{self.cur}_mul")
        elif cur != x:
            self.alias[node.output[0]] = cur
        else:
            self.alias[node.output[0]] = x

    def _gemm(self, x: str, w: np.ndarray, b: np.ndarray, out: str, what: str) -> None:
        self.emit("Gemm", [x, self.weight(w, f"{self.cur}_W", what), self.weight(b, f"{self.cur}_b", what)],
                  [out], name=f"{self.cur}")

    def ml_LinearRegressor(self, node, ins, attrs):
        self.check_attrs("LinearRegressor", attrs, {"coefficients", "intercepts", "targets", "post_transform"})
        if attrs.get("post_transform", "NONE") != "NONE":
            raise self.unsupported("LinearRegressor", f"post_transform={attrs['post_transform']!r}")
        k = self._features(ins[0], "LinearRegressor")
        t = int(attrs.get("targets", 1))
        coef = self._floats(attrs, "coefficients", "LinearRegressor")
        if t < 1 or coef.size != t * k:
            raise ModelError(f"node {self.cur!r} (LinearRegressor): {coef.size} coefficients for "
                             f"{t} targets x {k} features")
        icpt = self._floats(attrs, "intercepts", "LinearRegressor", required=False)
        b = np.zeros(t) if icpt is None else np.broadcast_to(icpt, (t,)).copy()
        self._gemm(ins[0], coef.reshape(t, k).T.copy(), b, node.output[0], "LinearRegressor")
        self.task = self.task or "regression"
        self.score_kind[node.output[0]] = "values"

    def ml_SVMRegressor(self, node, ins, attrs):
        self.check_attrs("SVMRegressor", attrs, {"coefficients", "kernel_params", "kernel_type",
                                                  "n_supports", "one_class", "post_transform", "rho",
                                                  "support_vectors"})
        if attrs.get("kernel_type", "LINEAR") != "LINEAR":
            raise self.unsupported("SVMRegressor", f"kernel_type={attrs.get('kernel_type')!r} (only LINEAR: "
                                                   "a kernel SVM is not a linear function of the input)")
        if attrs.get("one_class", 0) or attrs.get("post_transform", "NONE") != "NONE":
            raise self.unsupported("SVMRegressor", "one_class or a post_transform")
        k = self._features(ins[0], "SVMRegressor")
        coef = self._floats(attrs, "coefficients", "SVMRegressor")
        sv = self._floats(attrs, "support_vectors", "SVMRegressor", required=False)
        rho = self._floats(attrs, "rho", "SVMRegressor", required=False)
        n = int(attrs.get("n_supports", 0))
        if n > 0:
            if sv is None or sv.size != n * k or coef.size != n:
                raise ModelError(f"node {self.cur!r} (SVMRegressor): support vectors/coefficients "
                                 f"do not match n_supports={n} and {k} features")
            w = coef @ sv.reshape(n, k)    # sum_i c_i <sv_i, x> = <sum_i c_i sv_i, x>
        else:                              # the linear form: coefficients are the weights
            if coef.size != k:
                raise ModelError(f"node {self.cur!r} (SVMRegressor): {coef.size} coefficients for {k} features")
            w = coef
        b = np.zeros(1) if rho is None else rho.reshape(-1)[:1].copy()
        self._gemm(ins[0], w.reshape(k, 1), b, node.output[0], "SVMRegressor")
        self.task = self.task or "regression"
        self.score_kind[node.output[0]] = "values"

    def ml_LinearClassifier(self, node, ins, attrs):
        self.check_attrs("LinearClassifier", attrs, {"classlabels_ints", "classlabels_strings", "coefficients",
                                                      "intercepts", "multi_class", "post_transform"})
        pt = attrs.get("post_transform", "NONE")
        if pt not in ("NONE", "LOGISTIC", "SOFTMAX"):
            raise self.unsupported("LinearClassifier", f"post_transform={pt!r}")
        classes = attrs.get("classlabels_ints", attrs.get("classlabels_strings"))
        if classes is None or len(classes) < 2:
            raise self.unsupported("LinearClassifier", "needs at least two class labels")
        classes = list(classes)
        k = self._features(ins[0], "LinearClassifier")
        coef = self._floats(attrs, "coefficients", "LinearClassifier")
        if coef.size % k:
            raise ModelError(f"node {self.cur!r} (LinearClassifier): {coef.size} coefficients for {k} features")
        rows = coef.size // k
        w = coef.reshape(rows, k).T                    # (K, rows)
        icpt = self._floats(attrs, "intercepts", "LinearClassifier", required=False)
        b = np.zeros(rows) if icpt is None else np.broadcast_to(icpt, (rows,)).copy()
        label_out = node.output[0] if node.output and node.output[0] else None
        scores_out = node.output[1] if len(node.output) > 1 and node.output[1] else None
        scores = scores_out or self.fresh(f"{self.cur}_scores")
        binary = len(classes) == 2 and (rows == 1 or (rows == 2 and np.array_equal(w[:, 0], -w[:, 1])
                                                          and b[0] == -b[1]))
        if rows != len(classes) and not binary:
            raise ModelError(f"node {self.cur!r} (LinearClassifier): {rows} coefficient rows for "
                             f"{len(classes)} classes")
        if binary and pt == "SOFTMAX":
            binary = False  # softmax of [-s, s] is sigmoid(2s): keep the general form
            if rows == 1:
                w, b = np.concatenate([-w, w], axis=1), np.concatenate([-b, b])
        if binary:
            s_col = self.fresh(f"{self.cur}_decision")
            self._gemm(ins[0], w[:, -1:].copy(), b[-1:].copy(), s_col, "LinearClassifier")
            if pt == "LOGISTIC":
                p = self.fresh(f"{self.cur}_proba")
                self.emit("Sigmoid", [s_col], [p], name=f"{self.cur}_logistic")
                self.pairs[scores] = (p, "proba")
                self.score_kind[p] = "probabilities"
            else:
                self.pairs[scores] = (s_col, "score")
                self.score_kind[s_col] = "decision"
            self.shapes[scores] = (self.shapes[ins[0]][0], 2)
        else:
            raw = self.fresh(f"{self.cur}_raw") if pt != "NONE" else scores
            self._gemm(ins[0], w.copy(), b, raw, "LinearClassifier")
            if pt == "SOFTMAX":
                self.emit("Softmax", [raw], [scores], {"axis": 1}, name=f"{self.cur}_softmax")
                self.simplex.add(scores)
                self.score_kind[scores] = "probabilities"
            elif pt == "LOGISTIC":
                self.emit("Sigmoid", [raw], [scores], name=f"{self.cur}_logistic")
                self.score_kind[scores] = "probabilities"
            else:
                self.score_kind[scores] = "decision"
        if label_out:
            self.labels[label_out] = {"scores": scores, "classes": classes}
        self.classes = classes
        self.task = "classification"

    def ml_Normalizer(self, node, ins, attrs):
        self.check_attrs("Normalizer", attrs, {"norm"})
        norm = attrs.get("norm", "MAX")
        x = ins[0]
        if norm == "L1" and (x in self.simplex or (x in self.pairs and self.pairs[x][1] == "proba")):
            # rows of probabilities already sum to one: L1 normalisation is the identity
            if x in self.pairs:
                self.pairs[node.output[0]] = self.pairs[x]
                self.shapes[node.output[0]] = self.shapes[x]
            else:
                self.alias[node.output[0]] = x
                self.simplex.add(node.output[0])
            return
        raise self.unsupported("Normalizer", f"norm={norm!r} divides each row by its norm, a division of "
                                             "secret values no protocol here computes; apply "
                                             "sklearn.preprocessing.Normalizer on the client before the "
                                             "query (it has no parameters) and export the rest of the "
                                             "pipeline")

    def ml_ZipMap(self, node, ins, attrs):
        self.check_attrs("ZipMap", attrs, {"classlabels_int64s", "classlabels_strings"})
        classes = attrs.get("classlabels_int64s", attrs.get("classlabels_strings"))
        if classes is not None and self.classes is None:
            self.classes = list(classes)
        self.zipmaps[node.output[0]] = ins[0]
        if ins[0] in self.pairs:
            self.pairs[node.output[0]] = self.pairs[ins[0]]
            self.shapes[node.output[0]] = self.shapes[ins[0]]
        else:
            self.alias[node.output[0]] = ins[0]

    def ml_ArrayFeatureExtractor(self, node, ins, attrs):
        self.check_attrs("ArrayFeatureExtractor", attrs, set())
        x, idx = ins[0], ins[1]
        if idx not in self.consts:
            raise self.unsupported("ArrayFeatureExtractor", "the indices must be a constant")
        sel = [int(v) for v in np.asarray(self.consts[idx]).reshape(-1)]
        if x in self.pairs and sel in ([0], [1]):
            s, mode = self.pairs[x]
            if sel == [1]:
                self.alias[node.output[0]] = s
            elif mode == "score":
                self.emit("Neg", [s], [node.output[0]], name=f"{self.cur}_col0")
            else:
                one = self.weight(np.ones((1,)), f"{self.cur}_one", "ArrayFeatureExtractor")
                self.emit("Sub", [one, s], [node.output[0]], name=f"{self.cur}_col0")
            return
        if x in self.pairs:
            x = self.materialize_pair(x)
        width = self.shapes[x][-1]
        if any(not 0 <= i < (width or 0) for i in sel):
            raise ModelError(f"node {self.cur!r} (ArrayFeatureExtractor): indices {sel} for width {width}")
        self.emit("Gather", [x], [node.output[0]], {"axis": len(self.shapes[x]) - 1, "indices": tuple(sel)})

    # ---- graph outputs ------------------------------------------------------------------------
    def ml_outputs(self, onnx_outputs: list[str]) -> tuple[list[tuple[str, str, bool]], dict | None]:
        """The IR outputs for the ONNX outputs (labels dropped, ZipMaps and binary pairs
        resolved) and the graph's ``meaning`` (None for a plain graph with no ML steps)."""
        label_outs = [o for o in onnx_outputs if o in self.labels]
        kept: list[tuple[str, str, bool]] = []   # (onnx output, IR tensor, IR output takes the ONNX name)
        binary = None
        for o in onnx_outputs:
            if o in self.labels:
                continue
            src = self.real(o)
            if src in self.pairs:
                s, binary = self.pairs[src]
                kept.append((o, s, False))   # the IR computes one column of the ONNX pair
            else:
                kept.append((o, src, True))
        if not kept and label_outs:   # only labels are declared: their scores become the output
            sc = self.real(self.labels[label_outs[0]]["scores"])
            if sc in self.pairs:
                s, binary = self.pairs[sc]
                kept.append((label_outs[0], s, False))
            else:
                kept.append((label_outs[0], sc, False))
        if not (label_outs or self.zipmaps or self.task or binary):
            return kept, None
        first_onnx, first = (kept[0][0], kept[0][1]) if kept else (None, None)
        decision = "identity"
        if self.task == "classification" or label_outs:
            if binary == "proba":
                decision = "threshold:0.5"
            elif binary == "score":
                decision = "threshold:0"
            else:
                decision = "argmax"
        if decision == "argmax" and label_outs:
            # a label taken from a binary pair of which the output is one column (LinearSVC)
            src = self.real(self.labels[label_outs[0]]["scores"])
            if src in self.pairs and self.real(self.pairs[src][0]) == self.real(first):
                decision = "threshold:0.5" if self.pairs[src][1] == "proba" else "threshold:0"
        classes = self.classes
        if classes is None and label_outs:
            classes = self.labels[label_outs[0]].get("classes")
        meaning = {
            "task": "classification" if decision != "identity" else (self.task or "regression"),
            "classes": None if classes is None else [c if isinstance(c, str) else int(c) for c in classes],
            "decision": decision,
            "binary": binary,
            "score_kind": self.score_kind.get(first, "values" if decision == "identity" else "scores"),
            "label_outputs": label_outs,
            "zipmap": bool(self.zipmaps),
            "onnx_output": first_onnx,
        }
        return kept, meaning
