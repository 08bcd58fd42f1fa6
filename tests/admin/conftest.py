"""Fixtures of the admin's tests."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client


@pytest.fixture
def staff(django_user_model: Any) -> Any:
    """Return a logged-in client for a staff user with the given distlock permissions."""

    def login(*codenames: str, client: Client | None = None) -> Client:
        user = django_user_model.objects.create_user(
            f"staff-{'-'.join(codenames) or 'none'}", password="pw", is_staff=True
        )
        user.user_permissions.set(
            Permission.objects.filter(content_type__app_label="distlock", codename__in=codenames)
        )
        client = client or Client()
        client.force_login(user)
        return client

    return login
