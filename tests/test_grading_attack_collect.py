"""``mlinfra-lab collect``: identity from the LMS's download naming, against hostile downloads.

Realistic Canvas and Moodle downloads are built in a temporary folder (zips and extracted
folders), each with an honest neighbour: resubmissions, Colab and browser names, a roster.
Every hostile entry (a zip slip, an absolute path, a backslash, a link, a hard link, a name
with a terminal escape or a bidirectional override, a name given twice, a zip bomb, too
many entries, a file named after a classmate, two notebooks for one student) is refused
with its reason, the neighbour is collected, and nothing is written outside the output
folder. Where a defence is not obvious from the refusal, the test shows what the naive
reading would have done. No kernel runs: collecting reads and writes files only.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import stat
import zipfile
from pathlib import Path

import nbformat
import pytest
from test_grading_pipeline import _student_copy

from mlinfra_lab.cli import main
from mlinfra_lab.grading.collect import CollectError, collect_download
from mlinfra_lab.grading.download import DownloadError, Limits, read_download, unsafe_name
from mlinfra_lab.grading.lms_names import notebook_key, parse_lms_path
from mlinfra_lab.grading.submissions import find_submissions, load_source_labs

pytestmark = pytest.mark.grading

REPO = Path(__file__).resolve().parents[1]
WARMUP = REPO / "labs" / "00_warmup.ipynb"
LAB = "00_warmup"


def _nb(tag: str) -> bytes:
    """A small notebook whose bytes differ by `tag`."""
    cell = nbformat.v4.new_markdown_cell(f"work of {tag}")
    cell["id"] = "work"  # not a random one: the same tag gives the same bytes
    return nbformat.writes(nbformat.v4.new_notebook(cells=[cell])).encode()


def _zip(path: Path, entries: list[tuple[str | zipfile.ZipInfo, bytes]]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries:
            zf.writestr(name, data)
    return path


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _run(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue() + err.getvalue()


# ---------------------------------------------------------------------------- Canvas


def _canvas_class() -> dict[str, bytes]:
    return {
        "smithjane_12345_678901_00_warmup.ipynb": _nb("jane, first try"),
        "smithjane_LATE_12345_678950_00_warmup-1.ipynb": _nb("jane, resubmitted"),
        "doejohn_23456_678910_Copy of 00_warmup.ipynb": _nb("john, from Colab"),
        "roebob_34567_678920_00_warmup (1).ipynb": _nb("bob, downloaded twice"),
        "roebob_34567_678920_screenshot.png": b"\x89PNG",
        # eve names her file after jane's, with a larger upload number than jane's
        "eveevil_45678_678999_smithjane_12345_679000_00_warmup.ipynb": _nb("eve"),
    }


def test_a_canvas_zip_gives_one_notebook_per_lms_user(tmp_path):
    files = _canvas_class()
    download = _zip(tmp_path / "submissions.zip", list(files.items()))
    report = collect_download(download, tmp_path / "subs", LAB)
    assert report.ok and report.lms == "canvas", report.refused
    got = {t.student: (tmp_path / "subs" / t.student / f"{LAB}.ipynb").read_bytes() for t in report.taken}  # fmt: skip
    assert got == {
        "12345": files["smithjane_LATE_12345_678950_00_warmup-1.ipynb"],  # the latest upload
        "23456": files["doejohn_23456_678910_Copy of 00_warmup.ipynb"],
        "34567": files["roebob_34567_678920_00_warmup (1).ipynb"],
        "45678": files["eveevil_45678_678999_smithjane_12345_679000_00_warmup.ipynb"],
    }
    jane = next(t for t in report.taken if t.student == "12345")
    assert "resubmission: the latest of 2 uploads" in jane.notes[0], jane.notes
    assert "smithjane_12345_678901_00_warmup.ipynb" in jane.notes[0]
    assert "late" in " ".join(jane.notes)
    assert [r.source for r in report.set_aside] == ["smithjane_12345_678901_00_warmup.ipynb"]
    assert report.skipped == ["roebob_34567_678920_screenshot.png"]
    # the defence: the LMS's prefix is read from the left; read from the right (as a
    # greedy pattern does), the id is one that eve typed, not the LMS's
    eve = "eveevil_45678_678999_smithjane_12345_679000_00_warmup.ipynb"
    naive = re.fullmatch(r"(.*)_(\d+)_(\d+)_(.+)", eve)
    assert naive and naive.group(2) != "45678" and naive.group(2) in eve[len("eveevil_45678_678999_") :]  # fmt: skip
    assert parse_lms_path((eve,)).user_id == "45678"  # type: ignore[union-attr]


def test_grade_reads_what_collect_wrote(tmp_path):
    """The folder layout is grade's: each notebook is its folder's student's, of the lab."""
    honest = nbformat.writes(_student_copy()).encode()
    download = _zip(
        tmp_path / "dl.zip",
        [
            ("smithjane_12345_1_Copy of 00_warmup (2).ipynb", honest),
            ("doejohn_23456_2_my_notebook.ipynb", honest + b"\n"),
        ],
    )
    report = collect_download(download, tmp_path / "subs", LAB)
    assert report.ok
    subs, problems = find_submissions([tmp_path / "subs"], load_source_labs(WARMUP))
    assert problems == []
    assert sorted((s.student, s.lab) for s in subs) == [("12345", LAB), ("23456", LAB)]


