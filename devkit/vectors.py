"""The protocol's test vectors: distlock/backends/redis_ops/lua/vectors.json, beside the scripts,
for every client to check itself against (docs/protocol.md, "Test vectors").

The file holds, for awkward names under two prefixes, each step of the key derivation (the
name's UTF-8 bytes, its CRC-32, bucket, hash tag and Cluster slot, its encoding) and every key
a client builds from it; and the SHA1 of every script as EVALSHA names it (its ``#include``
lines expanded). The Python tests (tests/tooling/test_vectors.py) and the Node.js client's
(clients/node/test/vectors.test.mjs) both compare their code with it::

    python -m devkit.vectors check [FILE]   # exit 1, naming each mismatch
    python -m devkit.vectors write          # rewrite the file from the code
"""

from __future__ import annotations

import json
import sys
import zlib
from pathlib import Path
from typing import Any

from redis.crc import key_slot

from distlock.backends.base import _check_token, could_hold
from distlock.backends.redis_ops.scripts import LUA, load
from distlock.backends.settings import _parse_prefix as parse_prefix
from distlock.exceptions import InvalidLockBackendError, InvalidLockName
from distlock.keys import (
    ABOUT_WAITERS,
    BUCKETS,
    LAYOUT_VERSION,
    KeyLayout,
    encode_name,
    validate_name,
)
from distlock.validation import lease_milliseconds

FILE = Path(str(LUA)) / "vectors.json"
PREFIXES = ["distlock", "myproject:locks"]
# A waiter's token, to show the name of its wake-up list.
TOKEN = "0123456789abcdef0123456789abcdef"
NAMES = [
    "a",
    "reports:daily",
    "order {42}",
    "{b0001}",
    "}{",
    "a|about",
    "pipe|and:colon",
    "  spaces  around  ",
    "é/ü:*()!'~@+=,;% x",
    "日本語 🔒",
    "\uff46\uff55\uff4c\uff4c width",  # full-width letters
    "%41 is not A",
    "~tilde-start",
]
# The longest names (1024 code points), under the first prefix only (they make the file big).
LONG_NAMES = ["x" * 1024, "é" * 1023 + "🔒", "🔒" * 1024]


# What a client MUST refuse before it sends anything (docs/protocol.md): each value with the
# rule it breaks. build() checks that distlock's own code refuses every one of them.
REFUSED_NAMES = [
    ("", "empty"),
    ("x" * 1025, "1025 code points"),
    ("a\x00b", "U+0000, a control character"),
    ("tab\there", "U+0009, a control character"),
    ("line\nfeed", "U+000A, a control character"),
    ("del\x7f", "U+007F, a control character"),
    ("next\x85line", "U+0085, a C1 control character"),
    ("c1\x9f", "U+009F, a C1 control character"),
    ("line\u2028separator", "U+2028, the line separator"),
    ("paragraph\u2029separator", "U+2029, the paragraph separator"),
]
REFUSED_PREFIXES = [
    ("", "empty"),
    ("a{b", "a brace"),
    ("a}b", "a brace"),
    ("{}", "braces"),
    ("my locks", "U+0020, white space"),
    ("tab\t", "U+0009, white space"),
    ("nbsp\u00a0", "U+00A0, white space"),
    ("ideographic\u3000space", "U+3000, white space"),
    ("nel\x85", "U+0085, white space"),
    ("unit\x1fseparator", "U+001F, a control character"),
    ("nul\x00", "U+0000, a control character"),
    ("del\x7f", "U+007F, a control character"),
    ("star*", "a wildcard"),
    ("what?", "a wildcard"),
    ("[range]", "a wildcard"),
]
# Taken: not white space by the protocol's one definition (Python's str.isspace()).
ACCEPTED_PREFIXES = [
    "distlock",
    "myproject:locks",
    "app-1.locks/v2",
    "verrou:é",
    "zero\u200bwidth",
    "bom\ufeff",
]
REFUSED_LEASES_MS = [0, -1, 315360000001]  # 1 <= LEASE <= 315360000000 (10 years)
ACCEPTED_LEASES_MS = [3, 315360000000]  # 1 and 2 are never held: a client MAY refuse them
# Presented to release or extend: empty, a space, a leading "=" (a reservation's form).
REFUSED_TOKENS = ["", "0123456789abcdef 0123456789abcdef", "=0123456789abcdef0123456789abcdef"]


