from django.urls import path

from . import views

urlpatterns = [
    path("health/", views.health),
    path("process/", views.process),
    path("pay/<str:order_id>/", views.pay),
    path("apay/<str:order_id>/", views.apay),
    path("queued/<str:order_id>/", views.queued_pay),
    path("limited/<str:order_id>/", views.limited_pay),
    path("limited-queued/<str:order_id>/", views.limited_queued_pay),
    path("bench/plain/<str:order_id>/", views.plain),
    path("bench/locked/<str:order_id>/", views.locked),
    path("bench/aplain/<str:order_id>/", views.aplain),
    path("bench/alocked/<str:order_id>/", views.alocked),
    path("bench/raw/", views.raw),
    path("bench/araw/", views.araw),
]
