"""The plugin author's manual: every hook dynashape calls.

A plugin is a module (or object) with functions decorated by :data:`hookimpl`::

    from dynashape import hookimpl, OpLibrary
    lib = OpLibrary()
    ...  # @lib.op / @lib.kernel decorated functions

    @hookimpl
    def dynashape_register_ops():
        return lib.ops

    @hookimpl
    def dynashape_register_kernels():
        return lib.kernels

(``plugin = lib.plugin()`` builds the same object from an :class:`~dynashape.records.OpLibrary`,
with ``dynashape_register_rewrites`` too when the library holds rewrites)
and is made known either through the entry-point group ``dynashape`` in its package
metadata (``[project.entry-points.dynashape] myplugin = "mypkg.plugin"``) or at run time
with :func:`dynashape.register_plugin`. The builtin operators
(:mod:`dynashape.ops_builtin`) are registered through these same hooks.

A plugin with many op families can register them lazily instead: its
``dynashape_register_libraries`` returns one :class:`~dynashape.records.LazyLibrary` per module
(the module's name and the op keys it holds), and each module is imported when a model first
needs one of those ops; the builtin operators do this, so a session imports only the families
its model uses (``dynashape plugins --index MODULE`` prints the index of a plugin's modules).

All hooks are collected from every plugin (none is ``firstresult``); the order in which
plugins are registered never decides anything.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Union

import pluggy

if TYPE_CHECKING:   # (the records import hookimpl: the hooks name their types only)
    from .records import KernelDef, LazyLibrary, OpDef
    from .rewrite import GraphPass, RewriteDef

PROJECT = "dynashape"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

__all__ = ["hookspec", "hookimpl", "PROJECT"]


@hookspec
def dynashape_register_ops() -> Iterable[OpDef]:
    """Return the operator schemas this plugin defines.

    Called once when the registry is built (the first session, or after a plugin was
    registered or unregistered). Each :class:`~dynashape.records.OpDef` is one
    ``(domain, op_type, since_version)``; two plugins defining the same triple is an
    error naming both. A plugin may define ops that only other plugins implement.
    """


@hookspec
def dynashape_register_kernels() -> Iterable[KernelDef]:
    """Return the kernels this plugin provides.

    Called once when the registry is built. For a node, the kernel is chosen among
    those with the node's ``(domain, op_type)``, whose opset range contains the model's
    opset for that domain and whose ``dtypes`` accept the node's input dtype: the
    highest ``priority`` wins, unless its ``accepts(ctx)`` declines the node (then the next
    one by priority is asked). Two kernels of equal priority that overlap in opset range
    and dtypes are an error at build time naming both plugins, so a plugin that wants to
    replace a builtin kernel declares a higher priority. A kernel with ``prepack`` gets its
    constant inputs transformed once per node when a program is compiled
    (:class:`~dynashape.records.KernelDef`).
    """


@hookspec
def dynashape_register_libraries() -> Iterable[LazyLibrary]:
    """Return op libraries to import on first use: one :class:`~dynashape.records.LazyLibrary`
    per module, naming the ``(domain, op_type)`` keys its OpDefs and KernelDefs have.

    Called once when the registry is built; no module is imported then. The first lookup of
    a key (a node's schema or kernel) imports every library that declares it and adds all of
    the library's records, under the same rules as ``dynashape_register_ops`` and
    ``dynashape_register_kernels`` (a clash or a kernel conflict is raised then, naming both
    plugins; a key an eagerly registered record of another plugin has is loaded when the
    registry is built, so those are found at once). A library declaring ``rewrites`` is
    imported whenever the rewrites run. A library whose module fails to import is reported
    (a warning naming it, ``plugin_load_errors()``) and skipped, like a broken entry point.
    """


@hookspec
def dynashape_register_rewrites() -> Iterable[Union[RewriteDef, GraphPass]]:
    """Return the graph rewrites this plugin provides (:mod:`dynashape.rewrite`).

    Called once when the registry is built. A :class:`~dynashape.rewrite.RewriteDef` is a
    pattern of nodes (op types, attribute and constant predicates, conditions on symbolic
    shapes) and a ``build`` function returning the replacement nodes, usually one fused op
    whose OpDef/KernelDef the same plugin registers (in an ONNX domain if the op exists
    there, pinned to the opset that defines it with ``m.make(..., opset=N)``, else in the
    plugin's own domain). Rewrites run at session creation, after constant folding and
    before symbolic inference, highest ``priority`` first, then by name; each one that
    fires is recorded (``session.rewrites``, ``dynashape inspect --rewrites``).

    A rewrite must be exact: it may only fire where the replacement equals the original
    subgraph for every shape the symbols allow, so ``build`` checks dtypes, broadcasting
    and attributes (``m.shape``, ``m.dtype``, ``m.same_dim``) and returns None otherwise.
    Two rewrites with the same name are an error naming both plugins. Sessions created with
    ``optimize=False`` (or ``graph_optimization_level = ORT_DISABLE_ALL``) run none.

    A :class:`~dynashape.rewrite.GraphPass` is a rewrite of the whole graph (``run(view)``
    returns the new node list): for what no local pattern says, such as a layout assigned to
    a region of nodes (the oneDNN plugin's ``channels_last``). It shares the name space and
    the order with the pattern rewrites.
    """
