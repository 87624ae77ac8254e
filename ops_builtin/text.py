"""String and text operators: StringNormalizer, StringConcat, StringSplit, RegexFullMatch,
TfIdfVectorizer.

String tensors are numpy ``object`` arrays of Python ``str`` (feeds may also arrive as
numpy ``U``/``S`` arrays; ``bytes`` elements are read as UTF-8). Per-string work (case
changes, splitting, regex matching) runs as list comprehensions over the flat array, the
rest (padding, masks, n-gram matching and counting) as whole-array numpy operations.

Source: ONNX operator spec (Operators.md): StringNormalizer-10, StringConcat-20,
StringSplit-20, RegexFullMatch-20, TfIdfVectorizer-9.
"""
from __future__ import annotations

import re

import numpy as np
from dynashape.re2 import compile_re2
from dynashape.records import OpLibrary, fixed_dtype
from dynashape.shapes import broadcast_shapes

lib = OpLibrary()

_STRING = np.dtype(object)


# shared helpers ---------------------------------------------------------------------------

def _is_string(dt) -> bool:
    return dt is not None and np.dtype(dt).kind in "OUS"


def _check_string(ctx, i: int, what: str) -> None:
    dt = ctx.dtype(i)
    if dt is not None and not _is_string(dt):
        ctx.fail(f"{what} has dtype {np.dtype(dt).name}, expected a string tensor", kind="InvalidDtype")


def _text(s) -> str:
    return s.decode("utf-8", errors="replace") if isinstance(s, bytes) else str(s)


def _texts(x: np.ndarray) -> list:
    """The elements of a string tensor as a flat list of ``str``."""
    if x.dtype.kind == "U":
        return x.reshape(-1).tolist()
    return [_text(s) for s in x.reshape(-1).tolist()]


def _as_objects(x: np.ndarray) -> np.ndarray:
    """A string tensor as an object array of ``str`` (the same array when it already is one)."""
    if x.dtype.kind == "U":
        return x.astype(object)
    if x.dtype.kind == "S" or any(isinstance(s, bytes) for s in x.reshape(-1).tolist()):
        out = np.empty(x.shape, dtype=object)
        out.reshape(-1)[:] = _texts(x)
        return out
    return x


def _string_array(items, shape) -> np.ndarray:
    out = np.empty(shape, dtype=object)
    out.reshape(-1)[:] = items
    return out


def _store(outputs, k: int, value: np.ndarray):
    """Copy ``value`` into output ``k``; the fresh array when the output was not planned."""
    if outputs[k] is None or outputs[k].shape != value.shape:
        return value
    outputs[k][...] = value
    return outputs[k]


# StringNormalizer -------------------------------------------------------------------------

_CASE_ACTIONS = ("NONE", "LOWER", "UPPER")


def _normalizer_attrs(ctx):
    action = ctx.attr("case_change_action", "NONE")
    if action not in _CASE_ACTIONS:
        ctx.fail(f"case_change_action is '{action}', expected one of {', '.join(_CASE_ACTIONS)}",
                 kind="InvalidAttribute")
    sensitive = bool(ctx.attr("is_case_sensitive", 0))
    stopwords = [str(w) for w in (ctx.attr("stopwords") or [])]
    return action, sensitive, stopwords


def _normalizer_shape(ctx):
    """StringNormalizer: drop the stop words of a [C] or [1, C] string tensor, then change case.

    Stop words match whole elements (case-insensitively unless ``is_case_sensitive``);
    ``case_change_action`` is NONE, LOWER or UPPER. Without stop words the shape is kept;
    with them the length is data-dependent, and an all-dropped input gives [""] ([1, 1]).
    Raises: ShapeInferenceError kinds InvalidRank, InvalidAttribute, InvalidDtype.
    Source: ONNX operator spec, StringNormalizer-10.
    """
    _check_string(ctx, 0, "X")
    _, _, stopwords = _normalizer_attrs(ctx)
    shape = ctx.shape(0)
    if len(shape) == 2:
        if not ctx.assume(shape[0], "==", 1):
            ctx.fail(f"X must be [C] or [1, C], got [{shape[0]}, {shape[1]}]", kind="InvalidRank")
    elif len(shape) != 1:
        ctx.fail(f"X must be [C] or [1, C], got rank {len(shape)}", kind="InvalidRank")
    if not stopwords:
        return [shape]
    return [(1, ctx.new_dim()) if len(shape) == 2 else (ctx.new_dim(),)]


