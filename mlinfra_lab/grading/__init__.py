"""Lab grading: release student notebooks, grade submissions with nbval, validate graders.

The workflow of an instructor, one module per step:

- `markers`: solution / hidden-test spans and ``grader`` cells of an instructor lab.
- `release`: the student version (solutions stubbed, hidden tests removed, outputs cleared).
- `submissions`: which lab and which student each submitted notebook is.
- `restore`: put the source graders (hidden tests included) back into a submission by id.
- `execute`: run notebooks under ``pytest --nbval-lax`` and read each cell's outcome.
- `grade`: score each grader cell; `gradebook`: write the CSV and JSON.
- `validate`: prove every grader passes on the source and fails on the release.

Command line: ``mlinfra-lab release``, ``mlinfra-lab grade``, ``mlinfra-lab validate``.
"""

from .errors import ExecutionError, GradingError, MarkerError, SourceLabError, SubmissionError
from .execute import CellOutcome, ExecutionConfig, run_notebooks
from .grade import CellResult, GradeConfig, GradeReport, GradeResult, grade_submissions
from .gradebook import gradebook_rows, write_gradebook
from .markers import GraderCell, grader_cells, replace_solutions, strip_hidden
from .release import release_dir, release_node, release_notebook
from .restore import RestoreNote, restore_graders
from .secret import DEFAULT_SECRET, SECRET_ENV, grading_rng, grading_seed
from .submissions import SourceLab, Submission, SubmissionProblem, load_source_labs
from .validate import ValidationProblem, ValidationReport, validate_labs

__all__ = [
    "DEFAULT_SECRET",
    "SECRET_ENV",
    "CellOutcome",
    "CellResult",
    "ExecutionConfig",
    "ExecutionError",
    "GradeConfig",
    "GradeReport",
    "GradeResult",
    "GraderCell",
    "GradingError",
    "MarkerError",
    "RestoreNote",
    "SourceLab",
    "SourceLabError",
    "Submission",
    "SubmissionError",
    "SubmissionProblem",
    "ValidationProblem",
    "ValidationReport",
    "grade_submissions",
    "gradebook_rows",
    "grader_cells",
    "grading_rng",
    "grading_seed",
    "load_source_labs",
    "release_dir",
    "release_node",
    "release_notebook",
    "replace_solutions",
    "restore_graders",
    "run_notebooks",
    "strip_hidden",
    "validate_labs",
    "write_gradebook",
]
