"""``python -m tests.support.tasks_cli enqueue TASK KEY SECONDS COUNT``: enqueue a task of
tests.support.tasks COUNT times and print the result ids (a JSON list);
``... results ID...``: wait until those results are finished and print their return
values (a JSON list), following retries ("retried_as")."""

from __future__ import annotations

import json
import os
import sys
import time


def enqueue(task_name: str, key: str, seconds: str, count: str) -> None:
    from tests.support import tasks as django_tasks

    task = getattr(django_tasks, task_name)
    print(json.dumps([task.enqueue(key, float(seconds)).id for _ in range(int(count))]))


def results(*ids: str) -> None:
    from tests.support import tasks as django_tasks

    print(json.dumps([_final(django_tasks.report, result_id) for result_id in ids]))


def _final(task: object, result_id: str) -> object:
    from django.tasks import default_task_backend

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        result = default_task_backend.get_result(result_id)
        if result.is_finished:
            value = result.return_value
            if isinstance(value, dict) and "retried_as" in value:
                return [value, _final(task, value["retried_as"])]
            return value
        time.sleep(0.1)
    raise SystemExit(f"task result {result_id} not finished within 60s")


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.support.tasks_settings")
    import django

    django.setup()
    command, *arguments = sys.argv[1:]
    {"enqueue": enqueue, "results": results}[command](*arguments)