lib.op("StringNormalizer", since_version=10, infer_dtype=fixed_dtype(_STRING))(_normalizer_shape)


def _normalizer_prepare(ctx):
    action, sensitive, stopwords = _normalizer_attrs(ctx)
    stops = frozenset(stopwords if sensitive else (w.lower() for w in stopwords))
    case = {"LOWER": str.lower, "UPPER": str.upper}.get(action)
    return case, sensitive, stops


@lib.kernel("StringNormalizer", prepare=_normalizer_prepare)
def _string_normalizer(inputs, outputs, prepared):
    case, sensitive, stops = prepared
    x = inputs[0]
    items = _texts(x)
    if stops:
        keys = items if sensitive else [s.lower() for s in items]
        keep = np.fromiter((k not in stops for k in keys), dtype=bool, count=len(keys))
        items = [s for s, k in zip(items, keep.tolist()) if k] or [""]
    if case is not None:
        items = [case(s) for s in items]
    shape = x.shape if not stops else ((1, len(items)) if x.ndim == 2 else (len(items),))
    return [_store(outputs, 0, _string_array(items, shape))]


# StringConcat ---------------------------------------------------------------------------

@lib.op("StringConcat", since_version=20, infer_dtype=fixed_dtype(_STRING))
def _concat_shape(ctx):
    """StringConcat: X + Y elementwise with multidirectional broadcasting (string tensors).

    Raises: ShapeInferenceError kinds BroadcastMismatch, InvalidDtype.
    Source: ONNX operator spec, StringConcat-20.
    """
    _check_string(ctx, 0, "X")
    _check_string(ctx, 1, "Y")
    return [broadcast_shapes(ctx, ctx.shape(0), ctx.shape(1))]


@lib.kernel("StringConcat")
def _string_concat(inputs, outputs, ctx):
    """numpy's object ``add`` (Python string concatenation) with broadcasting."""
    x, y = _as_objects(inputs[0]), _as_objects(inputs[1])
    if outputs[0] is None:
        return [np.add(x, y, dtype=object)]
    np.add(x, y, out=outputs[0], dtype=object)
    return None


# StringSplit ----------------------------------------------------------------------------

def _split_attrs(ctx):
    delimiter = ctx.attr("delimiter", "") or None
    maxsplit = ctx.attr("maxsplit")
    if maxsplit is not None and int(maxsplit) < 0:
        ctx.fail(f"maxsplit is {maxsplit}, expected >= 0", kind="InvalidAttribute")
    return delimiter, -1 if maxsplit is None else int(maxsplit)


@lib.op("StringSplit", since_version=20, infer_dtype=lambda ctx: [_STRING, np.dtype(np.int64)])
def _split_shape(ctx):
    """StringSplit: the substrings of each element ([*X.shape, max count], padded with "")
    and their count per element (int64, X's shape).

    An empty or absent ``delimiter`` splits on runs of whitespace and drops leading and
    trailing whitespace; otherwise consecutive delimiters delimit empty strings (an empty
    element has no substrings, as onnxruntime). At most ``maxsplit`` splits (the rest stays
    in the last substring). The last output dim is
    data-dependent. Raises: ShapeInferenceError kinds InvalidAttribute, InvalidDtype.
    Source: ONNX operator spec, StringSplit-20.
    """
    _check_string(ctx, 0, "X")
    _split_attrs(ctx)
    shape = ctx.shape(0)
    return [tuple(shape) + (ctx.new_dim(),), tuple(shape)]


