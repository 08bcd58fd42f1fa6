"""A tests-only Django app: a guarded resource whose writes are fenced (distlock.fencing)."""
