"""Property-based tests of names, prefixes and the keys built from them (beyond those in
tests/core/test_names.py): the accept/reject decision matches the documented rule for any text,
encoding is reversible, any valid KEY_PREFIX keeps the layout, and on a real server any two
names are two locks."""

from __future__ import annotations

import re
import unicodedata
from urllib.parse import unquote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import distlock
from distlock import InvalidLockBackendError, InvalidLockName
from distlock.backends.settings import _parse_prefix
from distlock.handler import locks
from distlock.keys import MAX_NAME_LENGTH, KeyLayout, encode_name, validate_name

# The documented rule: 1 to 1024 characters, none of them a control character (Cc), a lone
# surrogate (Cs), or a line or paragraph separator (Zl, Zp).
REFUSED_CATEGORIES = {"Cc", "Cs", "Zl", "Zp"}
any_text = st.text(alphabet=st.characters(), max_size=MAX_NAME_LENGTH + 20)
long_text = st.text(alphabet=st.characters(), min_size=1000, max_size=MAX_NAME_LENGTH + 20)
valid_names = st.text(
    alphabet=st.characters(blacklist_categories=tuple(REFUSED_CATEGORIES)),
    min_size=1,
    max_size=60,
)
# Characters that mean something in keys, patterns or URLs, to make collisions likely.
tricky_names = st.text(alphabet="{}*?[]:%/\\ab ", min_size=1, max_size=12)
KEY_CHARACTERS = re.compile(r"[A-Za-z0-9%\-._~:/@+=,]*")


def follows_the_rule(name: str) -> bool:
    return 1 <= len(name) <= MAX_NAME_LENGTH and not any(
        unicodedata.category(char) in REFUSED_CATEGORIES for char in name
    )


@given(st.one_of(any_text, long_text))
def test_a_name_is_accepted_exactly_when_it_follows_the_documented_rule(name: str) -> None:
    if follows_the_rule(name):
        assert validate_name(name) == name
    else:
        with pytest.raises(InvalidLockName) as caught:
            validate_name(name)
        assert isinstance(caught.value, ValueError)  # catchable as a plain bad value
        assert len(str(caught.value)) < 1200  # quotes at most 80 characters of the name


@given(valid_names)
def test_encoding_is_reversible_so_two_names_never_share_a_key(name: str) -> None:
    encoded = encode_name(name)
    assert KEY_CHARACTERS.fullmatch(encoded)
    assert unquote(encoded, errors="strict") == name


@given(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30),
    valid_names,
)
def test_any_accepted_prefix_keeps_the_layout(prefix: str, name: str) -> None:
    try:
        prefix = _parse_prefix("default", prefix)
    except InvalidLockBackendError as exc:
        assert exc.check_id == "distlock.E008"
        assert re.search(r"[{}\s*?\[\]\x00-\x1f\x7f]", prefix)
        return
    keys = KeyLayout(prefix).keys_for(name)
    for key in keys:  # every key of the lock, the bucket's indexes included
        assert key.startswith(prefix + ":{b")
        assert key.count("{") == 1 and key.count("}") == 1  # one hash tag: the bucket's


@pytest.mark.django_db(databases=[])
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(first=st.one_of(tricky_names, valid_names), second=st.one_of(tricky_names, valid_names))
def test_on_a_real_server_two_names_are_two_locks(redis_backend, first, second) -> None:
    backend = locks["default"]
    a = distlock.lock(first, ttl=10)
    b = distlock.lock(second, ttl=10)
    try:
        assert a.acquire(wait=0)
        assert backend.info(first).name == first
        assert [info.name for info in backend.held(prefix=first)] == [first]
        if first != second:
            assert b.acquire(wait=0), f"{second!r} was blocked by {first!r}"
            assert backend.info(second).token == b.token
            assert backend.count() == 2
        else:
            assert not b.acquire(wait=0)
    finally:
        for lk in (a, b):
            if lk.token:
                lk.release()
    assert backend.count() == 0
