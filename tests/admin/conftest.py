"""Fixtures of the admin's tests."""

from __future__ import annotations

from collections.abc import Callable
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


@pytest.fixture
def log_in(page: Any, live_server: Any, django_user_model: Any) -> Callable[[str], None]:
    """``log_in(path)``: make the superuser "operator" and log ``page`` in as them through the
    admin's login form, which then opens ``path``."""

    def log_in(path: str) -> None:
        django_user_model.objects.create_superuser("operator", password="operator-pw")
        page.goto(f"{live_server.url}/admin/login/?next={path}")
        page.fill("#id_username", "operator")
        page.fill("#id_password", "operator-pw")
        page.click("input[type=submit]")

    return log_in