def refused() -> dict[str, Any]:
    """The negative vectors, each checked against distlock's own code first."""
    for name, _ in REFUSED_NAMES:
        assert refuses(validate_name, name), name
    for prefix, _ in REFUSED_PREFIXES:
        assert refuses(parse_prefix, "default", prefix), prefix
    for prefix in ACCEPTED_PREFIXES:
        assert not refuses(parse_prefix, "default", prefix), prefix
    for lease in REFUSED_LEASES_MS:
        assert refuses(lease_milliseconds, "ttl", lease / 1000), lease
    for token in REFUSED_TOKENS:
        assert refuses(check_token, token), token
    return {
        "about": "what a client MUST refuse before sending (docs/protocol.md, 'Test vectors')",
        "names": [{"name": name, "why": why} for name, why in REFUSED_NAMES],
        "prefixes": [{"prefix": prefix, "why": why} for prefix, why in REFUSED_PREFIXES],
        "accepted_prefixes": ACCEPTED_PREFIXES,
        "leases_ms": REFUSED_LEASES_MS,
        "accepted_leases_ms": ACCEPTED_LEASES_MS,
        "tokens": REFUSED_TOKENS,
    }


def check_token(token: str) -> None:
    """Raise as distlock does for a token no holder can have (force_release sends none)."""
    _check_token(token)
    if not could_hold(token):
        raise ValueError(f"no holder's token: {token!r}")


def refuses(check: Any, *args: Any) -> bool:
    try:
        check(*args)
    except (ValueError, TypeError, InvalidLockName, InvalidLockBackendError):
        return True
    return False


def lock_keys(layout: KeyLayout, name: str) -> dict[str, str]:
    """Every key of lock ``name``: the exclusive ones, the shared ones, a semaphore's."""
    k, s, m = layout.keys_for(name), layout.shared_keys_for(name), layout.semaphore_keys_for(name)
    return {
        "lock": k.lock,
        "fence": k.fence,
        "wait": k.waiters,
        "live": k.live,
        "held": k.index,
        "about": k.waiters + ABOUT_WAITERS,
        "wake": f"{k.waiters}:{TOKEN}",
        "signal": k.signal,
        "readers": s.readers,
        "rmeta": s.holders,
        "shheld": s.index,
        "sem_holders": m.holders,
        "sem_state": m.state,
        "sem_queue": m.queue,
        "sem_patience": m.patience,
        "sem_reserved": m.reserved,
        "sem_wake": m.signal_prefix + TOKEN,
        "semheld": m.index,
    }


def derivation(prefix: str, name: str) -> dict[str, Any]:
    data = name.encode("utf-8")
    crc = zlib.crc32(data)
    keys = lock_keys(KeyLayout(prefix), name)
    tag = keys["lock"].split("{", 1)[1].split("}", 1)[0]
    return {
        "prefix": prefix,
        "name": name,
        "code_points": len(name),
        "utf8_hex": data.hex(),
        "crc32": crc,
        "bucket": crc % BUCKETS,
        "hash_tag": tag,
        "slot": key_slot(keys["lock"].encode()),
        "encoded": encode_name(name),
        "keys": keys,
    }


def build() -> dict[str, Any]:
    """Return the vectors as the code computes them now."""
    scripts = sorted(path.stem for path in Path(str(LUA)).glob("*.lua"))
    return {
        "about": "distlock protocol test vectors (docs/protocol.md, 'Test vectors'); "
        "generated by python -m devkit.vectors write",
        "layout_version": LAYOUT_VERSION,
        "token": TOKEN,
        "names": [derivation(prefix, name) for prefix in PREFIXES for name in NAMES]
        + [derivation(PREFIXES[0], name) for name in LONG_NAMES],
        "scripts": {name: load(name).sha for name in scripts},
        "refuse": refused(),
    }


def read(path: Path = FILE) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


def mismatches(found: dict[str, Any], expected: dict[str, Any], where: str = "") -> list[str]:
    """Return one line per value of ``found`` that differs from ``expected``."""
    if isinstance(found, dict) and isinstance(expected, dict):
        lines = []
        for key in sorted(set(found) | set(expected)):
            if key not in expected or key not in found:
                lines.append(f"{where}/{key}: only in {'the file' if key in found else 'code'}")
            else:
                lines += mismatches(found[key], expected[key], f"{where}/{key}")
        return lines
    if isinstance(found, list) and isinstance(expected, list):
        if len(found) != len(expected):
            return [f"{where}: {len(found)} entries in the file, {len(expected)} from the code"]
        return [
            line
            for i, (a, b) in enumerate(zip(found, expected, strict=True))
            for line in mismatches(a, b, f"{where}[{i}]")
        ]
    return [] if found == expected else [f"{where}: file {found!r}, code {expected!r}"]


def main(argv: list[str]) -> int:
    command, *rest = argv or ["check"]
    if command == "write":
        FILE.write_text(json.dumps(build(), indent=1, ensure_ascii=False) + "\n", "utf-8")
        return 0
    path = Path(rest[0]) if rest else FILE
    problems = mismatches(read(path), build())
    for line in problems:
        print(f"{path}: {line}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
