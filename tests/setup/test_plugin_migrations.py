"""Each plugin migrates with its own version table: disabling one or breaking an extension's never blocks the host."""
from pathlib import Path

from sqlalchemy import inspect

from core.plugins import write_disabled
from hookspecs import hookimpl
from tests.conftest import HEADERS


def _migration(folder, revision, body):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{revision}.py").write_text(
        f'revision = "{revision}"\ndown_revision = None\nbranch_labels = None\ndepends_on = None\n'
        "import sqlalchemy as sa\nfrom alembic import op\n\n"
        f"def upgrade():\n    {body}\n\ndef downgrade():\n    pass\n")
    return folder


def test_a_disabled_builtin_with_applied_migrations_does_not_block_the_next_start(make_app, data_dir, backend):
    first = make_app(backend=backend)
    first.extensions["agenthost"].stop()
    write_disabled(data_dir, {"notifications"})
    second = make_app(backend=backend)
    client = second.test_client()
    assert client.get("/api/settings", headers=HEADERS).status_code == 200
    assert client.get("/api/notifications", headers=HEADERS).status_code == 404


def test_an_extension_whose_migration_fails_is_dropped_and_the_host_starts(make_app, tmp_path):
    broken = _migration(tmp_path / "broken", "broken_0001", "op.execute('THIS IS NOT SQL')")
    good = _migration(tmp_path / "good", "good_0001",
                      "op.create_table('good_things', sa.Column('id', sa.Integer, primary_key=True))")

    class Broken:
        __name__ = "broken"

        @hookimpl
        def register_models(self, host):
            return [broken]

    class Good:
        __name__ = "good"

        @hookimpl
        def register_models(self, host):
            return [good]

    app = make_app(plugins=[Broken(), Good()])
    host = app.extensions["agenthost"]
    assert host.mode == "APP"
    assert host.plugins.records["broken"].error
    assert host.plugins.records["good"].error is None
    assert "good_things" in inspect(host.db.engine).get_table_names()
    assert app.test_client().get("/api/settings", headers=HEADERS).status_code == 200
