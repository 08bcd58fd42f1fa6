"""Key safety of @lock_view names: request data can never reshape a name, collide, or make it
invalid (acceptance 3 of issue 3)."""

from __future__ import annotations

import pytest
import redis
from django.http import HttpResponse
from hypothesis import given, settings
from hypothesis import strategies as st

import distlock
from distlock import lock_view
from distlock.keys import MAX_NAME_LENGTH, KeyLayout, validate_name
from distlock.naming import compile_template

pytestmark = pytest.mark.django_db(databases=[])

NASTY = [
    "{}",
    "{order_id}",
    "*",
    "?",
    "[",
    "]",
    ":",
    "a:b",
    "\n",
    "line\r\nbreak",
    "\x00",
    "%",
    "%3A",
    "%%",
    "x" * 10_240,
    "ключ 🔒",
    "zwj 👩\u200d💻",
    "\u2028",
    "/",
    " ",
    "",
    "user5",
    "{b01}",
    "\ud800",
]
# Any text, including control characters, lone surrogates and values long enough to digest.
values = st.one_of(
    st.text(alphabet=st.characters(blacklist_categories=()), max_size=40),
    st.text(max_size=1500),
    st.sampled_from(NASTY),
)


def render(template: str, **kwargs: object) -> str:
    return compile_template(template).render(None, (), kwargs, "test")


@pytest.mark.parametrize("value", NASTY)
def test_every_nasty_value_gives_a_valid_name_that_keeps_its_structure(value: str) -> None:
    name = render("pay:{order_id}:x", order_id=value)
    assert validate_name(name) == name
    assert name.startswith("pay:") and name.endswith(":x") and name.count(":") == 2
    assert len(name) <= MAX_NAME_LENGTH
    keys = KeyLayout("myapp").keys_for(name)
    assert keys.lock.count("{") == 1 and keys.lock.count("}") == 1
    assert not any(char in keys.lock for char in "*?[]\n\r ")


def test_nasty_values_give_distinct_names() -> None:
    names = {render("pay:{order_id}", order_id=value) for value in NASTY}
    assert len(names) == len(NASTY)


@settings(max_examples=300, deadline=None)
@given(values, values, values, values)
def test_different_values_never_share_a_name(a1: str, b1: str, a2: str, b2: str) -> None:
    template = "pay:{a}:{b}"
    first, second = render(template, a=a1, b=b1), render(template, a=a2, b=b2)
    assert validate_name(first) == first and len(first) <= MAX_NAME_LENGTH
    if (a1, b1) != (a2, b2):
        assert first != second


@settings(max_examples=200, deadline=None)
@given(values, values)
def test_single_field_names_are_injective(first: str, second: str) -> None:
    if first != second:
        assert render("{v}", v=first) != render("{v}", v=second)


def test_a_long_name_keeps_its_short_values_readable() -> None:
    name = render("pay:{a}:{b}", a="x" * 5000, b="42")
    assert name.startswith("pay:%%") and name.endswith(":42") and len(name) == 4 + 66 + 3


@pytest.mark.parametrize(("length", "digested"), [(67, 0), (68, 15)])
def test_values_are_digested_only_when_the_name_would_be_too_long(
    length: int, digested: int
) -> None:
    template = ":".join(f"{{v{i}}}" for i in range(15))  # 15 x 67 + 14 fits, 15 x 68 + 14 not
    name = render(template, **{f"v{i}": "y" * length for i in range(15)})
    assert len(name) <= MAX_NAME_LENGTH and name.count("%%") == digested


def test_empty_value_alone_still_names_a_lock() -> None:
    assert validate_name(render("{v}", v="")) != render("{v}", v="x")


def test_a_template_too_long_for_any_value_fails_at_decoration() -> None:
    with pytest.raises(ValueError, match="too long"):
        lock_view("x" * 1000 + "{a}")


def test_real_locks_on_nasty_values_use_distinct_keys(rf, redis_backend: str) -> None:
    """Through the view and the real server: each request value gets its own Redis key."""
    server = redis.Redis.from_url(redis_backend)
    keys_seen: list[set[bytes]] = []

    @lock_view("pay:{order_id}", ttl=5)
    def view(request, order_id):
        keys_seen.append(set(server.scan_iter(match="test:*:lock:*")))
        return HttpResponse()

    for value in NASTY:
        assert view(rf.post("/"), order_id=value).status_code == 200
    assert all(len(keys) == 1 for keys in keys_seen)
    lock_keys = [next(iter(keys)) for keys in keys_seen]
    assert len(set(lock_keys)) == len(NASTY)
    for key in lock_keys:
        assert key.startswith(b"test:{b") and key.count(b"{") == 1 and b"\n" not in key
    assert distlock.locks["default"].held() == []
