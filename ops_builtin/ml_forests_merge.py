"""Sibling tree ensembles walked in one pass: the ``sibling_forests`` graph pass.

scikit-learn's AdaBoost exports (skl2onnx) hold one TreeEnsembleClassifier per estimator, all
reading the same X: at batch 1 each walk is a few microseconds of per-node overhead around
nanoseconds of work (30 estimators: two thirds of the run). The pass replaces every group of
two or more such classifiers of one X by one TreeEnsembleRegressor over all their trees, each
member's classes becoming its own block of target columns, and a Split of its output back into
the members' score outputs, under their names.

A member qualifies where its result is exactly that regressor's block: more than two classes
(the scores are then the sums per class; one or two classes have onnxruntime's binary rules),
``post_transform`` NONE, no base values other than zeros (a classifier counts a base value as
reached, a regressor does not), thresholds and weights given as float lists (no
``*_as_tensor``), and a label output nobody reads (a graph output, or read by a node, keeps its
classifier). The regressor sums each target over its trees in tree order and a leaf's weights in
order, as the classifier sums each class: the same additions in the same order, so the scores
are the classifier's bit for bit, in both kernels (``ml_tree`` and ``fast.trees``).

Source: ONNX operator spec (Operators-ml.md), TreeEnsembleClassifier-3 and
TreeEnsembleRegressor-3; onnxruntime's ``tree_ensemble_aggregator.h`` (the classifier's and the
regressor's finishing rules).
"""
from __future__ import annotations

from typing import Optional

import numpy as np
from dynashape.model import Node
from dynashape.rewrite import GraphPass, GraphView

ML = "ai.onnx.ml"
#: the node attributes the members' trees are made of, concatenated in member order
_NODE_LISTS = ("nodes_nodeids", "nodes_featureids", "nodes_modes", "nodes_values", "nodes_truenodeids",
               "nodes_falsenodeids")
#: the version of TreeEnsembleRegressor the merged node is pinned to (its float-list form)
REGRESSOR_OPSET = 3
#: attributes a member must not have (their merged form is not written here)
_UNMERGED = ("nodes_values_as_tensor", "class_weights_as_tensor", "base_values_as_tensor",
             "nodes_hitrates_as_tensor")


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _classes(node: Node) -> int:
    labels = node.attrs.get("classlabels_int64s")
    if labels is None or len(labels) == 0:
        labels = node.attrs.get("classlabels_strings")
    return 0 if labels is None else len(labels)


def _label_unread(view: GraphView, node: Node) -> bool:
    label = node.outputs[0] if node.outputs else ""
    return not label or (label not in view.outputs and not view.consumers(label))


def _mergeable(view: GraphView, node: Node) -> bool:
    """A classifier whose scores one regressor's block of columns gives exactly (see the module)."""
    a = node.attrs
    if len(node.outputs) != 2 or not node.outputs[1] or not node.inputs or not node.inputs[0]:
        return False
    if view.opset(node) > REGRESSOR_OPSET or any(name in a for name in _UNMERGED):
        return False
    if _text(a.get("post_transform", "NONE")) != "NONE" or _classes(node) < 3:
        return False
    if any(float(b) != 0.0 for b in a.get("base_values", None) or ()):
        return False
    wanted = _NODE_LISTS + ("nodes_treeids", "class_treeids", "class_nodeids", "class_ids", "class_weights")
    if any(a.get(name) is None for name in wanted):
        return False
    ids = a["class_ids"]
    return (len(ids) == 0 or 0 <= min(ids) and max(ids) < _classes(node)) and _label_unread(view, node)


def _merged(view: GraphView, members: list) -> tuple[list, dict]:
    """The regressor and the Split that replace ``members`` (in graph order), and the Split's
    constant."""
    attrs: dict = {name: [] for name in _NODE_LISTS + ("nodes_treeids", "target_treeids", "target_nodeids",
                                                       "target_ids", "target_weights")}
    tracks = any(m.attrs.get("nodes_missing_value_tracks_true") is not None for m in members)
    missing: list = []
    tree_offset = class_offset = 0
    widths = []
    for m in members:
        a = m.attrs
        trees = [int(t) for t in a["nodes_treeids"]] + [int(t) for t in a["class_treeids"]]
        for name in _NODE_LISTS:
            attrs[name].extend(a[name])
        attrs["nodes_treeids"].extend(int(t) + tree_offset for t in a["nodes_treeids"])
        attrs["target_treeids"].extend(int(t) + tree_offset for t in a["class_treeids"])
        attrs["target_nodeids"].extend(a["class_nodeids"])
        attrs["target_ids"].extend(int(c) + class_offset for c in a["class_ids"])
        attrs["target_weights"].extend(a["class_weights"])
        if tracks:
            given = a.get("nodes_missing_value_tracks_true")
            missing.extend(given if given is not None else [0] * len(a["nodes_treeids"]))
        tree_offset += (max(trees) + 1) if trees else 0
        widths.append(_classes(m))
        class_offset += widths[-1]
    if tracks:
        attrs["nodes_missing_value_tracks_true"] = missing
    attrs.update(n_targets=class_offset, aggregate_function="SUM", post_transform="NONE")
    first = members[0]
    scores, split = view.fresh(f"{first.name or 'forests'}_scores"), view.fresh("forest_widths")
    regressor = Node(f"{first.name}/sibling_forests", "TreeEnsembleRegressor", ML, (first.inputs[0],), (scores,),
                     attrs, opset=REGRESSOR_OPSET)
    cut = Node(f"{first.name}/sibling_forests_split", "Split", "", (scores, split),
               tuple(m.outputs[1] for m in members), {"axis": 1}, opset=13)
    return [regressor, cut], {split: np.asarray(widths, np.int64)}


def merge_sibling_forests(view: GraphView) -> Optional[tuple]:
    """The pass's ``run``: (nodes, new constants), or None where no X has two mergeable
    classifiers."""
    groups: dict = {}
    for node in view.nodes:
        if node.domain == ML and node.op_type == "TreeEnsembleClassifier" and _mergeable(view, node):
            groups.setdefault(node.inputs[0], []).append(node)
    groups = {x: members for x, members in groups.items() if len(members) > 1}
    if not groups:
        return None
    placed: dict = {}       # id of a group's first member -> the nodes that replace the group
    dropped: set = set()
    constants: dict = {}
    for members in groups.values():
        nodes, made = _merged(view, members)
        placed[id(members[0])] = nodes
        dropped.update(id(m) for m in members)
        constants.update(made)
    out = []
    for node in view.nodes:     # (at its first member: X is made before it, every reader after it)
        if id(node) in placed:
            out.extend(placed[id(node)])
        elif id(node) not in dropped:
            out.append(node)
    return out, constants


SIBLING_FORESTS = GraphPass("sibling_forests", merge_sibling_forests, roots=((ML, "TreeEnsembleClassifier"),),
                            priority=15, description="TreeEnsembleClassifiers of one X (more than two classes, "
                            "no post transform, labels unread) -> one TreeEnsembleRegressor + Split")
