"""Without opentelemetry-api (the otel extra), distlock imports no OpenTelemetry module and
its locks and semaphores work: checked in a process where every opentelemetry import fails,
so it runs whether or not the package is installed here."""

from __future__ import annotations

from devkit.processes import child_env, run_python

NO_OTEL = """
import sys

class Missing:  # what an environment without the otel extra looks like to an import
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None

sys.meta_path.insert(0, Missing())
import django
from django.conf import settings
settings.configure(
    INSTALLED_APPS=["distlock"],
    DISTLOCK={"default": {"BACKEND": "distlock.backends.locmem.LocMemBackend"}},
    USE_TZ=True,
)
django.setup()
import distlock
from distlock import metrics
with distlock.lock("pay:1", ttl=5, metric_name="pay:{id}") as lock:
    assert lock.owned()
with distlock.semaphore("pool", 2, ttl=5):
    pass
assert not metrics.ENABLED
loaded = sorted(name for name in sys.modules if name.split(".")[0] == "opentelemetry")
assert not loaded, loaded
print("ok")
"""


def test_without_opentelemetry_nothing_is_imported_and_locks_work() -> None:
    env = child_env()
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = run_python(NO_OTEL, env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
