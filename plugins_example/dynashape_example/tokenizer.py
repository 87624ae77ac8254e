"""com.microsoft ``Tokenizer``: each string of a [C] or [N, C] tensor split into tokens,
[C, D] / [N, C, D] padded with ``pad_value`` (D, the most tokens of any string, is known only
when the node runs).

Three modes, as ONNX Runtime's CPU kernel: character tokenization (``separators`` is
``[""]`` or ``tokenexp`` is ``"."``: every character is a token), separators (each regular
expression of ``separators`` in turn splits every token found so far; the pieces between
matches are the tokens) and a token expression (the matches of ``tokenexp``, searched again
after each match, or one character further after a match shorter than ``mincharnum``).

The patterns are RE2 syntax, run with Python's ``re`` after a translation (``\\z``, ``\\Q..\\E``,
``\\x{..}``, ``(?<name>..)``, POSIX classes ``[[:alpha:]]``; ``$`` is the end of the text as in
RE2; ``\\w \\d \\s \\b`` are spelled out as RE2's ASCII classes, so that ``(?i)`` folds all of
Unicode as RE2 does). onnxruntime's RE2 runs in longest-match mode: at the
leftmost position where a pattern matches, its longest match counts (``a|ab`` matches
``ab``, ``a*?`` is greedy). Python's ``re`` takes the first alternative instead, so a
pattern with an alternation, an optional or counted part or a group has its match extended
to the longest one that ends further on; patterns without (``[a-z]+``, ``\\s``, ``[.]``)
are matched as they are. Not supported (refused with kind InvalidPattern): Unicode classes
(``\\pL``), ``\\C``, flags set in the middle of a pattern, ``(?U)``, a negated Perl class inside
brackets (``[^\\S]``) in a pattern that folds case.

Per-string work is a Python loop over the strings and their regex matches (numpy has no
vectorised regex); the padded output is one scatter.

Source: ONNX Runtime contrib op docs (docs/ContribOperators.md, ``com.microsoft.Tokenizer``)
and its CPU kernel (onnxruntime/contrib_ops/cpu/tokenizer.cc); what the docs leave open was
checked against onnxruntime 1.32: the layout with ``mark`` ([0x02, tokens, 0x03, pads]), a
separator that matches the empty string (the character after it is dropped), an input whose
strings give no token at all ([.., 0]).
"""
from __future__ import annotations

import functools
import re
from typing import NamedTuple, Optional

import numpy as np

from dynashape import ShapeInferenceError
from dynashape.re2 import GLOBAL_FLAGS, translate
from dynashape.records import OpLibrary, fixed_dtype

DOMAIN = "com.microsoft"
lib = OpLibrary()

_STRING = np.dtype(object)
#: the start / end of text markers ``mark`` adds around each string's tokens
START_MARK, END_MARK = "\x02", "\x03"


# RE2 patterns -----------------------------------------------------------------------------

class _Regex(NamedTuple):
    """A compiled pattern and how its leftmost-longest match is found: ``extend`` 0 (Python's
    match is the longest), 1 (try longer ends with ``fullmatch``) or 2 (the pattern looks at
    what follows its end: try them with a lookahead that fixes the end)."""

    rx: re.Pattern
    extend: int


def _compile(pattern: str) -> _Regex:
    """Raises ValueError or re.error for a pattern RE2 or the translation refuses."""
    t = translate(pattern)
    rx = re.compile(t.source, 0 if t.fold else re.ASCII)
    return _Regex(rx, 0 if not t.ambiguous else 2 if t.end_sensitive else 1)


@functools.lru_cache(maxsize=1024)
def _ending(rx: re.Pattern, rest: int) -> re.Pattern:
    """``rx`` followed by exactly ``rest`` characters before the end of the text."""
    source, flags = rx.pattern, ""
    head = GLOBAL_FLAGS.match(source)
    if head:
        flags, source = head.group(), source[head.end():]
    return re.compile(f"{flags}(?:{source})(?=[\\s\\S]{{{rest}}}\\Z)", rx.flags)


