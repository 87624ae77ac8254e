"""Symbolic dimensions: integer polynomials over named symbols, plus floor division,
modulo, max, min and ONNX broadcasting.

A dimension is either a plain ``int`` or an :class:`Expr`; an ``Expr`` whose value is
a known constant is always returned as an ``int``, so ``isinstance(d, int)`` tells
"known". Expressions are kept in a canonical form (a sum of monomials with integer
coefficients), so equal expressions compare and hash equal: ``batch*6 // 6 == batch``.

This goes beyond the ONNX symbolic shape inference proposal (onnx/docs/proposals/
SymbolicShapeInfProposal.md), which gives up with a fresh symbol on any arithmetic.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator, Mapping, Union

__all__ = ["Expr", "Dim", "sym", "is_known", "is_nonneg", "is_nonneg_polynomial", "evaluate", "dim_max", "dim_min",
           "dim_broadcast", "BroadcastError", "dim_str", "free_symbols", "to_code", "CODE_NAMESPACE",
           "provably_unequal", "strict_comparisons", "UndecidedComparison", "as_atom"]

Dim = Union[int, "Expr"]

# An atom is ("s", name) for a symbol or (op, args) for an opaque function of expressions.
# A monomial is a sorted tuple of (atom, power); the constant monomial is ().


def _atom_key(atom):
    return (0, atom[1]) if atom[0] == "s" else (1, atom[0], tuple(map(_sort_key, atom[1])))


def _sort_key(x):
    return (0, x, ()) if isinstance(x, int) else (1, 0, x.key)


class Expr:
    """An integer-valued symbolic expression in canonical polynomial form."""

    __slots__ = ("_terms", "_key", "_hash")

    def __init__(self, terms: Mapping[tuple, int]):
        self._terms = {m: c for m, c in terms.items() if c != 0}
        self._key = None      # (made when first compared or hashed: most intermediate dims never are)
        self._hash = None

    @property
    def key(self) -> tuple:
        """The canonical sort key: equal expressions have equal keys."""
        k = self._key
        if k is None:
            k = self._key = tuple(sorted(((tuple(_atom_key(a) + (p,) for a, p in m), c)
                                          for m, c in self._terms.items())))
        return k

    # construction ------------------------------------------------------
    @staticmethod
    def _wrap(terms: Mapping[tuple, int]) -> Dim:
        terms = {m: c for m, c in terms.items() if c != 0}
        if not terms:
            return 0
        if len(terms) == 1 and () in terms:
            return terms[()]
        return Expr(terms)

    @staticmethod
    def _terms_of(x: Dim) -> dict:
        if isinstance(x, Expr):
            return x._terms
        return {(): int(x)} if x else {}

    @staticmethod
    def atom(atom) -> "Expr":
        return Expr({((atom, 1),): 1})

    # arithmetic ---------------------------------------------------------
    def __add__(self, other):
        if type(other) is int and other == 0:
            return self
        if not isinstance(other, (int, Expr)):
            return NotImplemented
        out = dict(self._terms)
        for m, c in Expr._terms_of(other).items():
            out[m] = out.get(m, 0) + c
        return Expr._wrap(out)

    __radd__ = __add__

    def __neg__(self):
        return Expr._wrap({m: -c for m, c in self._terms.items()})

    def __sub__(self, other):
        if not isinstance(other, (int, Expr)):
            return NotImplemented
        return self + (-other)

    def __rsub__(self, other):
        return (-self) + other

    def __mul__(self, other):
        if type(other) is int:       # (the common case: a dim times a known dim)
            if other == 1:
                return self
            return Expr._wrap({m: c * other for m, c in self._terms.items()}) if other else 0
        if not isinstance(other, (int, Expr)):
            return NotImplemented
        out: dict = {}
        for m1, c1 in self._terms.items():
            for m2, c2 in Expr._terms_of(other).items():
                m = _mono_mul(m1, m2)
                out[m] = out.get(m, 0) + c1 * c2
        return Expr._wrap(out)

    __rmul__ = __mul__

    def __floordiv__(self, other):
        return floordiv(self, other)

    def __rfloordiv__(self, other):
        return floordiv(other, self)

    def __mod__(self, other):
        return mod(self, other)

    def __rmod__(self, other):
        return mod(other, self)

    # comparison: structural (provable) equality only ---------------------
    def __eq__(self, other):
        if isinstance(other, Expr):
            if other is self or self._terms == other._terms:
                return True
        elif not isinstance(other, int):
            return False
        if _strict.on:
            raise UndecidedComparison(f"comparing symbolic dim {self} with {other} needs their values")
        return False

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        h = self._hash
        if h is None:
            h = self._hash = hash(self.key)
        return h

    def __bool__(self):
        raise TypeError(f"the truth value of symbolic dim {self} is unknown")

    def __int__(self):
        raise TypeError(f"symbolic dim {self} has no integer value until its symbols are bound")

    __index__ = __int__

    def __repr__(self):
        return f"Expr({self})"

    def __str__(self):
        return _format(self)

    # evaluation -----------------------------------------------------------
    def evaluate(self, env: Mapping[str, int]) -> int:
        """The value for the given symbol bindings. Raises KeyError for an unbound symbol."""
        total = 0
        for m, c in self._terms.items():
            v = c
            for a, p in m:
                v *= _eval_atom(a, env) ** p
            total += v
        return total

    def symbols(self) -> set[str]:
        out: set[str] = set()
        for m in self._terms:
            for a, _ in m:
                if a[0] == "s":
                    out.add(a[1])
                else:
                    for arg in a[1]:
                        out |= free_symbols(arg)
        return out

    def const_term(self) -> int:
        return self._terms.get((), 0)

    def as_monomial(self):
        """(coefficient, monomial) if the expression is a single term, else None."""
        if len(self._terms) == 1:
            (m, c), = self._terms.items()
            return c, m
        return None


def _member(x: "Expr", items) -> bool:
    """``x in items`` by structure (never the value comparison of strict mode)."""
    return any(isinstance(y, Expr) and y._terms == x._terms for y in items)


def _mono_mul(m1: tuple, m2: tuple) -> tuple:
    if not m1:
        return m2
    if not m2:
        return m1
    powers: dict = {}
    for a, p in m1 + m2:
        powers[a] = powers.get(a, 0) + p
    return tuple(sorted(powers.items(), key=lambda ap: _atom_key(ap[0])))


def _mono_div(m: tuple, d: tuple):
    """m / d if d divides m (as monomials), else None."""
    powers = dict(m)
    for a, p in d:
        if powers.get(a, 0) < p:
            return None
        powers[a] -= p
    return tuple(sorted(((a, p) for a, p in powers.items() if p), key=lambda ap: _atom_key(ap[0])))


def _eval_atom(atom, env) -> int:
    if atom[0] == "s":
        return env[atom[1]]
    args = [evaluate(x, env) for x in atom[1]]
    if atom[0] == "floordiv":
        return args[0] // args[1]
    if atom[0] == "mod":
        return args[0] % args[1]
    if atom[0] == "max":
        return max(args)
    if atom[0] == "min":
        return min(args)
    if atom[0] == "broadcast":
        return _broadcast(*args)
    raise ValueError(f"unknown symbolic function {atom[0]}")


def sym(name: str) -> Expr:
    """The symbol ``name`` as an expression."""
    return Expr.atom(("s", name))


def is_known(d) -> bool:
    """True when ``d`` is a concrete int (not symbolic, not None)."""
    return isinstance(d, int)


def evaluate(d: Dim, env: Mapping[str, int]) -> int:
    """The integer value of a dim under symbol bindings ``env``."""
    return d.evaluate(env) if isinstance(d, Expr) else int(d)


def free_symbols(d) -> set[str]:
    return d.symbols() if isinstance(d, Expr) else set()


def floordiv(a: Dim, b: Dim) -> Dim:
    """``a // b`` (floor division), simplified when b divides every term of a exactly."""
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    if isinstance(b, int):
        if b == 1:
            return a
        mono = a.as_monomial()
        if b > 0 and mono and mono[0] == 1 and len(mono[1]) == 1 and mono[1][0][1] == 1 \
                and mono[1][0][0][0] == "floordiv" and isinstance(mono[1][0][0][1][1], int) \
                and mono[1][0][0][1][1] > 0:
            inner, d = mono[1][0][0][1]
            return floordiv(inner, d * b)  # (x // d) // b == x // (d*b) for positive d, b
        if all(c % b == 0 for c in a._terms.values()):
            return Expr._wrap({m: c // b for m, c in a._terms.items()})
    else:
        mono = b.as_monomial()
        if mono is not None and not (isinstance(a, int) and a == 0):
            coef, dm = mono
            out = {}
            for m, c in Expr._terms_of(a).items():
                q = _mono_div(m, dm)
                if q is None or c % coef:
                    break
                out[q] = c // coef
            else:
                return Expr._wrap(out)
    return Expr.atom(("floordiv", (a, b)))


def mod(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a % b
    if isinstance(floordiv(a, b), int) or (isinstance(b, int) and isinstance(a, Expr)
                                           and all(c % b == 0 for c in a._terms.values())):
        return 0
    return Expr.atom(("mod", (a, b)))


def as_atom(x):
    """The atom when ``x`` is exactly one opaque atom or symbol (coefficient 1, power 1)."""
    mono = x.as_monomial() if isinstance(x, Expr) else None
    if mono is None or mono[0] != 1 or len(mono[1]) != 1 or mono[1][0][1] != 1:
        return None
    return mono[1][0][0]


def _flatten(op: str, args: Iterable[Dim]) -> list:
    """The arguments with nested ``op`` atoms spliced in (``op`` is associative)."""
    flat: list = []
    for x in args:
        atom = as_atom(x)
        if atom is not None and atom[0] == op:
            flat.extend(atom[1])
        else:
            flat.append(x)
    return flat


def _minmax(op: str, args: Iterable[Dim]) -> Dim:
    flat = _flatten(op, args)
    pick = max if op == "max" else min
    consts = [x for x in flat if isinstance(x, int)]
    exprs: list = []
    for x in flat:
        if isinstance(x, Expr) and not _member(x, exprs):
            exprs.append(x)
    # max(x, min(x, ...)) == x and min(x, max(x, ...)) == x: the inner one never wins
    other = "min" if op == "max" else "max"
    exprs = [e for e in exprs if not _absorbed(e, other, exprs)]
    if op == "max" and consts and all(is_nonneg(e) for e in exprs) and max(consts) <= 0 and exprs:
        consts = []
    # drop an expression that differs from another only by a constant
    kept: list = []
    for x in exprs:
        for i, y in enumerate(kept):
            diff = x - y
            if isinstance(diff, int):
                kept[i] = pick(x, y, key=lambda e, y=y, d=diff: 0 if e is y else d)
                break
        else:
            kept.append(x)
    if not kept:
        return pick(consts)
    items = sorted(kept, key=_sort_key) + ([pick(consts)] if consts else [])
    if len(items) == 1:
        return items[0]
    return Expr.atom((op, tuple(items)))


def _absorbed(e, other: str, exprs: list) -> bool:
    mono = e.as_monomial()
    if not mono or mono[0] != 1 or len(mono[1]) != 1 or mono[1][0][1] != 1:
        return False
    atom = mono[1][0][0]
    return atom[0] == other and any(x is not e and _member(x, atom[1]) for x in exprs)


def dim_max(*args: Dim) -> Dim:
    """max of dims; ints fold, provably ordered expressions collapse."""
    return _minmax("max", args)


def dim_min(*args: Dim) -> Dim:
    """min of dims; ints fold, provably ordered expressions collapse."""
    return _minmax("min", args)


# ONNX multidirectional broadcasting --------------------------------------------------

class BroadcastError(ValueError):
    """Two dims that ONNX broadcasting cannot combine (neither is 1 and they differ)."""

    def __init__(self, a: int, b: int):
        super().__init__(f"dims {a} and {b} cannot be broadcast (they must be equal or one of them 1)")
        self.a, self.b = a, b


def broadcast_ints(a: int, b: int) -> int:
    """ONNX's multidirectional broadcast of two concrete dims (onnx/docs/Broadcasting.md):
    1 vs n is n, n vs 1 is n, equal dims are kept (so 0 vs 1 is 0, never max = 1);
    anything else raises :class:`BroadcastError`."""
    if a == b or b == 1:
        return a
    if a == 1:
        return b
    raise BroadcastError(a, b)


def _broadcast(*dims: int) -> int:
    """The ``broadcast`` atom evaluated: the rule of :func:`broadcast_ints` over all dims
    (associative and commutative, also in where it fails)."""
    out = 1
    for d in dims:
        out = broadcast_ints(out, d)
    return out


def dim_broadcast(*dims: Dim) -> Dim:
    """The broadcast of dims under ONNX's multidirectional rule (onnx/docs/Broadcasting.md):
    1 vs n is n, n vs 1 is n, equal dims are kept, 0 vs 1 is 0; anything else is a mismatch.

    Simplified where provable: structurally equal dims merge, the int 1 drops out, ints
    fold (two that cannot broadcast raise :class:`BroadcastError`), nested broadcasts
    flatten. Whatever is left stays one opaque atom, ``broadcast(a, b)`` with its
    arguments sorted (so ``dim_broadcast(a, b) == dim_broadcast(b, a)``), which
    :func:`evaluate` and :func:`to_code` compute with the same rule. A symbol against a
    constant is kept too: ``broadcast(s, 5)`` is 5 only when s is 1 or 5.
    """
    const = 1
    exprs: list = []
    for x in _flatten("broadcast", dims):
        if isinstance(x, Expr):
            if not _member(x, exprs):
                exprs.append(x)
        else:
            const = broadcast_ints(const, int(x))
    if not exprs:
        return const
    items = sorted(exprs, key=_sort_key) + ([const] if const != 1 else [])
    if len(items) == 1:
        return items[0]
    return Expr.atom(("broadcast", tuple(items)))


def _format_atom(atom) -> str:
    if atom[0] == "s":
        return atom[1]
    a = [_format_arg(x) for x in atom[1]]
    if atom[0] == "floordiv":
        return f"{a[0]}//{a[1]}"
    if atom[0] == "mod":
        return f"{a[0]}%{a[1]}"
    return f"{atom[0]}({', '.join(dim_str(x) for x in atom[1])})"


def _format_arg(x) -> str:
    s = dim_str(x)
    return s if isinstance(x, int) or (isinstance(x, Expr) and x.as_monomial() and x.as_monomial()[0] == 1
                                       and len(x.as_monomial()[1]) == 1) else f"({s})"


def _format_mono(m: tuple) -> str:
    parts = []
    for a, p in m:
        s = _format_atom(a)
        if a[0] in ("floordiv", "mod") and (len(m) > 1 or p > 1):
            s = f"({s})"
        parts.append(s if p == 1 else f"{s}^{p}")
    return "*".join(parts)


def _format(e: Expr) -> str:
    items = sorted(e._terms.items(), key=lambda mc: (len(mc[0]) == 0, -len(mc[0])))
    out = ""
    for m, c in items:
        if not m:
            body, mag = str(abs(c)), None
        else:
            body = _format_mono(m)
            mag = abs(c)
        term = body if mag in (None, 1) else f"{body}*{mag}"
        if not out:
            out = term if c > 0 else f"-{term}"
        else:
            out += f" + {term}" if c > 0 else f" - {term}"
    return out


def dim_str(d) -> str:
    """Readable text of a dim: ``"6"``, ``"batch"``, ``"sequence*2"``, ``"(h - 1)//2 + 1"``."""
    if d is None:
        return "?"
    return str(d)


def is_nonneg(d) -> bool:
    """True when ``d`` is provably >= 0: a non-negative int, or an expression whose
    terms all have non-negative coefficients and non-negative factors (every symbol is a
    dim, hence >= 0; ``max`` is when one argument is, the other functions when all are)."""
    if isinstance(d, int):
        return d >= 0
    if not isinstance(d, Expr):
        return False
    for m, c in d._terms.items():
        if c < 0:
            return False
        for a, _ in m:
            if a[0] == "s":
                continue
            if not (any if a[0] == "max" else all)(is_nonneg(x) for x in a[1]):
                return False
    return True


def is_nonneg_polynomial(d) -> bool:
    """True when ``d`` is a non-negative int or a sum of products of symbols with non-negative
    coefficients: >= 0 for every binding, and evaluated without a check of its own (unlike an
    atom such as a broadcast, whose evaluation refuses dims that do not broadcast)."""
    if isinstance(d, int):
        return d >= 0
    return isinstance(d, Expr) and all(c >= 0 and all(a[0] == "s" for a, _ in m) for m, c in d._terms.items())


def provably_unequal(a, b) -> bool:
    """True when two dims can never be equal: their difference is a non-zero constant, or
    one is provably >= 0 and the other a negative int (every symbol is a dim, >= 0)."""
    diff = a - b
    if isinstance(diff, int):
        return diff != 0
    return (isinstance(b, int) and b < 0 and is_nonneg(a)) or (isinstance(a, int) and a < 0 and is_nonneg(b))


#: The names ``to_code`` output may call, for the namespace the generated code runs in.
CODE_NAMESPACE = {"max": max, "min": min, "_broadcast": _broadcast}
_CODE_FUNCTIONS = {"max": "max", "min": "min", "broadcast": "_broadcast"}


def to_code(d, var: Callable[[str], str]) -> str:
    """Python source computing ``d``; ``var(name)`` gives the variable holding a symbol.
    The code calls only the functions in :data:`CODE_NAMESPACE`."""
    if isinstance(d, int):
        return repr(d)
    parts = []
    for m, c in d._terms.items():
        factors = [repr(c)] if c != 1 or not m else []
        for a, p in m:
            code = _atom_code(a, var)
            factors.extend([code] * p)
        parts.append("*".join(factors))
    return "(" + " + ".join(parts) + ")"


def _atom_code(atom, var) -> str:
    if atom[0] == "s":
        return var(atom[1])
    args = [to_code(x, var) for x in atom[1]]
    if atom[0] == "floordiv":
        return f"({args[0]} // {args[1]})"
    if atom[0] == "mod":
        return f"({args[0]} % {args[1]})"
    return f"{_CODE_FUNCTIONS[atom[0]]}({', '.join(args)})"


# strict comparisons ----------------------------------------------------------------------

class UndecidedComparison(TypeError):
    """A comparison of a symbolic dim whose answer depends on the symbols' values."""


class _Strict(threading.local):
    on = False


_strict = _Strict()


@contextmanager
def strict_comparisons() -> Iterator[None]:
    """Within the block, ``==``/``!=`` between an Expr and anything it is not structurally
    equal to raises :class:`UndecidedComparison` instead of answering False (thread-local).

    Used when kernel preparation is traced with symbolic shapes: code that decides
    something from a dim's value must run again with concrete shapes.
    """
    previous = _strict.on
    _strict.on = True
    try:
        yield
    finally:
        _strict.on = previous
