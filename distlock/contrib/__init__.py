"""Integrations with task queues: Celery (``distlock.contrib.celery``) and Django's Tasks
framework (``distlock.contrib.tasks``). Each imports its framework only when imported."""
