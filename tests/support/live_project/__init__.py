"""A tests-only Django project served by a real server process
(tests/support/live_server_process.py)."""
