"""What the tests use and are not tests: servers (Redis, PostgreSQL, MariaDB, HTTP), proxies,
settings, worker processes and the Django apps and projects the tests run."""
