"""RE2 regular expressions (the syntax ONNX's string ops and onnxruntime's contrib ops use)
run with Python's ``re``: a translation of the pattern, for ops and plugins.

Translated: ``\\z``, ``\\Q...\\E``, ``\\x{hex}``, ``(?<name>...)``, POSIX classes
``[[:alpha:]]``; ``$`` is the end of the text (``\\Z``) unless ``(?m)``; the Perl classes
``\\d \\w \\s \\b`` are spelled out as RE2's ASCII ones, so that a pattern that folds case
(``(?i)``) can run in Unicode mode, as RE2 folds all of Unicode, and the others in ASCII mode
(:func:`compile_re2` chooses). Refused (``ValueError``): what RE2 rejects and Python would
accept (lookaround, backreferences, atomic groups, possessive quantifiers) and what this
translation lacks (Unicode classes ``\\pL``, ``\\C``, flags set in the middle of a pattern,
``(?U)``, a negated Perl class inside brackets in a pattern that folds case).

Source: RE2's syntax reference (github.com/google/re2/wiki/Syntax).
"""
from __future__ import annotations

import re
from typing import NamedTuple

__all__ = ["Translation", "translate", "compile_re2", "GLOBAL_FLAGS"]

_POSIX_CLASSES = {
    "alnum": "0-9A-Za-z", "alpha": "A-Za-z", "ascii": "\\x00-\\x7f", "blank": "\\t ",
    "cntrl": "\\x00-\\x1f\\x7f", "digit": "0-9", "graph": "!-~", "lower": "a-z", "print": " -~",
    "punct": "!-/:-@\\[-`{-~", "space": "\\t\\n\\v\\f\\r ", "upper": "A-Z", "word": "0-9A-Za-z_",
    "xdigit": "0-9A-Fa-f",
}
_NOT_RE2 = {"(?=": "lookahead", "(?!": "negative lookahead", "(?<=": "lookbehind", "(?<!": "negative lookbehind",
            "(?P=": "a named backreference", "(?>": "an atomic group", "(?(": "a conditional group",
            "(?#": "a comment group"}
GLOBAL_FLAGS = re.compile(r"\(\?[imsU]+\)")
#: a flag group that turns case folding on, global or scoped: ``(?i)``, ``(?si:``
_FOLDS = re.compile(r"\(\?[imsU]*i[imsU]*(?:-[imsU]*)?[:)]")
_WORD = "0-9A-Za-z_"
_SPACE = "\\t\\n\\f\\r "
#: RE2's Perl classes and word boundaries (ASCII) outside a character class; inside one the
#: positive classes become their ranges
_PERL = {"d": "[0-9]", "D": "[^0-9]", "w": f"[{_WORD}]", "W": f"[^{_WORD}]", "s": f"[{_SPACE}]", "S": f"[^{_SPACE}]",
         "b": f"(?:(?<=[{_WORD}])(?![{_WORD}])|(?<![{_WORD}])(?=[{_WORD}]))",
         "B": f"(?:(?<=[{_WORD}])(?=[{_WORD}])|(?<![{_WORD}])(?![{_WORD}]))"}
_PERL_IN_CLASS = {"d": "0-9", "w": _WORD, "s": _SPACE}



class Translation(NamedTuple):
    """A translated pattern: ``source`` in Python syntax; ``ambiguous``: Python's first match
    may be shorter than RE2's longest (alternations, optional or counted parts, groups);
    ``end_sensitive``: the pattern looks past its match's end (``$``, ``\\b``, ``\\z``);
    ``fold``: it folds case (compile it in Unicode mode)."""

    source: str
    ambiguous: bool
    end_sensitive: bool
    fold: bool


