"""Fixtures of the task tests: the Celery workers and test tasks of test_celery.py and
test_celery_adversary.py (each module gets workers of its own: ``workers`` is module-scoped).
test_django_tasks.py has a ``workers`` fixture of its own (django.tasks' db_worker)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from devkit.configs import distlock_settings
from devkit.worker_pool import running
from distlock.handler import locks
from tests.support.celery_workers import Workers


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workers]:
    with running(Workers, tmp_path_factory.mktemp("celery")) as pool:
        yield pool


@pytest.fixture
def tasks(workers: Workers, settings: Any) -> Iterator[Any]:
    """The test tasks, sent to the workers' broker; DISTLOCK points at their lock server."""
    from tests.support import celery_app

    url = workers.env["DISTLOCK_TEST_URL"]
    settings.DISTLOCK, settings.CACHES = distlock_settings("redis", url)
    locks.reset()
    workers.server.flushall()
    previous = dict(celery_app.app.conf)
    celery_app.app.conf.update(
        broker_url=workers.env["DISTLOCK_TEST_BROKER"],
        result_backend=workers.env["DISTLOCK_TEST_BROKER"],
    )
    yield celery_app
    workers.wait_for_checks()  # none may run into the next test
    celery_app.app.conf.update(
        broker_url=previous["broker_url"], result_backend=previous["result_backend"]
    )
    forget_connections(celery_app.app)
    locks.reset()


def forget_connections(app: Any) -> None:
    """Drop the app's result backend and broker connections, which Celery keeps once made:
    the workers of another test module have a broker of their own, and a result consumer
    still subscribed to a stopped server never recovers. (Celery has no public way to; these
    are where its app keeps them.)"""
    app._backend_cache = None
    vars(app._local).pop("backend", None)
    app._pool = None
    app.amqp._producer_pool = None
