from django.db import migrations, models


class Migration(migrations.Migration):
    """The table of fences (fence=True): the newest fencing token claimed per lock name."""

    dependencies = [("distlock", "0001_initial")]

    operations = [
        migrations.CreateModel(
            name="Fence",
            fields=[
                ("digest", models.CharField(max_length=64, primary_key=True, serialize=False)),
                ("name", models.TextField()),
                ("token", models.BigIntegerField()),
                ("claims", models.BigIntegerField(default=1)),
            ],
            options={
                "db_table": "distlock_fence",
                "verbose_name": "fence",
                "verbose_name_plural": "fences",
                "default_permissions": (),
            },
        ),
    ]