def translate(pattern: str) -> Translation:
    """The RE2 ``pattern`` in Python syntax (:class:`Translation`).

    Raises:
        ValueError: naming a construct RE2 rejects and Python would accept, or one this
            translation does not support.
    """
    fold = _FOLDS.search(pattern) is not None
    out, i, n = [], 0, len(pattern)
    in_class, class_start = False, -1
    ambiguous = end_sensitive = False
    multiline = False
    while i < n:
        c = pattern[i]
        if c == "\\":
            if i + 1 >= n:
                raise ValueError("trailing backslash")
            nxt = pattern[i + 1]
            if nxt == "Q":
                end = pattern.find("\\E", i + 2)
                literal = pattern[i + 2:] if end < 0 else pattern[i + 2:end]
                out.append("".join("\\" + ch if ch in "\\]^-[" else ch for ch in literal) if in_class
                           else re.escape(literal))
                i = n if end < 0 else end + 2
                continue
            if nxt == "x" and pattern.startswith("{", i + 2):
                end = pattern.find("}", i + 3)
                digits = pattern[i + 3:end] if end > 0 else ""
                if not digits or any(ch not in "0123456789abcdefABCDEF" for ch in digits) or int(digits, 16) > 0x10FFFF:
                    raise ValueError(f"bad escape \\x{{{digits}}}")
                out.append(f"\\U{int(digits, 16):08x}")
                i = end + 1
                continue
            if nxt in "pP":
                raise ValueError(f"Unicode classes (\\{nxt}...) are not supported")
            if nxt == "C":
                raise ValueError("\\C (any byte) is not supported")
            if nxt in "123456789" and not in_class:
                raise ValueError(f"backreference \\{nxt} is not RE2 syntax")
            if not in_class and nxt in "bBzZ":
                end_sensitive = True
            if nxt in _PERL and not in_class:
                out.append(_PERL[nxt])
            elif nxt in _PERL and nxt in "DWS":       # (a negated class inside [...]: Python's, ASCII)
                if fold:
                    raise ValueError(f"\\{nxt} inside [...] is not supported with (?i)")
                out.append(pattern[i:i + 2])
            elif nxt in _PERL_IN_CLASS and in_class:
                out.append(_PERL_IN_CLASS[nxt])
            else:
                out.append("\\Z" if nxt == "z" and not in_class else pattern[i:i + 2])
            i += 2
            continue
        if in_class:
            if c == "[" and pattern.startswith("[:", i):
                end = pattern.find(":]", i + 2)
                name = pattern[i + 2:end] if end > 0 else ""
                if name not in _POSIX_CLASSES:
                    raise ValueError(f"unknown or negated POSIX class [:{name}:]")
                out.append(_POSIX_CLASSES[name])
                i = end + 2
                continue
            if c == "]" and i != class_start:
                in_class = False
                out.append(c)
            else:
                out.append("\\" + c if c in "[&~|" else c)   # literal in RE2, set operators in Python
            i += 1
            continue
        if c == "[":
            in_class = True
            j = i + 1 + pattern.startswith("^", i + 1)
            class_start = j          # a "]" here is a literal
            out.append(pattern[i:j])
            i = j
            continue
        if c == "(":
            for prefix, what in _NOT_RE2.items():
                if pattern.startswith(prefix, i):
                    raise ValueError(f"{what} ({prefix}...) is not RE2 syntax")
            flags = GLOBAL_FLAGS.match(pattern, i)
            if flags:
                if i or "U" in flags.group():
                    raise ValueError(f"the flags {flags.group()} are supported at the start of a pattern only, "
                                     "without U")
                multiline = "m" in flags.group()
                out.append(flags.group())
                i = flags.end()
                continue
            ambiguous = True
            if pattern.startswith("(?<", i):
                out.append("(?P<")
                i += 3
                continue
        if c in "*+?}" and pattern.startswith("+", i + 1):
            raise ValueError(f"possessive quantifier {c}+ is not RE2 syntax")
        if c in "|?{":
            ambiguous = True
        if c == "$":
            end_sensitive = True
            out.append("$" if multiline else "\\Z")   # (Python's $ also matches before a final newline)
            i += 1
            continue
        out.append(c)
        i += 1
    if in_class:
        raise ValueError("missing ] at the end of a character class")
    return Translation("".join(out), ambiguous, end_sensitive, fold)


def compile_re2(pattern: str) -> re.Pattern:
    """The RE2 ``pattern`` compiled with Python's ``re`` (ASCII mode unless it folds case).

    Raises:
        ValueError / re.error: a pattern RE2 or this translation refuses.
    """
    t = translate(pattern)
    return re.compile(t.source, 0 if t.fold else re.ASCII)
