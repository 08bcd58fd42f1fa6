"""Tests of LockedCommandMixin and manage.py distlock (list, lead, ...)."""
