"""Content-aware agreement: do two actions make the same change, not merely touch the same file?

The ``content`` tier, the one a reward may use (``key_args`` ignores what an edit writes, so junk written into the
right file would be paid). Per canonical call, a similarity in [0, 1]:

* ``edit``: same file, same region (the two old texts overlap: one contains the other, or they share a run of
  :data:`REGION_TOKENS` tokens; an ``insert`` by its line), then the **change** is compared: the token-level diff
  old -> new (``difflib.SequenceMatcher`` opcodes over code tokens, whitespace ignored), each token tagged ``-`` or
  ``+``, the unchanged context dropped. Similarity = the lower of the ``SequenceMatcher.ratio`` of the two removed
  parts and of the two added parts (:func:`change_similarity`). Copying
  the teacher's ``old_str`` earns nothing (context is not part of the change); a whitespace-only edit has an empty
  change (0 against any real one; two layout-only edits, such as re-indenting a Python block, agree only when
  their lines are the same); a comment-only or junk edit shares no tagged tokens with the real change.
* ``write``: same file and the same content token for token (whitespace ignored). There is no base to diff against,
  so any similarity below 1 could be earned by writing back the unchanged file the policy has read.
* ``bash``: the full command after normalisation (``cd X &&`` and ``python -m`` dropped): the right program with
  other arguments differs. Reading a file (``cat``/``head``/``sed -n``) is a ``read`` of that file; a search
  (``grep``/``rg``/``find``/``ls``) keeps its flags (short clusters split, sorted) and positional arguments, so
  ``find . -name x -delete`` is not ``find . -name x``.
* ``read`` by path; ``search`` by pattern and path; ``finish`` by the :func:`word_overlap` of its messages (an
  always-finish policy does not earn a teacher's summary); two finishes without a message (SWE-agent ``submit``)
  agree; one without against one with a message does not (else a bare finish would be free wherever teachers
  finish); anything else by its full
  normalised arguments.

An action's similarity pairs its calls one to one (any order) and takes the weakest pair: every call must agree.
Text-only answers (a final report is a finish in prose) are compared by :func:`word_overlap` too.
"""

from __future__ import annotations

import difflib
import itertools
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from crf_prime.pairs.normalize import CanonicalCall, command_argv, normalise_path

REGION_TOKENS = 8
"""Shared run of old-text tokens (about one statement) that puts two edits of a file in the same region."""

TOKEN_CAP = 4000
"""Tokens of an edit's old or new text diffed (SequenceMatcher is quadratic: ~1 s at 2,000 tokens of adversarial
input on the development box); longer edits agree only when their texts are equal token for token."""

_TOKEN = re.compile(r"\w+|[^\w\s]")
_PATH_KEYS = ("file_path", "path", "filepath", "filename", "file")
_READERS = {"cat", "head", "tail", "less", "more", "nl"}
_SEARCHERS = {"grep", "rg", "ag", "find", "ls"}
_MAX_PERMUTED = 6


def code_tokens(text: str) -> list[str]:
    """Identifiers, numbers and single punctuation characters; whitespace (and so formatting) is not a token."""
    return _TOKEN.findall(text)


def change_of(old: str, new: str) -> tuple[str, ...]:
    """The token-level diff old -> new as ``-tok`` / ``+tok``, unchanged tokens dropped."""
    a, b = code_tokens(old), code_tokens(new)
    out: list[str] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op != "equal":
            out += ["-" + t for t in a[i1:i2]] + ["+" + t for t in b[j1:j2]]
    return tuple(out)


def ratio(a: Sequence[Any], b: Sequence[Any]) -> float:
    """``difflib`` ratio of two sequences, the lower of both orders (it is not symmetric); 1 when both are empty."""
    if not a and not b:
        return 1.0
    forward = difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()
    return min(forward, difflib.SequenceMatcher(None, b, a, autojunk=False).ratio())


def _path(args: dict[str, Any]) -> str:
    return next((normalise_path(str(args[k])) for k in _PATH_KEYS if k in args), "")


def _patch_edits(patch: str) -> list[tuple[str, str, str]]:
    """``(path, old, new)`` per file of a unified or ``*** Update File:`` patch."""
    files: dict[str, tuple[list[str], list[str]]] = {}
    path = ""
    for line in patch.splitlines():
        header = re.match(r"^(?:\+\+\+ (?:b/)?|\*\*\* (?:Update|Add) File: )(.+)$", line)
        if header:
            path = normalise_path(header.group(1).strip())
            continue
        if line.startswith(("--- ", "*** ", "@@")):
            continue
        old, new = files.setdefault(path, ([], []))
        if line.startswith("-"):
            old.append(line[1:])
        elif line.startswith("+"):
            new.append(line[1:])
        else:
            old.append(line[1:])
            new.append(line[1:])
    return [(p, "\n".join(o), "\n".join(n)) for p, (o, n) in sorted(files.items())]