def _search(regex: _Regex, text: str, pos: int) -> Optional[tuple]:
    """(start, end) of the leftmost-longest match at or after ``pos`` (RE2's longest-match
    mode), or None. Python's search finds the leftmost start; from there a longer match is
    looked for, the longest first."""
    m = regex.rx.search(text, pos)
    if m is None:
        return None
    start, end = m.span()
    n = len(text)
    if regex.extend == 1:
        for e in range(n, end, -1):
            if regex.rx.fullmatch(text, start, e) is not None:
                return start, e
    elif regex.extend == 2:
        for e in range(n, end, -1):
            if _ending(regex.rx, n - e).match(text, start) is not None:
                return start, e
    return start, end


def _token_matches(regex: _Regex, text: str, mincharnum: int) -> list:
    """tokenexp mode: every match of at least ``mincharnum`` characters; after a shorter one
    the search goes on one character further than where it started."""
    tokens, pos, n = [], 0, len(text)
    while pos <= n:
        found = _search(regex, text, pos)
        if found is None:
            break
        start, end = found
        if end - start >= mincharnum:
            tokens.append(text[start:end])
            pos = end
        else:
            pos = start + 1
    return tokens


def _split(regex: _Regex, text: str, mincharnum: int, tokens: list) -> None:
    """separators mode: the pieces of ``text`` between the matches of one separator (each
    piece of at least ``mincharnum`` characters), appended to ``tokens``. An empty match
    drops the character after it and one at the end ends the text (onnxruntime's kernel)."""
    pos, n = 0, len(text)
    while pos <= n:
        found = _search(regex, text, pos)
        if found is None:
            if n - pos >= mincharnum:
                tokens.append(text[pos:])
            return
        start, end = found
        if start - pos >= mincharnum:
            tokens.append(text[pos:start])
        pos = end if end > start else start + 1


# the op ---------------------------------------------------------------------------------

class _Plan(NamedTuple):
    mode: str               # "chars", "separators" or "tokenexp"
    patterns: tuple         # _Regex per separator, or the one of tokenexp
    mark: bool
    pad: str
    mincharnum: int
    node: str


def _text(s) -> str:
    return s.decode("utf-8") if isinstance(s, bytes) else str(s)


def _plan(ctx) -> _Plan:
    for name in ("mark", "pad_value", "mincharnum"):
        if ctx.attr(name) is None:
            ctx.fail(f"attribute '{name}' is required", kind="MissingAttribute")
    mincharnum = int(ctx.attr("mincharnum"))
    if mincharnum < 1:
        ctx.fail(f"mincharnum is {mincharnum}, expected >= 1", kind="InvalidAttribute")
    separators, tokenexp = ctx.attr("separators"), ctx.attr("tokenexp")
    if separators is not None:        # (separators win when both are given, as onnxruntime)
        patterns = [_text(s) for s in separators]
        if not patterns:
            ctx.fail("separators is empty: give at least one separator, or [\"\"] for characters",
                     kind="InvalidAttribute")
        mode = "chars" if patterns == [""] else "separators"
    elif tokenexp is None:
        ctx.fail("one of the attributes separators and tokenexp is required", kind="MissingAttribute")
    else:
        patterns = [_text(tokenexp)]
        if not patterns[0]:
            ctx.fail("tokenexp is empty", kind="InvalidAttribute")
        mode = "chars" if patterns == ["."] else "tokenexp"
    if mode == "chars" and mincharnum > 1:
        ctx.fail(f"mincharnum {mincharnum} is too big for character tokenization (1 at most)",
                 kind="InvalidAttribute")
    compiled = []
    if mode != "chars":
        for p in patterns:
            try:
                compiled.append(_compile(p))
            except (ValueError, re.error) as exc:
                what = "separator" if mode == "separators" else "tokenexp"
                ctx.fail(f"{what} {p!r} is not a supported RE2 regular expression: {exc}", kind="InvalidPattern")
    return _Plan(mode, tuple(compiled), bool(ctx.attr("mark")), _text(ctx.attr("pad_value")), mincharnum,
                 ctx.node.name)