def test_a_canvas_gradebook_export_is_the_roster(tmp_path):
    roster = tmp_path / "canvas.csv"
    roster.write_text(
        "Student,ID,SIS User ID,SIS Login ID,Section,Warm-up (77)\n"
        "    Points Possible,,,,,7\n"
        '"Smith, Jane",12345,S1,jsmith,A,\n'
        '"Doe, John",23456,S2,jdoe,A,\n',
        encoding="utf-8",
    )
    files = _canvas_class()
    download = _zip(tmp_path / "dl.zip", list(files.items()))
    code, text = _run(
        "collect", str(download), "--lab", LAB, "--out", str(tmp_path / "subs"),
        "--roster", str(roster), "--report", str(tmp_path / "report.json"),
    )  # fmt: skip
    assert code == 1, text  # bob and eve are not on this roster
    assert sorted(p.name for p in (tmp_path / "subs").iterdir()) == ["jdoe", "jsmith"]
    report = json.loads((tmp_path / "report.json").read_text())
    refused = {r["source"]: r["reason"] for r in report["refused"]}
    assert set(refused) == {
        "roebob_34567_678920_00_warmup (1).ipynb",
        "eveevil_45678_678999_smithjane_12345_679000_00_warmup.ipynb",
    }
    assert all("not on the roster" in why for why in refused.values()), refused
    assert "LMS user 45678 (eveevil) is not on the roster" in text


# ---------------------------------------------------------------------------- Moodle

MOODLE = {
    "Jane Smith_4321_assignsubmission_file_/00_warmup.ipynb": _nb("jane"),
    "John Doe_4322_assignsubmission_file_/Copy of 00_warmup.ipynb": _nb("john"),
    "John Doe_4322_assignsubmission_onlinetext_/onlinetext.html": b"<p>see notebook</p>",
    # eve uploads a folder named like jane's submission: hers all the same
    "Eve Evil_4323_assignsubmission_file_/Jane Smith_4321_assignsubmission_file_/00_warmup.ipynb": _nb(
        "eve"
    ),  # fmt: skip
    "Ann Other_4324_assignsubmission_file_/00_warmup.ipynb": _nb("ann"),
}


def _moodle(tmp: Path, as_zip: bool) -> Path:
    if as_zip:
        return _zip(tmp / "moodle.zip", list(MOODLE.items()))
    for name, data in MOODLE.items():
        (tmp / "moodle" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / "moodle" / name).write_bytes(data)
    return tmp / "moodle"