@lib.kernel("StringSplit", prepare=_split_attrs)
def _string_split(inputs, outputs, prepared):
    """str.split on each element, then one scatter of all pieces into the padded output."""
    delimiter, maxsplit = prepared
    x = inputs[0]
    if delimiter is None:   # whitespace runs; the unsplit rest loses its trailing whitespace too
        parts = [s.strip().split(None, maxsplit) for s in _texts(x)]
    else:                   # an empty string has no substrings (as onnxruntime)
        parts = [s.split(delimiter, maxsplit) if s else [] for s in _texts(x)]
    counts = np.fromiter((len(p) for p in parts), dtype=np.int64, count=len(parts))
    width = int(counts.max()) if counts.size else 0
    y = np.full((counts.size, width), "", dtype=object)
    if counts.size and width:
        rows = np.repeat(np.arange(counts.size), counts)
        starts = np.cumsum(counts) - counts
        cols = np.arange(rows.size) - np.repeat(starts, counts)
        pieces = np.empty(rows.size, dtype=object)
        pieces[:] = [s for p in parts for s in p]
        y[rows, cols] = pieces
    y = y.reshape(x.shape + (width,))
    z = counts.reshape(x.shape)
    return [_store(outputs, 0, y), _store(outputs, 1, z)]


# RegexFullMatch -------------------------------------------------------------------------

def _regex(ctx):
    pattern = ctx.attr("pattern")
    if pattern is None:
        ctx.fail("attribute 'pattern' is required", kind="MissingAttribute")
    try:
        return compile_re2(pattern)
    except (ValueError, re.error) as exc:
        ctx.fail(f"pattern {pattern!r} is not a valid RE2 regular expression: {exc}", kind="InvalidPattern")


@lib.op("RegexFullMatch", since_version=20, infer_dtype=fixed_dtype(np.bool_))
def _regex_shape(ctx):
    """RegexFullMatch: True where an element matches the RE2 ``pattern`` in full.

    Python's ``re`` runs the pattern after an RE2-to-Python translation
    (:mod:`dynashape.re2`: character classes \\d \\w \\s \\b are ASCII as in RE2, ``(?i)``
    folds all of Unicode as RE2 does, ``$`` is the end of the text). Raises:
    ShapeInferenceError kinds MissingAttribute, InvalidPattern, InvalidDtype. Source: ONNX
    operator spec, RegexFullMatch-20.
    """
    _check_string(ctx, 0, "X")
    _regex(ctx)
    return [ctx.shape(0)]


@lib.kernel("RegexFullMatch", prepare=_regex)
def _regex_full_match(inputs, outputs, regex):
    x = inputs[0]
    items = _texts(x)
    hits = np.fromiter((regex.fullmatch(s) is not None for s in items), dtype=bool, count=len(items))
    if outputs[0] is None:
        return [hits.reshape(x.shape)]
    np.copyto(outputs[0], hits.reshape(x.shape))
    return None


# TfIdfVectorizer ------------------------------------------------------------------------

_TFIDF_MODES = ("TF", "IDF", "TFIDF")


class _NgramPool:
    """The pool's n-grams, per length: token-id rows and their output columns.

    ``vocab`` holds the pool's distinct tokens (sorted); ``grams[n]`` is ``(ids, columns)``
    with ``ids`` the sorted distinct (count, n) rows of vocab positions and ``columns`` their
    output columns; ``weights`` is per output column (None: all ones). Made once.
    """

    def __init__(self, vocab, grams, size, mode, weights, min_len, max_len, max_skip, strings):
        self.vocab, self.grams, self.size, self.mode = vocab, grams, size, mode
        self.weights, self.min_len, self.max_len, self.max_skip = weights, min_len, max_len, max_skip
        self.strings = strings


