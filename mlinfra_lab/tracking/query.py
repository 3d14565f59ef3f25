"""The search language: filter strings parsed into bound SQLAlchemy expressions, never SQL text.

Contract: `compile_filter("metrics.val_acc > 0.85 and params.lr <= 1e-3", now)` returns a
SQLAlchemy boolean expression over `schema.runs` whose values are all bound parameters;
any text that is not in the grammar raises `QueryError` pointing at the offending
character. `compile_order_by("metrics.val_acc desc")` does the same for sort keys.

Grammar (keywords are case-insensitive)::

    expr    := and_expr ("or" and_expr)*
    and_expr:= unary ("and" unary)*
    unary   := "not" unary | "(" expr ")" | cmp
    cmp     := field op value | field ["not"] "in" "(" value ("," value)* ")"
             | field ["not"] "like" string
    field   := ("metrics" | "params" | "tags") "." key | ["attributes" "."] attribute
    key     := identifier | `any text in backticks`
    op      := = | == | != | <> | < | <= | > | >=
    value   := number | "string" | 'string' | relative time (-30d, -12h, -15m, -2w)

Attributes: status, user, name, code_commit, id, created, ended. Times compare with an
epoch-seconds number, an ISO date string ("2026-11-01") or a relative time (``-30d`` is
30 days before `now`).

Design decisions:
- A hand-written tokenizer and recursive-descent parser (about 200 lines) rather than a
  parser generator: the whole language fits on a screen, and every error knows the
  position of its token.
- Safety comes from construction, not from escaping: a field can only be one of the names
  above, an operator one of the tokens above, and a value becomes a bound parameter. A
  filter written to inject SQL (``x' or 1=1 --``) is simply not in the grammar.
- Each metric/param/tag comparison becomes ``runs.id IN (SELECT run_id FROM latest_metrics
  WHERE key = ? AND value > ?)``: an index range scan on ``(key, value, run_id)`` whose
  result the database materializes. That is the right plan when few runs match and the
  wrong one when most do (materializing 40,000 ids to return the newest 100). So a
  top-level conjunct can instead become a correlated ``EXISTS`` probe by primary key,
  evaluated only on the runs the scan in creation order reaches; the store picks per
  conjunct from a count capped at a few thousand rows (`TrackingStore.search_runs`).
- ``like 'prefix%'`` is a plain LIKE, never rewritten into a range on the prefix
  (``value >= 'xyz' and value < 'xy{'``): that range holds only in code-point order, and a
  database's collation may sort otherwise (under ICU's ``en-US`` ``{`` sorts before ``z``, so
  ``'xyz1'`` falls outside it and the search missed it). The database narrows the index by
  the prefix itself where its index order allows it: SQLite always (``case_sensitive_like``
  on a BINARY column), PostgreSQL when the index's collation is ``C``; under another
  collation PostgreSQL scans the index entries of the key and filters them by the pattern.
  Hot params (`schema.HOT_PARAMS`) compare the indexed column on `runs` directly.
- A run without the metric does not match a comparison on it (like SQL NULL), and does
  match its negation with ``not``.
- Limits, each a `QueryError` pointing at where it was crossed: `MAX_FILTER_CHARS`
  characters, `MAX_DEPTH` nested parentheses or ``not``s (a deeper filter would exhaust
  Python's stack), `MAX_CONDITIONS` comparisons (200 ANDed ones took PostgreSQL 25 s),
  `MAX_IN_VALUES` values in one ``in`` list (PostgreSQL binds at most 65,535 parameters),
  `MAX_ORDER_KEYS` sort keys (each metric or param key is one more join, and SQLite refuses a
  query over more than 64 tables).
  Every value is checked against its field's type (``id = 'abc'`` is refused here, not by
  the database), and text that cannot be encoded (lone surrogates) is refused. The store
  also bounds the time of a search (`reading`).

LIKE, one rule on both backends: case-sensitive; ``%`` matches any run of characters and
``_`` one character; a backslash makes the next character literal (``\\%`` in the
pattern, which inside a quoted filter string is written ``\\\\%``). SQLite's LIKE is
case-insensitive and has no escape character by default, PostgreSQL's is case-sensitive
with backslash as escape; the store sets SQLite's ``case_sensitive_like`` and passes
``ESCAPE '\\'`` to both.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import Column, ColumnElement, Select, Table, and_, exists, not_, or_, select

from mlinfra_lab.tracking import schema as S
from mlinfra_lab.tracking.errors import QueryError

__all__ = [
    "MAX_CONDITIONS",
    "MAX_DEPTH",
    "MAX_FILTER_CHARS",
    "MAX_IN_VALUES",
    "MAX_ORDER_KEYS",
    "Pred",
    "compile_filter",
    "compile_order_by",
    "tokenize",
]

MAX_FILTER_CHARS = 4000
MAX_DEPTH = 16  # nested parentheses and nots
MAX_CONDITIONS = 32  # comparisons in one filter
MAX_IN_VALUES = 500  # values in one 'in' list
MAX_ORDER_KEYS = 8  # sort keys: each metric or param key is a join (SQLite allows 64 tables)

_TOKEN = re.compile(
    r"""(?P<ws>\s+)
      | (?P<reltime>-\d+(?:\.\d+)?[smhdw]\b)
      | (?P<number>-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)
      | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
      | (?P<quoted>`[^`]+`)
      | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<op>==|!=|<>|<=|>=|=|<|>)
      | (?P<punct>[(),.])""",
    re.VERBOSE | re.ASCII,  # digits and spaces are ASCII: float() must accept every number token
)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_OPS = {
    "=": operator.eq,
    "==": operator.eq,
    "!=": operator.ne,
    "<>": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_KEYWORDS = {"and", "or", "not", "in", "like", "asc", "desc"}
_KINDS = {
    "metrics": "metrics",
    "metric": "metrics",
    "params": "params",
    "param": "params",
    "tags": "tags",
    "tag": "tags",
}
_ATTRS = {
    "status": "status",
    "user": "user",
    "name": "name",
    "code_commit": "code_commit",
    "id": "id",
    "created": "created_at",
    "ended": "ended_at",
}
_TIME_ATTRS = {"created_at", "ended_at"}


@dataclass(frozen=True)
class Token:
    kind: str  # ws | reltime | number | string | quoted | name | op | punct | end
    text: str
    pos: int


def tokenize(text: str) -> list[Token]:
    """Split `text` into tokens; raise `QueryError` at the first character that fits none."""
    if not isinstance(text, str):
        raise QueryError(f"a filter is a string, not {type(text).__name__}", repr(text)[:80], 0)
    if len(text) > MAX_FILTER_CHARS:
        raise QueryError(
            f"filter longer than {MAX_FILTER_CHARS} characters; split the search",
            text[:80] + "...",
            MAX_FILTER_CHARS if len(text) <= 80 else 80,
        )
    if "\x00" in text:
        raise QueryError("NUL byte in filter", text.replace("\x00", "?"), text.index("\x00"))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise QueryError(
            "character that cannot be encoded (a lone surrogate)",
            text.encode("utf-8", "replace").decode(),
            err.start,
        ) from None
    tokens, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            ch = text[pos]
            why = "unterminated string" if ch in "\"'" else f"unexpected character {ch!r}"
            raise QueryError(why, text, pos)
        kind = m.lastgroup or ""  # every alternative of _TOKEN is a named group
        if kind != "ws":
            tokens.append(Token(kind, m.group(), pos))
        pos = m.end()
    tokens.append(Token("end", "", len(text)))
    return tokens


@dataclass(frozen=True)
class Field:
    kind: str  # metrics | params | tags | attr
    key: str  # metric/param/tag key, or the runs column name
    pos: int


class _Parser:
    def __init__(self, text: str, now: float) -> None:
        self.text, self.now = text, now
        self.toks, self.i = tokenize(text), 0
        self.preds: dict[int, Pred] = {}  # id(IN-form expression) -> its predicate
        self.depth = self.conditions = 0

    # -- token helpers -------------------------------------------------------------
    @property
    def tok(self) -> Token:
        return self.toks[self.i]

    def error(self, message: str, tok: Token | None = None):
        tok = tok or self.tok
        found = "end of filter" if tok.kind == "end" else repr(tok.text)
        raise QueryError(f"{message}, found {found}", self.text, tok.pos)

    def keyword(self, word: str) -> bool:
        if self.tok.kind == "name" and self.tok.text.lower() == word:
            self.i += 1
            return True
        return False

    def punct(self, ch: str) -> bool:
        if self.tok.kind == "punct" and self.tok.text == ch:
            self.i += 1
            return True
        return False

    # -- grammar -------------------------------------------------------------------
    def parse(self) -> list[ColumnElement[bool]]:
        """The filter's top-level conjuncts (one element when the top level is an 'or')."""
        if self.tok.kind == "end":
            self.error("empty filter: expected a comparison such as metrics.acc > 0.9")
        groups = [self.and_parts()]
        while self.keyword("or"):
            groups.append(self.and_parts())
        if self.tok.kind != "end":
            self.error("expected 'and', 'or' or the end of the filter")
        return groups[0] if len(groups) == 1 else [or_(*(_and(g) for g in groups))]

    def expr(self) -> ColumnElement[bool]:
        parts = [_and(self.and_parts())]
        while self.keyword("or"):
            parts.append(_and(self.and_parts()))
        return parts[0] if len(parts) == 1 else or_(*parts)

    def and_parts(self) -> list[ColumnElement[bool]]:
        parts = [self.unary()]
        while self.keyword("and"):
            parts.append(self.unary())
        return parts

    def unary(self) -> ColumnElement[bool]:
        tok = self.tok
        if self.keyword("not"):
            return not_(self.nested(tok, self.unary))
        if self.punct("("):
            inner = self.nested(tok, self.expr)
            if not self.punct(")"):
                self.error("expected ')'")
            return inner
        return self.comparison()

    def nested(self, tok: Token, parse: Callable[[], ColumnElement[bool]]) -> ColumnElement[bool]:
        if self.depth >= MAX_DEPTH:
            self.error(
                f"more than {MAX_DEPTH} nested parentheses or 'not's; simplify the filter", tok
            )
        self.depth += 1
        try:
            return parse()
        finally:
            self.depth -= 1

    def field(self) -> Field:
        tok = self.tok
        if tok.kind != "name" or tok.text.lower() in _KEYWORDS:
            self.error("expected a field such as metrics.acc, params.lr, tags.team or status")
        self.i += 1
        word = tok.text.lower()
        if word in _KINDS and self.punct("."):
            key_tok = self.tok
            if key_tok.kind == "name":
                key = key_tok.text
            elif key_tok.kind == "quoted":
                key = key_tok.text[1:-1]
            else:
                self.error(f"expected a key after '{tok.text}.' (use `backticks` for odd names)")
            self.i += 1
            return Field(_KINDS[word], key, tok.pos)
        if word in ("attributes", "attribute", "run") and self.punct("."):
            tok = self.tok
            word = tok.text.lower() if tok.kind == "name" else ""
            self.i += 1
        if word in _ATTRS:
            return Field("attr", _ATTRS[word], tok.pos)
        raise QueryError(
            f"unknown field {tok.text!r}: use metrics.KEY, params.KEY, tags.KEY or one of "
            f"{', '.join(sorted(_ATTRS))}",
            self.text,
            tok.pos,
        )

    def value(self, f: Field) -> Any:
        tok = self.tok
        self.i += 1
        if tok.kind == "number":
            v: Any = float(tok.text)
        elif tok.kind == "string":
            v = re.sub(r"\\(.)", r"\1", tok.text[1:-1])
        elif tok.kind == "reltime":
            if f.key not in _TIME_ATTRS:
                self.error("a relative time like -30d only compares with created or ended", tok)
            v = self.now + float(tok.text[:-1]) * _UNITS[tok.text[-1]]
        else:
            self.i -= 1
            self.error('expected a value: a number, a "string" or a relative time like -30d')
        if f.kind == "metrics" and not isinstance(v, float):
            self.error("metrics are numbers: compare with a number", tok)
        if f.kind == "tags" and not isinstance(v, str):
            self.error("tags are strings: put the value in quotes", tok)
        if f.kind == "attr" and f.key in _TIME_ATTRS and isinstance(v, str):
            try:
                d = datetime.fromisoformat(v)
            except ValueError:
                self.error('expected an ISO date such as "2026-11-01" or a relative time', tok)
            v = (d if d.tzinfo else d.replace(tzinfo=timezone.utc)).timestamp()
        if (
            f.kind == "attr"
            and f.key not in _TIME_ATTRS
            and f.key != "id"
            and not isinstance(v, str)
        ):
            self.error(f"{f.key} is a string: put the value in quotes", tok)
        if f.kind == "attr" and f.key == "id" and not isinstance(v, float):
            self.error("id is a number: compare with a number such as 42", tok)
        if isinstance(v, float) and math.isnan(v):
            self.error("NaN is not a value to compare with", tok)
        return v

    def comparison(self) -> ColumnElement[bool]:
        self.conditions += 1
        if self.conditions > MAX_CONDITIONS:
            self.error(
                f"more than {MAX_CONDITIONS} comparisons in one filter; narrow it, or use 'in' lists"
            )
        f = self.field()
        negate = self.keyword("not")
        if self.keyword("in"):
            if not self.punct("("):
                self.error("expected '(' after 'in'")
            values = [self.value(f)]
            while self.punct(","):
                if len(values) >= MAX_IN_VALUES:
                    self.error(
                        f"more than {MAX_IN_VALUES} values in one 'in' list; split the search"
                    )
                values.append(self.value(f))
            if not self.punct(")"):
                self.error("expected ',' or ')' in the list")
            if len({type(v) for v in values}) > 1:
                self.error("mix of numbers and strings in an 'in' list", self.toks[self.i - 2])
            test, sample = (lambda col, _v=values: col.in_(_v)), values[0]
        elif self.keyword("like"):
            tok = self.tok
            v = self.value(f)
            if not isinstance(v, str) or f.kind == "metrics":
                self.error("'like' needs a string field and a quoted pattern such as \"res%\"", tok)
            test, sample = _like_test(v), v
        elif negate:
            self.error("expected 'in' or 'like' after 'not'")
        elif self.tok.kind == "op":
            op = _OPS[self.tok.text]
            self.i += 1
            v = self.value(f)
            test, sample = (lambda col, _v=v: op(col, _v)), v
        else:
            self.error("expected an operator (= != < <= > >=), 'in' or 'like'")
        expr = _column_test(f, test, sample)
        if negate:
            return not_(expr)
        if f.kind != "attr" and not (
            f.kind == "params" and isinstance(sample, float) and f.key in S.HOT_PARAMS
        ):
            self.preds[id(expr)] = Pred(f, test, sample)
        return expr


def _column_test(
    f: Field, test: Callable[[Any], ColumnElement[bool]], sample: Any
) -> ColumnElement[bool]:
    """The SQL test of one field: a column on `runs`, or an IN-subquery on an indexed table."""
    runs = S.runs
    if f.kind == "attr":
        return test(runs.c[f.key])
    if f.kind == "params" and isinstance(sample, float) and f.key in S.HOT_PARAMS:
        return test(runs.c[S.HOT_PARAMS[f.key]])
    return runs.c.id.in_(Pred(f, test, sample).matches())


def _and(parts: list[ColumnElement[bool]]) -> ColumnElement[bool]:
    return parts[0] if len(parts) == 1 else and_(*parts)


def _like_test(pattern: str):
    """LIKE, case-sensitive with backslash escapes; no range rewrite (see the module doc)."""
    if (len(pattern) - len(pattern.rstrip("\\"))) % 2:
        pattern += "\\"  # a trailing lone backslash means itself
    return lambda col: col.like(pattern, escape="\\")


@dataclass(frozen=True)
class Pred:
    """One comparison on a metric, param or tag: rendered as an IN-subquery or as an EXISTS probe."""

    field: Field
    test: Callable[[Any], ColumnElement[bool]]
    sample: Any  # a value of the comparison, for its type

    def table_and_column(self) -> tuple[Table, Column[Any]]:
        t = {"metrics": S.latest_metrics, "tags": S.tags, "params": S.params}[self.field.kind]
        if self.field.kind == "params":
            return t, (t.c.value_num if isinstance(self.sample, float) else t.c.value_str)
        return t, t.c.value

    def matches(self) -> Select[tuple[int]]:
        """SELECT run_id of the rows that satisfy the comparison (uses the (key, value) index)."""
        t, col = self.table_and_column()
        return select(t.c.run_id).where(t.c.key == self.field.key, self.test(col))

    def exists(self) -> ColumnElement[bool]:
        """Correlated probe by primary key (run_id, key): cheap per run, no materialization.

        The value is wrapped (``value + 0``, ``value || ''``) so the planner probes the
        primary key instead of range-scanning the (key, value) index once per run.
        """
        t, col = self.table_and_column()
        opaque = col + 0 if isinstance(self.sample, float) else col.concat("")
        return exists().where(
            t.c.run_id == S.runs.c.id, t.c.key == self.field.key, self.test(opaque)
        )


def compile_filter(
    text: str | None, now: float, choose: Callable[[Pred], str] | None = None
) -> ColumnElement[bool] | None:
    """Parse a filter string into a bound SQLAlchemy expression over `schema.runs` (None if empty).

    `choose(pred)` may pick, for each top-level conjunct on a metric, param or tag,
    ``"in"`` (materialize the matching run ids: best when few runs match) or ``"exists"``
    (probe each candidate run: best when most runs match); the store decides from a capped
    count. Without it every comparison is an IN-subquery. IN-subqueries are placed first.
    """
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    parser = _Parser(text, now)
    conjuncts = parser.parse()
    if choose is None:
        return _and(conjuncts)
    first, later = [], []
    for c in conjuncts:
        pred = parser.preds.get(id(c))
        if pred is not None and choose(pred) == "exists":
            later.append(pred.exists())
        else:
            first.append(c)
    return _and(first + later)


@dataclass(frozen=True)
class OrderKey:
    field: Field
    descending: bool


def compile_order_by(text: str | None) -> list[OrderKey]:
    """Parse ``"metrics.acc desc, created"`` into sort keys (default ascending)."""
    if text is None or not text.strip():
        return []
    p = _Parser(text, 0.0)
    keys = []
    while True:
        f = p.field()
        if f.kind == "tags":
            p.error("ordering by a tag is not supported; order by a metric, param or attribute")
        desc = p.keyword("desc")
        if not desc:
            p.keyword("asc")
        keys.append(OrderKey(f, desc))
        if len(keys) > MAX_ORDER_KEYS:
            p.error(f"more than {MAX_ORDER_KEYS} sort keys; order by fewer")
        if p.tok.kind == "end":
            return keys
        if not p.punct(","):
            p.error("expected ',' 'asc' 'desc' or the end of the order")
