"""What only the tests use and are not tests: the worker processes they start (workers,
shared_workers, semaphore_workers, the Celery and django.tasks apps), the settings of those
children, and measurements several test modules share. The servers, processes, proxy and
Django projects that benchmarks and scripts use too are in ``devkit``."""
