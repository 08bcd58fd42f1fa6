"""A tests-only Django project, a shop whose orders are paid under a lock, served by gunicorn on
a real PostgreSQL or MariaDB: it exists to prove that a lock handed on after COMMIT prevents a
double charge (tests/core/test_transactions_databases.py, benchmarks/bench_transactions.py)."""