def edit_parts(args: dict[str, Any]) -> tuple[str, list[tuple[str, str]], Any]:
    """``(path, [(old, new)...], insert_line)`` of an edit call in any harness's spelling."""
    path = _path(args)
    patch = next((args[k] for k in ("patch", "input", "diff") if isinstance(args.get(k), str)), None)
    if patch is not None:
        edits = _patch_edits(patch)
        paths = sorted({p for p, _, _ in edits if p}) or [path]
        return " ".join(paths), [(o, n) for _, o, n in edits], None
    if isinstance(args.get("edits"), list):
        pairs = [
            (str(e.get("old_string", e.get("old_str", ""))), str(e.get("new_string", e.get("new_str", ""))))
            for e in args["edits"]
            if isinstance(e, dict)
        ]
        return path, pairs, None
    old = str(args.get("old_string", args.get("old_str", "")))
    new = str(args.get("new_string", args.get("new_str", args.get("content", ""))))
    return path, [(old, new)], args.get("insert_line")


def same_region(old_a: str, old_b: str) -> bool:
    """The two old texts overlap: one contains the other, or they share :data:`REGION_TOKENS` tokens in a row."""
    a, b = code_tokens(old_a), code_tokens(old_b)
    if not a or not b:
        return False
    m = difflib.SequenceMatcher(None, a, b, autojunk=False).find_longest_match(0, len(a), 0, len(b))
    return m.size >= min(REGION_TOKENS, len(a), len(b))


def edit_similarity(a: dict[str, Any], b: dict[str, Any]) -> float:
    """Same file and region, then the ratio of the two token-level changes (0 otherwise)."""
    path_a, parts_a, line_a = edit_parts(a)
    path_b, parts_b, line_b = edit_parts(b)
    if (
        path_a != path_b
        or (line_a is None) != (line_b is None)
        or bool(a.get("replace_all")) != bool(b.get("replace_all"))
    ):
        return 0.0
    texts = [code_tokens(t) for part in (*parts_a, *parts_b) for t in part]
    if max(map(len, texts), default=0) > TOKEN_CAP:
        return float([[code_tokens(t) for t in p] for p in parts_a] == [[code_tokens(t) for t in p] for p in parts_b])
    old_a, old_b = "\n".join(o for o, _ in parts_a), "\n".join(o for o, _ in parts_b)
    if line_a is not None:
        if str(line_a) != str(line_b):
            return 0.0
    elif not same_region(old_a, old_b):
        return 0.0
    change_a = tuple(t for o, n in parts_a for t in change_of(o, n))
    change_b = tuple(t for o, n in parts_b for t in change_of(o, n))
    if not change_a or not change_b:  # a layout-only edit (re-indenting a block) agrees only with the same layout
        return float(not change_a and not change_b and _layout(parts_a) == _layout(parts_b))
    return change_similarity(change_a, change_b)


def change_similarity(a: Sequence[str], b: Sequence[str]) -> float:
    """The lower of the removed tokens' ratio and the added tokens' ratio: the same change removes the same code and
    adds the same code. (On the tagged sequence as a whole, deleting the teachers' tokens, which the policy can read
    in the context, would earn a share without writing any of their new code.)"""
    removed = ratio([t for t in a if t[0] == "-"], [t for t in b if t[0] == "-"])
    added = ratio([t for t in a if t[0] == "+"], [t for t in b if t[0] == "+"])
    return min(removed, added)


def _layout(parts: list[tuple[str, str]]) -> list[list[str]]:
    return [[line.rstrip() for line in text.strip("\n").splitlines()] for part in parts for text in part]


def write_similarity(a: dict[str, Any], b: dict[str, Any]) -> float:
    """1 for the same file with the same content tokens, else 0 (no base: similarity could be earned by copying)."""
    content = ("file_text", "content", "text", "contents")

    def body(args: dict[str, Any]) -> str:
        return next((str(args[k]) for k in content if k in args), "")

    return float(_path(a) == _path(b) and code_tokens(body(a)) == code_tokens(body(b)))


