"""Per-student feedback: one report per student and lab, in Markdown and in HTML.

Contract: `feedback_documents(report, comments, times)` returns, per (student, lab), the
Markdown and the HTML of that student's report: the total, when it was submitted, and per
exercise the points, the grader's message and the instructor's comments;
`write_feedback(report, comments, out_dir, times)` writes them as
``out_dir/feedback/STUDENT/LAB.md`` and ``.html`` (``grade --feedback``);
`release_feedback(report, comments, dest, times)` writes each student's into
``dest/STUDENT/LAB-feedback.md`` and ``.html`` (``grade --release-feedback DEST``: given the
submissions folder of a folder-per-student layout, that is each student's own folder).
Both return the files written and the students skipped, with why.

Design decisions:
- Everything that came from a submission or a person is escaped for where it lands: HTML
  text through `html.escape` (quotes too) in a page with a Content-Security-Policy that
  runs nothing; Markdown through a backslash before every punctuation mark CommonMark
  gives a meaning inside a line, with line breaks folded, so a message cannot open a link, an image, a
  raw HTML block or a new table row (every escaped text sits inside a line, after a
  label or in a table cell, so the marks that matter only at a line's start are left). Messages are those the gradebook holds (made and
  capped by the grader, see `grade`); nothing of the notebook itself is quoted.
- Markdown renderers also link bare text: GitHub's autolinks (``www.``, ``http://``, an
  e-mail address) and markdown-it's linkify (any ``name.tld``). Escapes do not stop every
  renderer, so such text is defanged the way security reports quote addresses: ``://``
  becomes ``[:]//``, ``www.`` ``www[.]``, ``@`` in an address ``[@]``, the dot before a
  top-level domain (two letters or a common one) ``[.]``, and ``mailto:`` and
  ``xmpp:`` ``mailto[:]``. The HTML page shows the text as it is (nothing there links).
- Writing never stops at one student: a report path that cannot be written (a folder a
  student named like a report, a file where their folder should be) skips that student
  with the reason, and the next student is written.
- A student name becomes a folder name only when it is one plain path component (no
  separator, no control character, not ``.`` or ``..``); otherwise that student is skipped
  and named in the returned list. A student folder that is a symbolic link is skipped (it
  could point anywhere); each file is replaced atomically, so a link planted in place of a
  report is replaced, never followed.
- A submission that was identified (student and lab) but refused (a malformed file, a
  second file, over a budget) gets a report too, "not graded" with the reason, so the
  student learns it before the deadline passes; paths in the reason are cut to file
  names (the instructor's folders are not the student's business).
- The pending note of a written answer reads "not graded yet" for the student, not the
  instructor's "see manual.csv".
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from .grade import GradeReport, GradeResult
from .gradebook import Comments
from .manifest import atomic_write
from .manual import PENDING

__all__ = [
    "Skipped",
    "defang",
    "feedback_documents",
    "refused",
    "markdown_escape",
    "release_feedback",
    "safe_component",
    "write_feedback",
]

Times = Mapping[tuple[str, str], str | None]
Skipped = list[tuple[str, str]]  # (student as stored, why)
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>|~&])")  # what means something mid-line
_UNSAFE = re.compile(r"[\x00-\x1f\x7f/\\]")
_CSP = "default-src 'none'; style-src 'unsafe-inline'"
_TLDS = "[a-z]{2}|com|net|org|edu|gov|mil|int|info|biz|app|dev|xyz|site|online|top|shop|link"
_DEFANG = (  # (pattern, replacement): bare text a Markdown renderer would make a link
    (re.compile(r"://"), "[:]//"),
    (re.compile(r"(?i)\b(mailto|xmpp):"), r"\1[:]"),
    (re.compile(r"(?i)\b(www)\."), r"\1[.]"),
    (re.compile(r"(?<=[\w.+-])@(?=[\w-]+\.)"), "[@]"),
    (re.compile(rf"(?i)(?<=[a-z0-9-])\.(?=(?:{_TLDS})(?![\w(-]))"), "[.]"),
)


def defang(text: str) -> str:
    """`text` with every address a renderer would link broken by brackets (see the module
    docstring)."""
    for pattern, replacement in _DEFANG:
        text = pattern.sub(replacement, text)
    return text


def markdown_escape(text: str) -> str:
    """`text` as literal Markdown on one line, linking nothing (see the module docstring)."""
    return _MD_SPECIAL.sub(r"\\\1", defang(" ".join(str(text).split())))


def safe_component(name: str) -> bool:
    """True when `name` can be used as one folder name as it is."""
    return bool(name) and name not in (".", "..") and not _UNSAFE.search(name)


def _number(x: float) -> str:
    return f"{int(x)}" if float(x).is_integer() else f"{x:.2f}".rstrip("0").rstrip(".")


def _rows(result: GradeResult, comments: Comments) -> list[tuple[str, str, str, str, str]]:
    """(exercise, points, max, message, comment) per exercise, in lab order."""
    said: dict[str, list[str]] = {}
    for c in result.cells:
        text = comments.get((result.student, result.lab, c.cell_id))
        if text:
            said.setdefault(c.exercise, []).append(text)
    rows = []
    for exercise, (points, max_points, message) in result.exercises().items():
        message = message.replace(PENDING, "not graded yet (graded by hand)")
        rows.append(
            (
                exercise,
                _number(points),
                _number(max_points),
                message,
                " | ".join(said.get(exercise, ())),
            )
        )
    return rows


def _markdown(result: GradeResult, comments: Comments, submitted: str | None) -> str:
    lines = [
        f"# Feedback: {markdown_escape(result.lab)}",
        "",
        f"- Student: {markdown_escape(result.student)}",
        f"- Total: **{_number(result.points)} / {_number(result.max_points)}**",
    ]
    if submitted:
        lines.append(f"- Submitted: {markdown_escape(submitted)}")
    lines += [
        "",
        "| exercise | points | max | what the grader found | instructor's comment |",
        "|---|---:|---:|---|---|",
    ]
    for exercise, points, max_points, message, comment in _rows(result, comments):
        cells = (exercise, points, max_points, message or "passed", comment)
        lines.append("| " + " | ".join(markdown_escape(c) for c in cells) + " |")
    notes = [markdown_escape(n) for n in result.notes]
    if notes:
        lines += ["", "Notes on the whole submission:", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def _html(result: GradeResult, comments: Comments, submitted: str | None) -> str:
    e = html.escape
    rows = "\n".join(
        "<tr>"
        + "".join(
            f'<td class="{k}">{e(v)}</td>'
            for k, v in zip(
                ("ex", "num", "num", "msg", "msg"),
                (exercise, points, max_points, message or "passed", comment),
                strict=True,
            )
        )
        + "</tr>"
        for exercise, points, max_points, message, comment in _rows(result, comments)
    )
    notes = "".join(f"<li>{e(n)}</li>" for n in result.notes)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_CSP}">
<title>Feedback: {e(result.lab)}: {e(result.student)}</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}}
table{{border-collapse:collapse;width:100%}}td,th{{border:1px solid #ccc;padding:.3em .5em;
vertical-align:top}}td.num{{text-align:right}}th{{background:#f3f3f3;text-align:left}}</style>
</head><body>
<h1>Feedback: {e(result.lab)}</h1>
<p>Student: {e(result.student)}<br>
Total: <strong>{e(_number(result.points))} / {e(_number(result.max_points))}</strong>
{f"<br>Submitted: {e(submitted)}" if submitted else ""}</p>
<table><thead><tr><th>exercise</th><th>points</th><th>max</th>
<th>what the grader found</th><th>instructor's comment</th></tr></thead>
<tbody>
{rows}
</tbody></table>
{f"<p>Notes on the whole submission:</p><ul>{notes}</ul>" if notes else ""}
</body></html>
"""


