"""Lock names filled from outside values: escaped, distinct, never too long."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distlock.keys import MAX_NAME_LENGTH, validate_name
from distlock.naming import DIGEST_MARK, fill_template, template_fields


def test_values_are_percent_encoded():
    filled = fill_template("digest:{tenant}", {"tenant": "a:b/{c} d%#"})
    assert filled == "digest:a%3Ab%2F%7Bc%7D%20d%25%23"
    assert fill_template("job", {}) == "job"
    assert fill_template("{a}/{b}", {"a": 1, "b": None}) == "1/None"
    with pytest.raises(ValueError, match="separator"):
        fill_template("{a}-{b}", {"a": 1, "b": 2})  # "1-2" could also be a="1-", b="2"


def test_too_long_values_are_replaced_by_a_digest():
    name = fill_template("job:{x}", {"x": "y" * 5000})
    assert len(name) <= MAX_NAME_LENGTH
    assert name.startswith("job:" + DIGEST_MARK)
    assert name != fill_template("job:{x}", {"x": "y" * 5001})
    # A value crafted to look like that digested name is escaped, so it names another lock.
    assert fill_template("job:{x}", {"x": name[len("job:") :]}) != name


def test_only_plain_fields():
    assert template_fields("a:{tenant}:{day}") == ["tenant", "day"]
    for bad in ("{0}", "{a.b}", "{a[0]}", "{a!r}", "{a:>5}"):
        with pytest.raises(ValueError):
            template_fields(bad)


def test_missing_value_and_bad_template():
    with pytest.raises(KeyError, match="tenant"):
        fill_template("x:{tenant}", {})
    with pytest.raises(ValueError, match="control character"):
        fill_template("bad\nname:{x}", {"x": 1})


@given(st.text(), st.text(), st.text(), st.text())
@settings(deadline=None)  # hypothesis's 200 ms per example would fail a loaded machine
def test_any_values_give_a_valid_name_and_different_values_different_names(
    a: str, b: str, c: str, d: str
):
    first = fill_template("t:{a}:{b}", {"a": a, "b": b})
    assert validate_name(first) == first
    assert first.count(":") == 2, "a value never adds a separator"
    for other in ((b, a), (c, d), (a + ":" + b, ""), ("", a + ":" + b)):
        if other != (a, b):
            assert first != fill_template("t:{a}:{b}", {"a": other[0], "b": other[1]})
