"""The old import path of the lock name helpers, kept working: they live in distlock.naming
(``from distlock.naming import escape``)."""
from .naming import DIGEST_MARK, compile_template, digest, escape

__all__ = ["DIGEST_MARK", "compile_template", "digest", "escape"]