@pytest.mark.parametrize("as_zip", [True, False], ids=["zip", "folder"])
def test_a_moodle_download_with_a_roster(tmp_path, as_zip):
    roster = tmp_path / "roster.csv"
    roster.write_text("student,id,email\njane,4321,j@x\njohn,4322,\neve,4323,\n")
    code, text = _run(
        "collect", str(_moodle(tmp_path, as_zip)), "--lab", LAB, "--out",
        str(tmp_path / "subs"), "--roster", str(roster),
    )  # fmt: skip
    assert code == 1, text  # ann (4324) is not on the roster
    subs = tmp_path / "subs"
    assert _files(subs) == {"jane", "john", "eve"} | {f"{s}/{LAB}.ipynb" for s in ("jane", "john", "eve")}  # fmt: skip
    assert (subs / "jane" / f"{LAB}.ipynb").read_bytes() == _nb("jane")
    assert (subs / "eve" / f"{LAB}.ipynb").read_bytes() == _nb("eve")
    assert "LMS user 4324 (Ann Other) is not on the roster" in text
    assert "skipped   1 file that are not notebooks" in text  # the online text


def test_moodle_versions_without_an_order_are_both_refused(tmp_path):
    download = _zip(
        tmp_path / "dl.zip",
        [
            ("Jane Smith_4321_assignsubmission_file_/00_warmup.ipynb", _nb("a")),
            ("Jane Smith_4321_assignsubmission_file_/00_warmup (1).ipynb", _nb("b")),
            ("John Doe_4322_assignsubmission_file_/00_warmup.ipynb", _nb("john")),
        ],
    )
    report = collect_download(download, tmp_path / "subs", LAB)
    assert [t.student for t in report.taken] == ["4322"]
    assert len(report.refused) == 2
    assert all("the LMS gives no order" in r.reason for r in report.refused), report.refused


# ------------------------------------------------------------ two files, one student


def test_two_notebooks_for_one_student_replace_nothing(tmp_path):
    subs = tmp_path / "subs"
    first = _zip(tmp_path / "first.zip", [("smithjane_12345_1_00_warmup.ipynb", _nb("jane"))])
    assert collect_download(first, subs, LAB).ok
    stored = (subs / "12345" / f"{LAB}.ipynb").read_bytes()
    again = _zip(
        tmp_path / "again.zip",
        [
            ("smithjane_12345_5_00_warmup.ipynb", _nb("jane, 2")),
            ("smithjane_12345_6_helper.ipynb", _nb("someone's")),
            ("doejohn_23456_7_00_warmup.ipynb", _nb("john")),
        ],
    )
    report = collect_download(again, subs, LAB)
    assert [t.student for t in report.taken] == ["23456"]
    assert sorted(r.source for r in report.refused) == [
        "smithjane_12345_5_00_warmup.ipynb",
        "smithjane_12345_6_helper.ipynb",
    ]
    for r in report.refused:
        assert "2 different notebooks in the download claim LMS user 12345" in r.reason
        assert "collected earlier, is left as it was" in r.reason
    assert (subs / "12345" / f"{LAB}.ipynb").read_bytes() == stored


def test_roster_names_that_differ_in_case_claim_one_folder(tmp_path):
    download = _zip(
        tmp_path / "dl.zip",
        [("a_1_1_00_warmup.ipynb", _nb("a")), ("b_2_2_00_warmup.ipynb", _nb("b"))],
    )
    roster = {"Alice": {"id": "1"}, "alice": {"id": "2"}}
    report = collect_download(download, tmp_path / "subs", LAB, roster)
    assert report.taken == [] and len(report.refused) == 2
    assert all("differ only in letter case" in r.reason for r in report.refused)


def test_a_roster_that_gives_one_id_to_two_students_is_refused(tmp_path):
    download = _zip(tmp_path / "dl.zip", [("a_1_1_00_warmup.ipynb", _nb("a"))])
    with pytest.raises(CollectError, match="gives LMS id 1 to both"):
        collect_download(download, tmp_path / "subs", LAB, {"a": {"id": "1"}, "b": {"id": "1"}})
    report = collect_download(download, tmp_path / "subs", LAB, {"../up": {"id": "1"}})
    assert "cannot be a folder name" in report.refused[0].reason
    assert not (tmp_path / "up").exists()


