"""The judge's boundary (issue 14, item 2): what crosses from a student's kernel, and what cannot.

`judge_wire` carries plain values out of a student's kernel; its decoder runs in the judge on
bytes a hostile kernel wrote. These tests check that every supported type comes back as
itself (and a lying subclass as its plain base type), and that each forged record is
refused with a `WireError` before anything is built from it. `judge_names` and
`read_record` are the grading process's side: which names a grader takes from the student,
and reading a record without following what the student's kernel put in its place.
"""

from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from mlinfra_lab.grading.errors import JudgeError, WireError
from mlinfra_lab.grading.judge import read_record
from mlinfra_lab.grading.judge_names import JudgeNames, scan, top_level_imports
from mlinfra_lab.grading.judge_wire import MAGIC, Decoder, Encoder, Opaque, dump, load
from mlinfra_lab.grading.markers import grader_cells
from mlinfra_lab.tracking import Level, RetentionPolicy, RetentionRule


def _roundtrip(value):
    enc = Encoder()
    tree = enc.value(value)
    header, buffers = load(dump({"v": tree}, enc.buffers))
    return Decoder(buffers).value(header["v"])


def _decode(tree, buffers=()):
    header, bufs = load(dump({"v": tree}, list(buffers)))
    return Decoder(bufs).value(header["v"])


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        -(2**100),
        1.5,
        "naïve",
        b"\x00\xff",
        [1, (2.5, "x"), {"k": [None]}],
        {(1, 2): frozenset({3}), "s": {4, 5}},
        (),
    ],
)
def test_plain_values_come_back_as_themselves(value):
    got = _roundtrip(value)
    assert got == value and type(got) is type(value)


def test_non_finite_floats_keep_their_kind():
    got = _roundtrip([math.nan, math.inf, -math.inf])
    assert math.isnan(got[0]) and got[1:] == [math.inf, -math.inf]


@pytest.mark.parametrize(
    "array",
    [
        np.arange(12, dtype=np.float32).reshape(3, 4),
        np.arange(12, dtype=np.float64).reshape(3, 4)[:, ::2],  # not contiguous
        np.array(2.0),  # 0-d stays 0-d
        np.array([True, False]),
        np.array(["ab", "c"]),
        np.zeros((0, 3), dtype=np.int16),
        np.array([1 + 2j], dtype=np.complex64),
        np.array(["2026-12-04"], dtype="datetime64[D]"),
    ],
)
def test_arrays_keep_dtype_shape_and_values(array):
    got = _roundtrip(array)
    assert type(got) is np.ndarray and got.dtype == array.dtype and got.shape == array.shape
    np.testing.assert_array_equal(got, array)


def test_numpy_scalars_stay_numpy_scalars():
    for scalar in (np.float16(1.5), np.int64(7), np.bool_(True), np.float64(-0.0)):
        got = _roundtrip(scalar)
        assert type(got) is type(scalar) and got == scalar


@pytest.mark.parametrize(
    "dtype", [torch.float16, torch.bfloat16, torch.float32, torch.int64, torch.bool]
)
def test_tensors_keep_dtype_shape_and_values(dtype):
    t = (torch.arange(24, dtype=torch.float32).reshape(2, 3, 4) / 7).to(dtype).transpose(0, 2)
    got = _roundtrip(t)
    assert type(got) is torch.Tensor and got.dtype == dtype and got.shape == t.shape
    assert torch.equal(got, t)
    assert _roundtrip(torch.tensor(3.0)).shape == ()


def test_the_course_s_own_classes_are_rebuilt_by_the_library():
    policy = RetentionPolicy((RetentionRule(kind="checkpoint", project="p", keep_all_days=3.5),))
    got = _roundtrip({"policy": policy, "level": Level.WRITE})
    assert got == {"policy": policy, "level": Level.WRITE}
    assert type(got["policy"]) is RetentionPolicy and type(got["level"]) is Level


def test_lying_subclasses_arrive_as_their_plain_base_type():
    class Liar(np.ndarray):
        def __array_function__(self, *a, **k):
            return True

        def __eq__(self, other):
            return True

    class Agreeable(float):
        def __eq__(self, other):
            return True

    class Loud(dict):
        pass

    got = _roundtrip([np.zeros(3).view(Liar), Agreeable(2.0), Loud(a=1)])
    assert type(got[0]) is np.ndarray and not np.allclose(got[0], 1.0)
    assert type(got[1]) is float and got[1] != 3.0
    assert type(got[2]) is dict


def test_what_cannot_travel_is_opaque_and_fails_when_the_judge_uses_it():
    got = _roundtrip([object(), iter([1]), np.array([object()])])
    assert all(isinstance(g, Opaque) for g in got)
    with pytest.raises(WireError, match="cannot check outside"):
        got[0] == 1  # noqa: B015
    with pytest.raises(WireError):
        float(got[2])


def test_exceptions_come_back_as_the_nearest_class_the_judge_trusts():
    class Mine(ValueError):
        pass

    enc = Encoder()
    for err, kind in [
        (Mine("bad", 3), ValueError),
        (KeyError("k"), KeyError),
        (AssertionError("message"), AssertionError),
        (JudgeError("x"), JudgeError),
    ]:
        node = enc.exception(err)
        header, buffers = load(dump({"e": node}, enc.buffers))
        got = Decoder(buffers).exception(header["e"])
        assert type(got) is kind and got.args == err.args


