"""Lock names: validation, and keys that user text can never reshape."""

from __future__ import annotations

import math
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import distlock
from distlock import InvalidLockName
from distlock.keys import BUCKETS, SAFE_CHARACTERS, KeyLayout, encode_name, validate_name

printable = st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), min_size=1, max_size=200
)


@pytest.mark.parametrize(
    "name", ["", "x" * 1025, "a\nb", "tab\there", "nul\x00", "del\x7f", "line\u2028sep"]
)
def test_bad_names_raise_invalid_lock_name(name: str) -> None:
    with pytest.raises(InvalidLockName):
        distlock.lock(name)


def test_invalid_lock_name_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        validate_name("")


@pytest.mark.parametrize("name", [None, 5, b"bytes"])
def test_non_string_names_raise_type_error(name: object) -> None:
    with pytest.raises(TypeError):
        distlock.lock(name)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "name",
    [
        "x" * 1024,
        "with spaces",
        "{tag}",
        "*?[]",
        "a/b:c",
        "ключ 🔒",
        "zwj 👩\u200d💻",
        "nbsp\u00a0",
    ],
)
def test_good_names_are_accepted(name: str) -> None:
    assert distlock.lock(name).name == name


# A table of cases, each row one argument, one bad value and its error (duplicates pairs its
# rows by shape: data).
@pytest.mark.parametrize(
    ("argument", "value", "error"),
    [
        ("ttl", 0, ValueError),
        ("ttl", -1, ValueError),
        ("ttl", math.nan, ValueError),
        ("ttl", math.inf, ValueError),
        ("ttl", True, TypeError),
        ("ttl", "5", TypeError),
        ("ttl", 0.0001, ValueError),
        ("wait", -1, ValueError),
        ("wait", math.nan, ValueError),
        ("wait", math.inf, ValueError),
        ("wait", False, TypeError),
        ("wait", "1", TypeError),
        ("auto_renew", 1, TypeError),
        ("reentrant", "yes", TypeError),
        ("on_lost", "not callable", TypeError),
        ("using", 1, TypeError),
        ("purpose", 1, TypeError),
    ],
)
def test_bad_arguments_fail_when_the_lock_is_made(
    argument: str, value: object, error: type[Exception]
) -> None:
    with pytest.raises(error, match=argument):
        distlock.lock("x", **{argument: value})


def test_wait_zero_and_none_are_valid() -> None:
    assert distlock.lock("x", wait=0).wait == 0
    assert distlock.lock("x", wait=None).wait is None


@given(printable, printable)
@settings(deadline=None)  # hypothesis's 200 ms per example would fail a loaded machine
def test_distinct_names_never_share_a_key(first: str, second: str) -> None:
    layout = KeyLayout("p")
    if first != second:
        assert layout.keys_for(first).lock != layout.keys_for(second).lock


@given(printable)
@settings(deadline=None)  # hypothesis's 200 ms per example would fail a loaded machine
def test_keys_keep_their_structure(name: str) -> None:
    keys = KeyLayout("myapp:locks").keys_for(name)
    for key in keys:  # every key of the lock, the bucket's indexes included
        assert key.startswith("myapp:locks:{b")
        # exactly one hash tag, and it is the bucket's: user text cannot move the slot
        assert key.count("{") == 1 and key.count("}") == 1
        tag = key[key.index("{") + 1 : key.index("}")]
        assert tag == keys.index.split("{")[1].split("}")[0]
        assert not any(char in key for char in "*?[]\n\r \\")
    encoded = encode_name(name)
    assert keys.lock.endswith(":lock:" + encoded)


@given(printable)
@settings(deadline=None)
def test_a_name_is_encoded_as_quote_encodes_it(name: str) -> None:
    # encode_name's fast paths (plain names as they are, ASCII names by one translate)
    # give the keys every client computes (devkit/vectors.py, clients/): quote()'s.
    assert encode_name(name) == quote(name, safe=SAFE_CHARACTERS)


@pytest.mark.parametrize("code", range(128))
def test_every_ascii_character_is_encoded_as_quote_encodes_it(code: int) -> None:
    name = f"a{chr(code)}b"
    assert encode_name(name) == quote(name, safe=SAFE_CHARACTERS)


@given(printable)
@settings(deadline=None)
def test_the_encoded_keys_of_a_name_are_its_keys_encoded(name: str) -> None:
    # _encoded_keys_for spells the keys again rather than read keys_for: they must agree.
    layout = KeyLayout("myapp:locks:\u00e9")
    keys, encoded = layout.keys_for(name), layout.encoded_keys_for(name)
    assert encoded.acquire == tuple(
        key.encode() for key in (keys.lock, keys.fence, keys.waiters, keys.live, keys.index)
    )
    assert encoded.release == tuple(
        key.encode() for key in (keys.lock, keys.waiters, keys.live, keys.index)
    )


def test_buckets_spread_names() -> None:
    layout = KeyLayout("p")
    used = {layout.keys_for(f"order:{n}").index for n in range(20 * BUCKETS)}
    assert len(used) == BUCKETS