def refused(report: GradeReport) -> dict[tuple[str, str], str]:
    """(student, lab) -> why, for each identified submission that was not graded (and has
    no grade standing), every path in the reason cut to its file name."""
    graded = {(r.student, r.lab) for r in report.results}
    paths = sorted(
        {r.submission for r in report.results} | {p.path for p in report.problems}, key=len
    )
    why: dict[tuple[str, str], list[str]] = {}
    for p in report.problems:
        if p.student and p.lab and (p.student, p.lab) not in graded:
            message = p.message
            for path in reversed(paths):  # longest first, so no path is cut inside another
                message = message.replace(path, Path(path).name)
            why.setdefault((p.student, p.lab), []).append(f"{Path(p.path).name}: {message}")
    return {key: "; ".join(reasons) for key, reasons in why.items()}


def _refused_markdown(student: str, lab: str, why: str) -> str:
    return (
        f"# Feedback: {markdown_escape(lab)}\n\n- Student: {markdown_escape(student)}\n"
        f"- Total: **not graded**\n\nYour submission could not be graded: "
        f"{markdown_escape(why)}\n\nAsk your instructor what to do next.\n"
    )


def _refused_html(student: str, lab: str, why: str) -> str:
    e = html.escape
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_CSP}">
<title>Feedback: {e(lab)}: {e(student)}</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}}</style>
</head><body>
<h1>Feedback: {e(lab)}</h1>
<p>Student: {e(student)}<br>Total: <strong>not graded</strong></p>
<p>Your submission could not be graded: {e(why)}</p>
<p>Ask your instructor what to do next.</p>
</body></html>
"""


def feedback_documents(
    report: GradeReport, comments: Comments | None = None, times: Times | None = None
) -> dict[tuple[str, str], tuple[str, str]]:
    """(student, lab) -> (Markdown, HTML) of each graded submission's report, and of each
    identified submission that was refused (`refused`: it says why)."""
    comments, times = comments or {}, times or {}
    docs = {
        (r.student, r.lab): (
            _markdown(r, comments, times.get((r.student, r.lab))),
            _html(r, comments, times.get((r.student, r.lab))),
        )
        for r in report.results
    }
    for (student, lab), why in refused(report).items():
        docs[(student, lab)] = (
            _refused_markdown(student, lab, why),
            _refused_html(student, lab, why),
        )
    return docs


def _write_all(
    docs: dict[tuple[str, str], tuple[str, str]],
    folder_of: Callable[[str], Path],
    name_of: Callable[[str], str],
) -> tuple[list[Path], Skipped]:
    written: list[Path] = []
    skipped: Skipped = []
    for (student, lab), (md, page) in docs.items():
        if not (safe_component(student) and safe_component(lab)):
            skipped.append((student, "not a plain folder name (a separator or control code)"))
            continue
        folder = folder_of(student)
        if folder.is_symlink():
            skipped.append((student, f"{folder} is a symbolic link; not followed"))
            continue
        path = folder
        try:
            folder.mkdir(parents=True, exist_ok=True)
            for suffix, text in ((".md", md), (".html", page)):
                path = folder / (name_of(lab) + suffix)
                atomic_write(path, text.encode("utf-8"))
                written.append(path)
        except OSError as err:
            why = err.strerror or type(err).__name__
            skipped.append((student, f"{path} cannot be written ({why}); move it aside and rerun"))
    return written, skipped


def write_feedback(
    report: GradeReport,
    comments: Comments | None,
    out_dir: Path | str,
    times: Times | None = None,
) -> tuple[list[Path], Skipped]:
    """Write every report into ``out_dir/feedback/STUDENT/LAB.{md,html}``."""
    root = Path(out_dir) / "feedback"
    if root.is_symlink():
        return [], [("*", f"{root} is a symbolic link; not followed")]
    docs = feedback_documents(report, comments, times)
    return _write_all(docs, lambda s: root / s, lambda lab: lab)


def release_feedback(
    report: GradeReport,
    comments: Comments | None,
    dest: Path | str,
    times: Times | None = None,
) -> tuple[list[Path], Skipped]:
    """Write each student's reports into ``dest/STUDENT/LAB-feedback.{md,html}``."""
    root = Path(dest)
    docs = feedback_documents(report, comments, times)
    return _write_all(docs, lambda s: root / s, lambda lab: f"{lab}-feedback")
