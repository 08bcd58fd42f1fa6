"""Tests of the task integrations (Celery, django.tasks) and leader election."""