@pytest.mark.parametrize(
    ("tree", "buffers", "why"),
    [
        ({"~": "array", "dtype": "|O", "shape": [1], "b": 0}, [b"\0" * 8], "dtype"),
        ({"~": "array", "dtype": "V8", "shape": [1], "b": 0}, [b"\0" * 8], "dtype"),
        ({"~": "array", "dtype": "<f8", "shape": [1000], "b": 0}, [b"\0" * 8], "bytes"),
        ({"~": "array", "dtype": "<f8", "shape": [-1], "b": 0}, [b"\0" * 8], "shape"),
        ({"~": "array", "dtype": "<f8", "shape": [1], "b": 5}, [b"\0" * 8], "buffer"),
        ({"~": "tensor", "dtype": "qint8", "shape": [1], "b": 0}, [b"\0"], "dtype"),
        ({"~": "dataclass", "cls": "os:system", "v": {}}, [], "not the course"),
        ({"~": "dataclass", "cls": "subprocess:Popen", "v": {"args": "id"}}, [], "not the course"),
        ({"~": "dataclass", "cls": "mlinfra_lab.__main__:X", "v": {}}, [], "dunder"),
        ({"~": "dataclass", "cls": "mlinfra_lab.tracking:Level", "v": {}}, [], "not a dataclass"),
        ({"~": "set", "v": [{"~": "list", "v": []}]}, [], "unhashable"),
        ({"~": "float", "v": "1e999999"}, [], "nan"),
        ({"~": "pickle", "v": "gASV"}, [], "unknown"),
        ([1, 2], [], "unknown"),
    ],
)
def test_forged_values_are_refused(tree, buffers, why):
    with pytest.raises(WireError, match=why):
        _decode(tree, buffers)


def test_nesting_past_the_limit_is_refused_both_ways():
    deep: list = []
    for _ in range(200):
        deep = [deep]
    assert isinstance(_roundtrip(deep), list)  # the encoder cuts it: opaque inside
    tree: object = None
    for _ in range(200):
        tree = {"~": "list", "v": [tree]}
    with pytest.raises(WireError, match="nested"):
        _decode(tree)


@pytest.mark.parametrize(
    "data",
    [
        b"not a record",
        MAGIC + struct.pack(">Q", 10**12) + b"{}",
        MAGIC + struct.pack(">Q", 2) + b"[]",
        MAGIC + struct.pack(">Q", 3) + b"{x}",
        MAGIC + b"\0" * 8,
    ],
)
def test_malformed_records_are_refused(data):
    with pytest.raises(WireError):
        load(data)


def test_a_buffer_outside_the_record_is_refused():
    text = json.dumps({"header": {}, "buffers": [[0, 100]]}).encode()
    with pytest.raises(WireError, match="outside"):
        load(MAGIC + struct.pack(">Q", len(text)) + text + b"short")


def test_judge_names_follow_python_scopes():
    text = """
import numpy as np
def helper(x):
    local_only = 1
    return student_a(x) + local_only
values = [student_b(v) for v in range(3)]
lam = lambda: student_c()
print(len(values), later)
later = 1
"""
    read, bound = scan(text)
    assert {"student_a", "student_b", "student_c", "later"} <= read
    assert {"np", "helper", "values", "lam", "later"} <= bound
    names = JudgeNames()
    assert names.take(text) == ["student_a", "student_b", "student_c"]
    earlier = ["student_a", "student_b", "student_c"]  # helper() may call them again
    assert names.take("helper(1); student_d(values)") == [*earlier, "student_d"]
    assert names.take("%matplotlib inline\nx = student_e()\nget_ipython()") == [
        *earlier,
        "student_d",
        "student_e",
    ]
    assert names.take("student_a = 1") == earlier[1:] + ["student_d", "student_e"]


def test_read_record_refuses_what_is_not_a_plain_file(tmp_path):
    secret = tmp_path / "instructor.ipynb"
    secret.write_text("the solutions")
    link = tmp_path / "link"
    link.symlink_to(secret)
    hard = tmp_path / "hard"
    os.link(secret, hard)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (link, hard, fifo, tmp_path):
        data, why = read_record(path)
        assert data is None and "not a plain file" in why and "solutions" not in why
    assert secret.read_text() == "the solutions"
    assert read_record(tmp_path / "missing") == (
        None,
        "your kernel wrote no record of this grader's calls",
    )
    big = tmp_path / "big"
    big.write_bytes(b"x" * 2000)
    data, why = read_record(big, cap=1000)
    assert data is None and "more than" in why
    ok = tmp_path / "ok"
    ok.write_bytes(b"record")
    assert read_record(ok) == (b"record", "") and not ok.exists()


