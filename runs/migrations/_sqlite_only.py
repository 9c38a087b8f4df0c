"""A migration operation whose state change applies everywhere but whose schema change runs on SQLite only.

For the history layout (runs/0005, dlq/0002): the indexes that SQLite's
batched retention needs are in the models' state, but PostgreSQL gets none:
its history is partitioned by the same column (runs/0006).
"""

from django.db.migrations.operations.base import Operation


class OnSQLite(Operation):
    reversible = True

    def __init__(self, operation):
        self.operation = operation

    def deconstruct(self):
        return (self.__class__.__name__, [self.operation], {})

    def state_forwards(self, app_label, state):
        self.operation.state_forwards(app_label, state)

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "sqlite":
            self.operation.database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "sqlite":
            self.operation.database_backwards(app_label, schema_editor, from_state, to_state)

    def describe(self):
        return f"{self.operation.describe()} (SQLite only)"
