"""Lab grading: release student notebooks, grade submissions, validate graders.

The workflow of an instructor, one module per step:

- `markers`: solution / hidden-test spans, ``grader`` and ``readonly`` cells of a lab.
- `variants`: the ``wrong-answer`` cells a lab keeps, and the notebooks that try them.
- `release`: the student version (solutions stubbed, hidden tests and wrong answers removed,
  read-only cells locked, outputs cleared).
- `collect`: a Canvas or Moodle submissions download into ``<student>/<lab>.ipynb``
  (``mlinfra-lab collect``): `download` reads the zip or folder refusing hostile entries,
  `lms_names` reads whose each file is from the LMS's naming.
- `submissions`: the source labs, and which lab and student each submitted notebook is
  (`copy_names`: Colab's and browsers' copy names; `json_budget`: a notebook's JSON shape
  checked before it is parsed).
- `restore`: put the source graders (hidden tests included) and read-only cells back into a
  submission by id; `restored`: the same with the visible tests only, the notebook a
  student reruns under ``pytest --nbval-lax`` (``grade --write-restored``).
- `forbid`: the guard a grader with ``forbid`` metadata runs under: no calling the course's
  own implementation of the answer.
- `reference`: `using_reference`, a later exercise graded with the earlier ones' references.
- `secret`: `grading_rng` / `grading_seed`, hidden-test inputs drawn from the grading secret.
- `execute`: run notebooks, each in a fresh `sandbox` (bubblewrap, or a separate user and
  resource limits) under `budgets` (held together per sandbox by `cgroups`, or by
  `memory_watch` where there are none); `kernel_runner` drives one kernel over jupyter's
  protocol and scores each cell from its ``execute_reply`` (`kernel_client`), after
  `kernel_reset` has put IPython's machinery back.
- `judge`: each grader's checks again, in a second kernel that never runs the student's
  code, on the values their functions returned: `judge_record` writes them down in the
  student's kernel, `judge_wire` carries them as plain values, `judge_replay` hands them to
  the grader there, `judge_names` says which names a grader takes from the student.
- `grade`: score each grader cell; `gradebook`: write the CSV and JSON (cells escaped by
  `formula` against spreadsheet formulas); `manifest`: the gradebook's hashes and seal (``grade --verify``); `merge`: join chunked runs (``--merge``).
- `gradebook_db`: the record those files are views of (``gradebook.sqlite``: runs, manual
  entries, late policies, by student x lab x cell); `views`: `BookSession`, the gradebook
  folder opened verified, changed and rewritten; `regrade`: ``grade --student``/``--force``
  into it, keeping what the instructor entered; `late`: ``--due`` and `late_penalty`.
- `manual`: written answers (markdown cells tagged ``manual``) that grading lists for the
  instructor in `manual_sheet` (``manual.csv``); `manual_scores`: merge the instructor's
  points back (``grade --manual``).
- `feedback`: a report per student (`write_feedback`, `release_feedback` into each
  student's folder); `export`: one row per student for an LMS (`write_export`: Canvas,
  Moodle, CSV); `class_summary`: the instructor's table and histograms (`write_summary`).
- `validate`: prove every grader passes on the source and fails on the release and on
  every wrong answer.

Command line: ``mlinfra-lab release``, ``mlinfra-lab collect``,
``mlinfra-lab grade [--secret S]``, ``mlinfra-lab validate [--secret S]``.
"""

from .class_summary import write_summary
from .collect import CollectError, CollectReport, collect_download
from .download import DownloadError, read_download
from .errors import (
    CallGuardError,
    ExecutionError,
    ForbiddenCallError,
    GradingError,
    JudgeError,
    MarkerError,
    SourceLabError,
    SubmissionError,
    WireError,
)
from .execute import CellOutcome, ExecutionConfig, run_notebooks
from .export import ExportError, write_export
from .feedback import release_feedback, write_feedback
from .forbid import forbid_calls, forbidden_codes, guard_source
from .grade import CellResult, GradeConfig, GradeReport, GradeResult, grade_submissions
from .gradebook import csv_safe, gradebook_rows, write_gradebook
from .gradebook_db import GradebookDB, GradebookDBError
from .late import LatePolicyError, late_penalty
from .manifest import ManifestError, Verification, verify_gradebook
from .manual import ManualCell, manual_cells
from .manual_scores import ManualScoreError, merge_manual_scores
from .markers import (
    GraderCell,
    ReadonlyCell,
    grader_cells,
    readonly_cells,
    replace_solutions,
    strip_hidden,
)
from .reference import using_reference
from .release import release_dir, release_node, release_notebook
from .restore import RestoreNote, restore_graders
from .restored import RestoredLeakError, RestoredRun, restored_notebook, write_restored
from .secret import DEFAULT_SECRET, SECRET_ENV, grading_rng, grading_seed
from .submissions import SourceLab, Submission, SubmissionProblem, load_source_labs
from .validate import ValidationProblem, ValidationReport, validate_labs
from .variants import WrongAnswer, variant_notebook, wrong_answers
from .views import BookError, BookSession

__all__ = [
    "DEFAULT_SECRET",
    "SECRET_ENV",
    "BookError",
    "BookSession",
    "CallGuardError",
    "CellOutcome",
    "CellResult",
    "CollectError",
    "CollectReport",
    "DownloadError",
    "ExecutionConfig",
    "ExecutionError",
    "ExportError",
    "ForbiddenCallError",
    "GradeConfig",
    "GradeReport",
    "GradeResult",
    "GradebookDB",
    "GradebookDBError",
    "GraderCell",
    "GradingError",
    "JudgeError",
    "LatePolicyError",
    "ManifestError",
    "ManualCell",
    "ManualScoreError",
    "MarkerError",
    "ReadonlyCell",
    "RestoreNote",
    "RestoredLeakError",
    "RestoredRun",
    "SourceLab",
    "SourceLabError",
    "Submission",
    "SubmissionError",
    "SubmissionProblem",
    "ValidationProblem",
    "ValidationReport",
    "Verification",
    "WireError",
    "WrongAnswer",
    "collect_download",
    "csv_safe",
    "forbid_calls",
    "forbidden_codes",
    "grade_submissions",
    "gradebook_rows",
    "grader_cells",
    "grading_rng",
    "grading_seed",
    "guard_source",
    "late_penalty",
    "load_source_labs",
    "manual_cells",
    "merge_manual_scores",
    "read_download",
    "readonly_cells",
    "release_dir",
    "release_feedback",
    "release_node",
    "release_notebook",
    "replace_solutions",
    "restore_graders",
    "restored_notebook",
    "run_notebooks",
    "strip_hidden",
    "using_reference",
    "validate_labs",
    "variant_notebook",
    "verify_gradebook",
    "write_export",
    "write_feedback",
    "write_gradebook",
    "write_restored",
    "write_summary",
    "wrong_answers",
]