def test_the_judge_imports_what_the_instructor_s_setup_imports():
    setup = """
import numpy as np, math
from mlinfra_lab.grading import grading_rng as rng
from __future__ import annotations
if True:
    import os  # not at the top level: left out
%matplotlib inline
x = np.zeros(3)
"""
    assert top_level_imports(setup) == [
        "import numpy as np, math",
        "from mlinfra_lab.grading import grading_rng as rng",
    ]
    assert top_level_imports("def broken(:") == []
    names = JudgeNames()
    judge_text = "\n".join([*top_level_imports(setup), "assert np.allclose(double(x), 2 * x)"])
    assert names.take(judge_text) == ["double", "x"]  # np is the judge's own


def test_grader_cells_carry_the_setup_imports_but_not_the_solutions():
    from nbformat.v4 import new_code_cell, new_notebook

    nb = new_notebook(
        cells=[
            new_code_cell("import numpy as np\nSEED = 0"),
            new_code_cell(
                "def double(x):\n    ### BEGIN SOLUTION\n    import operator\n"
                "    return 2 * x\n    ### END SOLUTION\nimport math"
            ),
            new_code_cell(
                "assert np.allclose(double(1), 2)",  # reads np, not SEED, math, operator
                metadata={"tags": ["grader"], "points": 1, "exercise": "double"},
            ),
        ]
    )
    for index, cell in enumerate(nb.cells):
        cell.id = f"c{index}"
    (grader,) = grader_cells(nb)
    assert grader.imports == ("import numpy as np", "import math")
    assert grader.judge_source == "import numpy as np\n\nassert np.allclose(double(1), 2)"
    assert "import numpy" not in grader.run_source  # the student's kernel runs its own cells


def test_record_then_replay_hands_the_judge_values_and_never_a_module(tmp_path, monkeypatch):
    """The two ends without kernels: a namespace dict stands in for each kernel's."""
    import types

    from mlinfra_lab.grading import judge_record, judge_replay

    fake_np = types.ModuleType("numpy")
    fake_np.allclose = lambda *a, **k: True  # what the student's kernel calls np

    def double(x):
        return 3 * np.asarray(x)

    def apply(fn, values):  # calls back into the grader's function
        return [fn(v) for v in values]

    student = {"np": fake_np, "double": double, "apply": apply, "SCALE": 2.5}
    monkeypatch.setattr(judge_record, "_namespace", lambda: student)
    names = ["SCALE", "apply", "double", "missing", "np"]
    record = tmp_path / "record"
    assert judge_record.prepare(names, str(record)) == judge_record.TOKEN
    judge_record.arm()
    seen = []
    student["double"]([1.0, 2.0])  # the grader's calls
    student["apply"](lambda v: seen.append(v) or v, [1, 2])
    assert judge_record.disarm() == judge_record.TOKEN
    assert student["double"] is double  # put back

    judge: dict = {"missing": "stale"}
    monkeypatch.setattr(judge_replay, "_namespace", lambda: judge)
    assert judge_replay.load(str(record), names) == judge_replay.TOKEN
    assert judge["SCALE"] == 2.5 and "missing" not in judge
    assert isinstance(judge["np"], Opaque)  # a module never travels, nor is imported
    with pytest.raises(WireError, match="cannot check outside"):
        judge["np"].allclose(1, 2)
    got = judge["double"]([1.0, 2.0])
    assert type(got) is np.ndarray and got.tolist() == [3.0, 6.0]
    replayed = []
    assert judge["apply"](lambda v: replayed.append(v) or v, [1, 2]) == [1, 2]
    assert seen == replayed == [1, 2]  # the callback was called again, in the judge
    with pytest.raises(JudgeError, match="more times"):
        judge["double"]([1.0])


def _lab_with_a_tolerance(readonly: bool):
    from nbformat.v4 import new_code_cell, new_notebook

    from mlinfra_lab.grading.submissions import SourceLab

    setup = new_code_cell(
        "import numpy as np\nTOL = 1e-3\ndef close(a, b):\n    return abs(a - b) < TOL"
    )
    if readonly:
        setup.metadata["tags"] = ["readonly"]
    nb = new_notebook(
        cells=[
            setup,
            new_code_cell(
                "def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION"
            ),
            new_code_cell(
                "assert close(double(1.0), 2.0) and TOL < 1",
                metadata={"tags": ["grader"], "points": 1, "exercise": "double"},
            ),
        ]
    )
    for index, cell in enumerate(nb.cells):
        cell.id = f"c{index}"
    return SourceLab("tol", Path("tol.ipynb"), nb, tuple(grader_cells(nb, "tol")))


def test_validate_refuses_a_grader_that_would_take_the_lab_s_own_constant_from_the_student():
    """A submission sets ``TOL = 1e9`` (or redefines ``close``) in its own kernel: the judge
    would replay that. Validation says so before any kernel runs; a read-only set-up is fine."""
    from mlinfra_lab.grading.validate import _names_the_student_controls

    problems = _names_the_student_controls(_lab_with_a_tolerance(readonly=False))
    assert sorted(p.problem.split("'")[1] for p in problems) == ["TOL", "close"]
    assert all("tag that cell 'readonly'" in p.problem and p.cell_id == "c2" for p in problems)
    assert _names_the_student_controls(_lab_with_a_tolerance(readonly=True)) == []
