"""Tests of @lock_view."""
