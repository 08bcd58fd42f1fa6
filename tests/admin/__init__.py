"""Tests of the "Held locks" admin page."""
