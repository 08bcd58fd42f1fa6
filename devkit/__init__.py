"""The development infrastructure of distlock, which tests, benchmarks and scripts import: the
servers they start (redis-server, Redis Cluster and Sentinel, PostgreSQL, MariaDB, an HTTP
server process), the processes they start (``processes``: one place builds a child's
environment), the TCP proxy that injects network faults, the pytest plugins and session
fixtures, the generators of docs/protocol.md's scripts section and of vectors.json, and the
Django projects they run (``settings`` + ``urls``, ``shop``, ``live_project``,
``fencingapp``). It is not part of distlock: setup.cfg leaves it out of the wheel and the
sdist. It imports nothing of ``tests`` (tests/tooling/test_layout.py); what only tests use
stays in ``tests/support``."""
