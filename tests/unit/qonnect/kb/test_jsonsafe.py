"""jsonsafe.storable_problems: every value JSON over UTF-8 cannot carry is named by its path."""

from __future__ import annotations

from qonnect.kb.jsonsafe import MAX_DEPTH, MAX_PROBLEMS, storable_problems


def _nested(depth: int) -> dict:
    value: dict = {}
    for _i in range(depth):
        value = {"a": value}
    return value


def test_clean_values_have_no_problems():
    assert storable_problems({"a": [1, 2.5, "é", None, True, {"b": "ok"}]}) == []
    assert storable_problems(_nested(MAX_DEPTH - 1)) == []


def test_each_problem_is_named_by_its_path():
    value = {"m": {"s": "x\udc00", "n": [1, float("nan")], "z": "a\x00b"}, "inf": float("inf"), "\ud800": 1}
    problems = storable_problems(value)
    assert any(p.startswith("m.s: ") and "surrogate" in p for p in problems)
    assert any(p.startswith("m.n[1]: ") and "finite" in p for p in problems)
    assert any(p.startswith("m.z: ") and "NUL" in p for p in problems)
    assert any(p.startswith("inf: ") for p in problems)
    assert any(p.startswith("spec: a key") for p in problems)


def test_any_depth_is_reported_without_exhausting_the_stack():
    problems = storable_problems(_nested(200_000))
    assert problems == ["a" + ".a" * (MAX_DEPTH - 1) + f": nested deeper than {MAX_DEPTH} levels"]


def test_problems_are_capped():
    assert len(storable_problems({"x": [float("nan")] * 1000})) == MAX_PROBLEMS
