"""A tests-only Django project served by a real server process (uvicorn, gunicorn workers:
devkit/live_server_process.py): it exists for the tests that need requests served by
other processes than the test's, which pytest-django's live_server thread cannot give."""
