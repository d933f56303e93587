"""Extension detection (issue 18): `stark-pg db status` lists vector (required), pg_textsearch and
vectorscale (optional) with the version the server offers and the one installed; an extension the
server lacks is reported as such and breaks nothing; the migrations create only `vector`."""

from __future__ import annotations

import json
import os

import pytest

from stark_pg.db.extensions import OPTIONAL, REQUIRED, extensions
from stark_pg.resources import sql_dir

EMBEDDED = not os.environ.get("STARK_PG_TEST_DSN")


def test_status_lists_the_extensions_with_their_versions(cli, conn):
    status = json.loads(cli("db", "status", "--json").stdout)
    found = status["extensions"]
    assert list(found) == [*REQUIRED, *OPTIONAL]
    vector = found["vector"]
    assert vector["required"] and vector["installed"] == status["pgvector"] and vector["usable"]
    assert not found["pg_textsearch"]["required"] and not found["vectorscale"]["required"]
    # what the server itself says, extension by extension
    for name, (available, installed) in {
            row[0]: (row[1], row[2]) for row in conn.execute(
                "select name, default_version, installed_version from pg_available_extensions")}.items():
        if name in found:
            assert (found[name]["available"], found[name]["installed"]) == (available, installed)
    text = cli("db", "status").stdout
    assert f"vector {vector['installed']} installed" in " ".join(text.split())


@pytest.mark.skipif(not EMBEDDED, reason="the versions of the embedded server's package")
def test_the_embedded_server_has_the_optional_extensions_available_not_installed(conn):
    found = {ext.name: ext for ext in extensions(conn)}
    assert found["vector"].installed.startswith("0.8.")
    assert found["pg_textsearch"].available == "1.0.0" and found["pg_textsearch"].preloaded is True
    assert found["vectorscale"].available and found["vectorscale"].installed is None
    assert found["pg_textsearch"].installed is None
    assert all(ext.usable for ext in found.values())


def test_an_extension_the_server_lacks_is_reported_missing_not_an_error(conn):
    """What an external server without pg_textsearch or vectorscale looks like: the row is there,
    with no version, not usable; the required vector is unaffected."""
    vector, missing = extensions(conn, ("vector", "stark_pg_no_such_extension"))
    assert vector.installed and vector.usable
    assert (missing.available, missing.installed, missing.usable) == (None, None, False)
    assert missing.describe() == "stark_pg_no_such_extension not on this server (optional)"


def test_migrations_create_only_vector(conn):
    created = {row[0] for row in conn.execute("select extname from pg_extension")}
    assert created == {"plpgsql", "vector"}
    files = {str(path.relative_to(sql_dir())): path.read_text().lower() for path in sql_dir().rglob("*.sql")}
    sql = " ".join(files.values())
    for name in (*OPTIONAL, "http", "age"):
        if name == "http":      # only the owner's stark.embed_endpoint_set creates it, when an endpoint is set
            sql = " ".join(text for file, text in files.items() if file != "functions/embed.sql")
            body = files["functions/embed.sql"].split("create or replace function stark.embed_endpoint_set", 1)[1]
            assert "create extension http schema stark_http" in body.split("$$;", 1)[0]
            assert files["functions/embed.sql"].count("create extension") == 1
        assert f"create extension if not exists {name}" not in sql and f"create extension {name}" not in sql