def _flags(argv: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Sorted flags (``-rn`` split into ``-r -n``) and the positional arguments in order."""
    flags: set[str] = set()
    positional: list[str] = []
    for arg in argv:
        if arg.startswith("--"):
            flags.add(arg)
        elif arg.startswith("-") and len(arg) > 1:
            flags.update("-" + c for c in arg[1:])
        else:
            positional.append(arg)
    return tuple(sorted(flags)), tuple(positional)


def command_key(command: str) -> tuple[str, ...]:
    """A shell command as the step it takes: ``read FILE``, a search with its flags, or the full argv."""
    cmd, argv = command_argv(command)
    if argv is None:
        return ("bash", cmd)
    if not argv:
        return ("bash",)
    prog = argv[0].rsplit("/", 1)[-1]
    plain = not any(op in argv for op in ("|", ">", ">>", "&&", "||", ";", "<"))
    if plain and prog in _READERS:
        files = [a for a in argv[1:] if not a.startswith("-") and not a.lstrip("+").isdigit()]
        if len(files) == 1:
            return ("read", normalise_path(files[0]))
    if plain and prog == "sed" and len(argv) == 4 and argv[1] == "-n":
        return ("read", normalise_path(argv[-1]))
    if plain and prog in _SEARCHERS - {"find"}:  # find's flags are words whose order is its expression
        flags, positional = _flags(argv[1:])
        return ("search", prog, *(() if prog == "ls" else flags), "--", *positional)
    return ("bash", prog, *argv[1:])


def word_overlap(a: str, b: str) -> float:
    """Multiset Jaccard of the lower-cased words: |A ∩ B| / |A ∪ B| (1 when both have none).

    Word order is free (an honest rewording keeps its words), every word one side lacks costs (a canned "All tests
    pass; the bug is fixed." misses the teacher's specifics), and padding only grows the union."""
    words_a, words_b = Counter(re.findall(r"\w+", a.lower())), Counter(re.findall(r"\w+", b.lower()))
    union = sum((words_a | words_b).values())
    return sum((words_a & words_b).values()) / union if union else 1.0


def _message(args: dict[str, Any]) -> str:
    """A finish call's message: its string arguments."""
    return " ".join(str(v) for _, v in sorted(args.items()) if isinstance(v, str))


def _key(call: CanonicalCall) -> tuple[str, ...] | None:
    """The whole step of a call without a payload to grade: a command, a read of a file, a search."""
    args = call.arguments()
    if call.name == "bash":
        return command_key(str(args.get("command", args.get("cmd", ""))))
    if call.name == "read":
        return ("read", _path(args))
    if call.name == "search":
        pattern = str(args.get("pattern", args.get("query", args.get("search_term", ""))))
        return ("search", pattern, _path(args) or normalise_path(str(args.get("dir", args.get("directory", ".")))))
    return None


def call_similarity(a: CanonicalCall, b: CanonicalCall) -> float:
    """How far two canonical calls are the same step, content included, in [0, 1]."""
    if a == b and a.name not in ("edit", "write"):  # canonical strings are whitespace-collapsed: indentation counts
        return 1.0
    key_a, key_b = _key(a), _key(b)
    if key_a is not None or key_b is not None:  # cat FILE (bash) is a read of FILE
        return float(key_a == key_b)
    if a.name != b.name:
        return 0.0
    args_a, args_b = a.raw_arguments(), b.raw_arguments()  # content with its whitespace (patch lines)
    if a.name == "edit":
        return edit_similarity(args_a, args_b)
    if a.name == "write":
        return write_similarity(args_a, args_b)
    if a.name == "finish":  # two finishes without a message (SWE-agent submit) are the same step
        return word_overlap(_message(args_a), _message(args_b))
    return 0.0  # same tool, other arguments (python code, unknown tools): not the same step


def calls_similarity(a: Sequence[CanonicalCall], b: Sequence[CanonicalCall]) -> float:
    """Calls paired one to one in the best order; the weakest pair's similarity (0 for different counts)."""
    if len(a) != len(b) or not a:
        return 0.0
    grid = [[call_similarity(x, y) for y in b] for x in a]
    if len(a) <= _MAX_PERMUTED:
        return max(min(grid[i][j] for i, j in enumerate(p)) for p in itertools.permutations(range(len(b))))
    free, worst = set(range(len(b))), 1.0  # many parallel calls: greedy pairing
    for row in grid:
        j = max(free, key=lambda k: row[k])
        free.discard(j)
        worst = min(worst, row[j])
    return worst