def _tfidf_pool(ctx) -> _NgramPool:
    mode = ctx.attr("mode")
    if mode not in _TFIDF_MODES:
        ctx.fail(f"mode is {mode!r}, expected one of {', '.join(_TFIDF_MODES)}", kind="InvalidAttribute")
    for name in ("min_gram_length", "max_gram_length", "max_skip_count", "ngram_counts", "ngram_indexes"):
        if ctx.attr(name) is None:
            ctx.fail(f"attribute '{name}' is required", kind="MissingAttribute")
    min_len, max_len = int(ctx.attr("min_gram_length")), int(ctx.attr("max_gram_length"))
    max_skip = int(ctx.attr("max_skip_count"))
    if not 1 <= min_len <= max_len:
        ctx.fail(f"min_gram_length {min_len} and max_gram_length {max_len} must satisfy "
                 "1 <= min_gram_length <= max_gram_length", kind="InvalidAttribute")
    if max_skip < 0:
        ctx.fail(f"max_skip_count is {max_skip}, expected >= 0", kind="InvalidAttribute")
    ints, strings = ctx.attr("pool_int64s"), ctx.attr("pool_strings")
    if (ints is None) == (strings is None):
        ctx.fail("exactly one of pool_int64s and pool_strings must be given", kind="InvalidAttribute")
    pool = list(strings if strings is not None else ints)
    counts = [int(c) for c in ctx.attr("ngram_counts")]
    indexes = np.asarray(ctx.attr("ngram_indexes"), dtype=np.int64)
    if counts and (counts[0] != 0 or any(b < a for a, b in zip(counts, counts[1:])) or counts[-1] > len(pool)):
        ctx.fail(f"ngram_counts {counts} must start at 0 and be non-decreasing offsets into the pool of "
                 f"{len(pool)} items", kind="InvalidAttribute")
    bounds = counts + [len(pool)]
    sizes = [(bounds[k + 1] - bounds[k], k + 1) for k in range(len(counts))]
    if any(items % n for items, n in sizes):
        ctx.fail(f"ngram_counts {counts}: the pool section of each n-gram length must hold whole n-grams",
                 kind="InvalidAttribute")
    total = sum(items // n for items, n in sizes)
    if indexes.size != total:
        ctx.fail(f"ngram_indexes has {indexes.size} entries, the pool holds {total} n-grams",
                 kind="InvalidAttribute")
    if indexes.size and indexes.min() < 0:
        ctx.fail("ngram_indexes must be >= 0", kind="InvalidAttribute")
    size = int(indexes.max()) + 1 if indexes.size else 0
    weights = ctx.attr("weights")
    if weights is not None:
        weights = np.asarray(weights, dtype=np.float32).reshape(-1)
        if weights.size != indexes.size:
            ctx.fail(f"weights has {weights.size} entries, expected {indexes.size} (one per n-gram of the pool)",
                     kind="InvalidAttribute")
        column_weights = np.ones(size, dtype=np.float32)
        column_weights[indexes] = weights
        weights = column_weights
    vocab = np.unique(np.asarray(pool, dtype=str if strings is not None else np.int64))
    grams, first = {}, 0
    for k, (items, n) in enumerate(sizes):
        m = items // n
        if min_len <= n <= max_len and m:
            section = np.asarray(pool[bounds[k]:bounds[k + 1]], dtype=vocab.dtype).reshape(m, n)
            ids = np.searchsorted(vocab, section).astype(np.int64)
            uniq, inverse = np.unique(ids, axis=0, return_inverse=True)
            columns = np.empty(uniq.shape[0], dtype=np.int64)
            columns[inverse.reshape(-1)] = indexes[first:first + m]     # a repeated n-gram: the last one wins
            grams[n] = (uniq, columns)
        first += m
    return _NgramPool(vocab, grams, size, mode, weights, min_len, max_len, max_skip, strings is not None)


def _tfidf_shape(ctx):
    """TfIdfVectorizer: n-gram counts of a [C] or [N, C] input into [O] or [N, O] float32,
    ``O = max(ngram_indexes) + 1``.

    n-grams of lengths ``min_gram_length..max_gram_length`` are taken with every skip
    ``0..max_skip_count`` between items (unigrams once); those in the pool (``pool_int64s``
    for int32/int64 input or ``pool_strings`` for strings; ``ngram_counts`` are the offsets
    of each length) count at column ``ngram_indexes[i]``. TF: counts; IDF: ``weights`` (or
    1) where the count is > 0; TFIDF: counts times ``weights`` (``weights[i]`` belongs to
    the pool's i-th n-gram, as the spec and onnxruntime; onnx's reference reads it per
    output column instead). Raises: ShapeInferenceError kinds
    InvalidRank, InvalidAttribute, MissingAttribute, InvalidDtype.
    Source: ONNX operator spec, TfIdfVectorizer-9.
    """
    pool = _tfidf_pool(ctx)
    dt = ctx.dtype(0)
    if pool.strings and not _is_string(dt):
        ctx.fail(f"pool_strings needs a string input, got {np.dtype(dt).name}", kind="InvalidDtype")
    if not pool.strings and np.dtype(dt).name not in ("int32", "int64"):
        ctx.fail(f"pool_int64s needs an int32 or int64 input, got {np.dtype(dt).name}", kind="InvalidDtype")
    shape = ctx.shape(0)
    if len(shape) not in (1, 2):
        ctx.fail(f"X must be [C] or [N, C], got rank {len(shape)}", kind="InvalidRank")
    return [(pool.size,) if len(shape) == 1 else (shape[0], pool.size)]


lib.op("TfIdfVectorizer", since_version=9, infer_dtype=fixed_dtype(np.float32))(_tfidf_shape)


def _token_ids(pool: _NgramPool, x: np.ndarray) -> np.ndarray:
    """Each item's position in the pool's vocabulary, -1 when it is not in the pool."""
    vals = np.asarray(_texts(x), dtype=str).reshape(x.shape) if pool.strings else x.astype(np.int64)
    if pool.vocab.size == 0:
        return np.full(x.shape, -1, dtype=np.int64)
    pos = np.minimum(np.searchsorted(pool.vocab, vals), pool.vocab.size - 1)
    return np.where(pool.vocab[pos] == vals, pos, -1).astype(np.int64)


def _tfidf_counts(pool: _NgramPool, ids: np.ndarray) -> np.ndarray:
    """[rows, O] int64 counts of the pool's n-grams in each row of token ids."""
    rows, length = ids.shape
    counts = np.zeros(rows * pool.size, dtype=np.int64)
    for n, (uniq, column_of) in pool.grams.items():
        for skip in range(pool.max_skip + 1 if n > 1 else 1):
            span = (n - 1) * (skip + 1)
            starts = length - span
            if starts <= 0:
                break
            grams = np.stack([ids[:, k * (skip + 1):k * (skip + 1) + starts] for k in range(n)], axis=-1)
            grams = grams.reshape(-1, n)
            valid = (grams >= 0).all(axis=1)
            pos = _row_positions(uniq, grams)
            hit = valid & (pos >= 0)
            row = np.repeat(np.arange(rows, dtype=np.int64), starts)
            np.add.at(counts, row[hit] * pool.size + column_of[pos[hit]], 1)
    return counts.reshape(rows, pool.size)


def _row_positions(table: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """For each row of ``rows`` its index in the (sorted, unique) rows of ``table``, or -1."""
    both = np.concatenate([table, rows])
    _, first, inverse = np.unique(both, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    owner = np.where(first < table.shape[0], first, -1)
    return owner[inverse[table.shape[0]:]]


@lib.kernel("TfIdfVectorizer", prepare=_tfidf_pool)
def _tfidf(inputs, outputs, pool):
    x = inputs[0]
    rows = x.reshape(1, -1) if x.ndim == 1 else x
    if rows.size == 0 or not pool.grams:
        counts = np.zeros((rows.shape[0], pool.size), dtype=np.int64)
    else:
        counts = _tfidf_counts(pool, _token_ids(pool, rows))
    w = pool.weights
    if pool.mode == "TF":
        y = counts
    elif pool.mode == "IDF":
        y = (counts > 0) * (w if w is not None else np.float32(1))
    else:
        y = counts * w if w is not None else counts
    y = y.reshape(pool.size) if x.ndim == 1 else y
    if outputs[0] is None:
        return [y.astype(np.float32)]
    np.copyto(outputs[0], y, casting="unsafe")
    return None