@lib.op("Tokenizer", since_version=1, domain=DOMAIN, infer_dtype=fixed_dtype(_STRING), data_dependent=True)
def _tokenizer_shape(ctx):
    """Tokenizer: string [C] -> [C, D], [N, C] -> [N, C, D] (D data-dependent: the most
    tokens of any string, + 2 with ``mark``; 0 when no string has a token), padded with
    ``pad_value``.

    Attributes: ``mark``, ``pad_value``, ``mincharnum`` (>= 1; tokens shorter are dropped) are
    required; ``separators`` (RE2 patterns; ``[""]``: characters) or ``tokenexp`` (an RE2
    pattern; ``"."``: characters); separators win when both are given (as onnxruntime).
    With ``mark`` each row is [0x02, tokens.., 0x03, pads..]. An empty input keeps the token
    axis ([N, C, 0]; onnxruntime drops it: docs/CONFORMANCE.md). Raises:
    ShapeInferenceError kinds MissingAttribute, InvalidAttribute, InvalidPattern,
    InvalidDtype, InvalidRank; InvalidUtf8 when run. Source: ONNX Runtime
    docs/ContribOperators.md, com.microsoft.Tokenizer; onnxruntime contrib_ops/cpu/tokenizer.cc.
    """
    dt = ctx.dtype(0)
    if dt is not None and np.dtype(dt).kind not in "OUS":
        ctx.fail(f"X has dtype {np.dtype(dt).name}, expected a string tensor", kind="InvalidDtype")
    shape = ctx.shape(0)
    if len(shape) not in (1, 2):
        ctx.fail(f"X must be [C] or [N, C], got rank {len(shape)}", kind="InvalidRank")
    _plan(ctx)
    return [tuple(shape) + (ctx.new_dim(),)]


def _decode(x: np.ndarray, node: str) -> list:
    items = x.reshape(-1).tolist()
    if x.dtype.kind == "U":
        return items
    try:
        return [_text(s) for s in items]
    except UnicodeDecodeError as exc:
        raise ShapeInferenceError(f"Tokenizer node '{node or '<unnamed>'}': an input string is not valid UTF-8 "
                                  f"({exc})", node=node, op_type="Tokenizer", kind="InvalidUtf8") from None


def _tokens(plan: _Plan, text: str) -> list:
    if plan.mode == "chars":
        return list(text)
    if plan.mode == "tokenexp":
        return _token_matches(plan.patterns[0], text, plan.mincharnum)
    row = [text]
    for regex in plan.patterns:          # each separator splits the tokens the previous ones left
        pieces: list = []
        for piece in row:
            _split(regex, piece, plan.mincharnum, pieces)
        row = pieces
    return row


@lib.kernel("Tokenizer", domain=DOMAIN, prepare=_plan)
def _tokenizer(inputs, outputs, plan: _Plan):
    """The tokens of each string, then one scatter into the padded [.., D] output."""
    x = inputs[0]
    rows = [_tokens(plan, s) for s in _decode(x, plan.node)]
    counts = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    most = int(counts.max()) if counts.size else 0
    width = most + 2 * plan.mark if most else 0
    y = np.full((counts.size, width), plan.pad, dtype=object)
    if width:
        first = 1 if plan.mark else 0
        if plan.mark:
            y[:, 0] = START_MARK
            y[np.arange(counts.size), counts + 1] = END_MARK
        owner = np.repeat(np.arange(counts.size), counts)
        starts = np.cumsum(counts) - counts
        cols = np.arange(owner.size) - np.repeat(starts, counts) + first
        pieces = np.empty(owner.size, dtype=object)
        pieces[:] = [t for r in rows for t in r]
        y[owner, cols] = pieces
    return [y.reshape(x.shape + (width,))]
