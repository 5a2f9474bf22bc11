"""The migration operations that hand the test gateway's tables from ``subscriptions`` over to
this app without moving a row.

The tables were made by ``subscriptions``' own migrations (0001, 0005, 0006) and keep their
names (``db_table``). ``subscriptions`` 0010 drops the models from its own state and leaves the
tables; this app's 0001 takes them into its state, creating a table only where none is there
(a database whose host dropped the orphans before adding this app). Content types follow, so
the permissions given on the test gateway's pages stay with them.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import ProjectState, StateApps

#: The models whose tables and content types move, by model name.
MOVED = ("gatewaycharge", "gatewaydecline", "gatewayscript")
OLD_LABEL = "subscriptions"
NEW_LABEL = "subscriptions_testgateway"


class CreateModelUnlessTableExists(migrations.CreateModel):
    """``CreateModel`` into the state; in the database, only when its table is not there yet.

    Backwards it keeps the table, rows and all: unapplying hands the model back to
    ``subscriptions`` (whose 0010, unapplied, takes it into its state again), and a host that
    wants the tables gone drops them itself (docs/install.md)."""

    def database_forwards(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        from_state: ProjectState,
        to_state: ProjectState,
    ) -> None:
        model = to_state.apps.get_model(app_label, self.name)
        if model._meta.db_table in schema_editor.connection.introspection.table_names():
            return
        super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        from_state: ProjectState,
        to_state: ProjectState,
    ) -> None:
        return

    def describe(self) -> str:
        return f"Create model {self.name}, or take over its existing table"


def move_content_types(old: str, new: str) -> Any:
    """A ``RunPython`` function that relabels the moved models' content types from ``old`` to
    ``new`` (where the new one does not exist yet), keeping their permissions' grants."""

    def move(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
        try:
            content_type = apps.get_model("contenttypes", "ContentType")
        except LookupError:  # a host without django.contrib.contenttypes
            return
        rows = content_type.objects.using(schema_editor.connection.alias)
        for model in MOVED:
            if not rows.filter(app_label=new, model=model).exists():
                rows.filter(app_label=old, model=model).update(app_label=new)

    return move
