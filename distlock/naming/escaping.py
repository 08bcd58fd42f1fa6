"""Escaping of values put into lock names, so that a value can never reshape a name.

Each value is percent-encoded, keeping only the characters URLs leave alone (``A-Z a-z 0-9 -
. _ ~``), so it never contains a template's separators; a value too long to keep is replaced
by ``%%`` and its SHA-256, a form no escaped value can take. Used for request values
(``@lock_view``) and option values (``LockedCommandMixin.lock_name``) alike.
"""

from __future__ import annotations

import hashlib
import re
from urllib.parse import quote

__all__ = ["DIGEST_LENGTH", "DIGEST_MARK", "VALUE_CHARACTERS", "digest", "escape"]

# What a value (as escaped here) is made of. A separator between two fields must contain a
# character outside this set, or two different pairs of values could give the same name.
VALUE_CHARACTERS = re.compile(r"[A-Za-z0-9._~%-]*")
# A digested value: "%%" never occurs in an escaped value (a "%" there always starts "%XX").
DIGEST_MARK = "%%"
DIGEST_LENGTH = len(DIGEST_MARK) + 64
_UNRESERVED = re.compile(r"[A-Za-z0-9._~-]*\Z")


def escape(value: object) -> str:
    """Return ``str(value)`` percent-encoded so it cannot contain a separator."""
    text = str(value)
    if _UNRESERVED.match(text):  # the common case (ids, slugs): nothing to encode
        return text
    return quote(text, safe="", errors="surrogatepass")


def digest(value: str) -> str:
    """Return the fixed-length stand-in for a value too long to keep."""
    data = value.encode("utf-8", "surrogatepass")
    return DIGEST_MARK + hashlib.sha256(data).hexdigest()