# ---------------------------------------------------------------------- hostile zips


def _link_entry(name: str, target: str) -> tuple[zipfile.ZipInfo, bytes]:
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info, target.encode()


def _encrypt_flag(download: Path) -> None:
    """Mark every entry of `download` encrypted (zipfile writes no encrypted entries)."""
    raw = bytearray(download.read_bytes())
    for signature, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):  # local, central
        at = raw.index(signature) + offset
        raw[at] |= 0x1
    download.write_bytes(bytes(raw))


HOSTILE = {
    "zip slip": ("../../smithjane_12345_9_00_warmup.ipynb", "zip slip"),
    "absolute": ("/tmp/smithjane_12345_9_00_warmup.ipynb", "an absolute path"),
    "drive": ("C:/smithjane_12345_9_00_warmup.ipynb", "an absolute path"),
    "backslash": ("..\\..\\smithjane_12345_9_00_warmup.ipynb", "backslash"),
    "escape": ("smithjane\x1b[2J_12345_9_00_warmup.ipynb", "control character"),
    "bidi": ("smithjane_12345_9_00_warmup\u202ebnypi.ipynb", "bidirectional override"),
    "link": (_link_entry("smithjane_12345_9_00_warmup.ipynb", "/etc/passwd"), "symbolic link"),
    "encrypted": ("smithjane_12345_9_00_warmup.ipynb", "encrypted"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_zip_entry_is_refused_and_writes_nothing_outside(tmp_path, case):
    entry, reason = HOSTILE[case]
    work = tmp_path / "work"
    work.mkdir()
    entries = [(entry, _nb("hostile")) if isinstance(entry, str) else entry]
    download = _zip(tmp_path / "dl.zip", [*entries, ("doejohn_23456_1_00_warmup.ipynb", _nb("john"))])  # fmt: skip
    if case == "encrypted":
        _encrypt_flag(download)  # the first entry's flag: the hostile one
    before = _files(tmp_path)
    code, text = _run("collect", str(download), "--lab", LAB, "--out", str(work / "subs"))
    assert code == 1, text
    assert _files(tmp_path) - before == {"work/subs", "work/subs/23456", f"work/subs/23456/{LAB}.ipynb"}  # fmt: skip
    refused = [line for line in text.splitlines() if line.startswith("REFUSED")]
    assert len(refused) == 1 and reason in refused[0], text
    assert "\x1b" not in text and "\u202e" not in text  # the name is shown escaped


def test_zip_slip_would_escape_without_the_check(tmp_path):
    """What the check prevents: an extraction that joins the entry's name to the target."""
    name, _ = HOSTILE["zip slip"]
    download = _zip(tmp_path / "dl.zip", [(name, _nb("x"))])
    target = tmp_path / "a" / "b"
    target.mkdir(parents=True)
    with zipfile.ZipFile(download) as zf:  # the naive extraction
        for info in zf.infolist():
            (target / info.filename).write_bytes(zf.read(info))
    assert (tmp_path / "smithjane_12345_9_00_warmup.ipynb").exists()  # outside the target
    assert unsafe_name(name) is not None


def test_a_name_given_twice_is_refused_both_times(tmp_path):
    name = "smithjane_12345_9_00_warmup.ipynb"
    with pytest.warns(UserWarning, match="Duplicate name"):
        download = _zip(
            tmp_path / "dl.zip",
            [
                (name, _nb("jane")),
                (name, _nb("mallory")),
                ("SMITHJANE_12345_9_00_warmup.ipynb", _nb("case")),
                ("doejohn_23456_1_00_warmup.ipynb", _nb("john")),
            ],
        )
    report = collect_download(download, tmp_path / "subs", LAB)
    assert [t.student for t in report.taken] == ["23456"]
    assert len(report.refused) == 3
    assert all("holds 3 entries of this name" in r.reason for r in report.refused)
    with zipfile.ZipFile(download) as zf:  # the defence: a lookup by name takes one silently
        assert zf.read(name) == _nb("mallory")


def test_a_zip_bomb_is_stopped_by_size(tmp_path):
    bomb = b"{" + b" " * 5_000_000 + b"}"
    honest = _nb("john")
    download = _zip(
        tmp_path / "dl.zip",
        [("smithjane_12345_9_00_warmup.ipynb", bomb), ("doejohn_23456_1_00_warmup.ipynb", honest)],
    )
    assert download.stat().st_size < len(bomb) // 100  # it inflates a hundredfold and more
    report = collect_download(download, tmp_path / "subs", LAB, limits=Limits(max_bytes=10**6))
    assert [t.student for t in report.taken] == ["23456"]
    assert "over the limit of 1 MB (--max-size)" in report.refused[0].reason


def test_a_bomb_that_lies_about_its_size_is_cut_while_inflating(tmp_path):
    """The zip declares 100 bytes; it inflates to 5 MB: no more than declared is read."""
    download = _zip(tmp_path / "dl.zip", [("smithjane_12345_9_00_warmup.ipynb", b" " * 5_000_000)])
    raw = bytearray(download.read_bytes())
    for signature, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):  # local, central
        at = raw.index(signature) + offset
        raw[at : at + 4] = (100).to_bytes(4, "little")
    download.write_bytes(bytes(raw))
    found = read_download(download, Limits(max_bytes=10**6))
    assert found.notebooks == [] and "damaged zip entry" in (found.refused[0].problem or "")


def test_many_notebooks_add_up_to_the_total_budget(tmp_path):
    entries = [(f"s{k}_{k}_{k}_00_warmup.ipynb", b"{" + b" " * 400_000 + b"}") for k in range(1, 4)]
    download = _zip(tmp_path / "dl.zip", entries)
    report = collect_download(download, tmp_path / "subs", LAB, limits=Limits(max_total=10**6))
    assert [t.student for t in report.taken] == ["1", "2"]
    assert "add up to more than 1 MB (--max-total)" in report.refused[0].reason


def test_too_many_entries_stop_the_download(tmp_path):
    entries = [(f"s{k}_{k}_{k}_00_warmup.ipynb", b"{}") for k in range(6)]
    download = _zip(tmp_path / "dl.zip", entries)
    with pytest.raises(DownloadError, match="6 entries, more than --max-entries 5"):
        read_download(download, Limits(max_entries=5))
    code, text = _run("collect", str(download), "--lab", LAB, "--out", str(tmp_path / "o"), "--max-entries", "5")  # fmt: skip
    assert code == 2 and "more than --max-entries 5" in text and not (tmp_path / "o").exists()


# -------------------------------------------------------------------- hostile folders


def _canvas_folder(tmp: Path) -> Path:
    folder = tmp / "canvas"
    folder.mkdir()
    (folder / "doejohn_23456_1_00_warmup.ipynb").write_bytes(_nb("john"))
    (folder / "smithjane_12345_2_00_warmup.ipynb").write_bytes(_nb("jane"))
    return folder


def test_links_in_a_folder_are_refused(tmp_path):
    folder = _canvas_folder(tmp_path)
    outside = tmp_path / "secret.ipynb"
    outside.write_bytes(_nb("the instructor's solutions"))
    (folder / "eveevil_45678_3_00_warmup.ipynb").symlink_to(outside)
    os.link(folder / "smithjane_12345_2_00_warmup.ipynb", folder / "maldoe_56789_4_00_warmup.ipynb")  # fmt: skip
    (folder / "sub").symlink_to(tmp_path, target_is_directory=True)
    report = collect_download(folder, tmp_path / "subs", LAB)
    assert [t.student for t in report.taken] == ["23456"]
    reasons = {r.source: r.reason for r in report.refused}
    assert "symbolic link" in reasons["eveevil_45678_3_00_warmup.ipynb"]
    assert "symbolic link" in reasons["sub"]
    # both names of the hard-linked file: the same bytes claimed by jane and by mal
    assert "a hard link (this file has 2 names" in reasons["maldoe_56789_4_00_warmup.ipynb"]
    assert "a hard link" in reasons["smithjane_12345_2_00_warmup.ipynb"]
    assert os.stat(folder / "maldoe_56789_4_00_warmup.ipynb").st_nlink == 2  # the attack's file


def test_a_student_folder_that_is_a_link_is_not_written_through(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "12345").symlink_to(elsewhere, target_is_directory=True)
    report = collect_download(_canvas_folder(tmp_path), subs, LAB)
    assert [t.student for t in report.taken] == ["23456"]
    assert "is a symbolic link; nothing written there" in report.refused[0].reason
    assert list(elsewhere.iterdir()) == []


# ------------------------------------------------------------------------ the names


def test_canvas_and_moodle_names_parse_from_the_left():
    canvas = parse_lms_path(("smithjane_LATE_12345_678902_00_warmup-1.ipynb",))
    assert canvas and (canvas.lms, canvas.user_id, canvas.upload, canvas.late) == ("canvas", "12345", 678902, True)  # fmt: skip
    assert canvas.original == "00_warmup-1.ipynb"
    flat = parse_lms_path(("Jane Smith_4321_assignsubmission_file_00_warmup.ipynb",))
    assert flat and (flat.lms, flat.user_id, flat.original) == ("moodle", "4321", "00_warmup.ipynb")  # fmt: skip
    # a Canvas file named in Moodle's style stays Canvas's, and the reverse
    odd = parse_lms_path(("eve_111_5_Jane_999_assignsubmission_file_x.ipynb",))
    assert odd and (odd.lms, odd.user_id) == ("canvas", "111")
    odd = parse_lms_path(("Eve Evil_111_assignsubmission_file_bob_999_5_x.ipynb",))
    assert odd and (odd.lms, odd.user_id) == ("moodle", "111")
    assert parse_lms_path(("00_warmup.ipynb",)) is None
    assert parse_lms_path(("smithjane_12345_1_x.ipynb",), "moodle") is None


def test_a_download_mixing_both_namings_is_refused(tmp_path):
    download = _zip(
        tmp_path / "dl.zip",
        [
            ("smithjane_12345_1_00_warmup.ipynb", _nb("a")),
            ("Jane Smith_12345_assignsubmission_file_/00_warmup.ipynb", _nb("b")),
        ],
    )
    with pytest.raises(CollectError, match="mixes Canvas and Moodle"):
        collect_download(download, tmp_path / "subs", LAB)
    assert collect_download(download, tmp_path / "subs", LAB, lms="canvas").taken[0].student == "12345"  # fmt: skip


@pytest.mark.parametrize(
    ("original", "key"),
    [
        ("00_warmup.ipynb", ("00_warmup", 0, ())),
        ("00_warmup-2.ipynb", ("00_warmup", 2, ())),
        ("Copy of 00_warmup (1)-1.ipynb", ("00_warmup", 1, ("Copy of", "(1)"))),
        ("00_warmup-1 (3).ipynb", ("00_warmup", 1, ("(3)",))),
        ("sub/00_Warmup.ipynb", ("00_warmup", 0, ())),
    ],
)
def test_notebook_key_takes_off_the_lms_and_copy_marks(original, key):
    assert notebook_key(original) == key


def test_collect_help_explains_the_namings_and_refusals(capsys):
    with pytest.raises(SystemExit) as done:
        main(["collect", "--help"])
    text = capsys.readouterr().out
    assert done.value.code == 0
    for words in ("Canvas", "Moodle", "--roster", "zip slip", "hard links", "set aside", "--max-total"):  # fmt: skip
        assert words in text, words
