"""stark_pg.db.settings.local_setting: a setting changed for one block of statements and set back,
inside a caller's transaction too (where psycopg's block is a savepoint, whose release keeps SET LOCAL)."""

from __future__ import annotations

import pytest

from stark_pg.db.settings import local_setting


def show(conn, name: str):
    return conn.execute("select current_setting(%s, true)", (name,)).fetchone()[0]


def test_the_setting_holds_inside_and_the_callers_value_comes_back(conn):
    conn.execute("set plan_cache_mode = force_custom_plan")
    with conn.transaction():                                   # the caller's transaction
        with local_setting(conn, "plan_cache_mode", "force_generic_plan"):
            assert show(conn, "plan_cache_mode") == "force_generic_plan"
        assert show(conn, "plan_cache_mode") == "force_custom_plan"
        with local_setting(conn, "stark.ef_search", "7"):      # a custom setting, never set before
            assert show(conn, "stark.ef_search") == "7"
        assert show(conn, "stark.ef_search") in ("", None)
    assert show(conn, "plan_cache_mode") == "force_custom_plan"


def test_an_error_inside_leaves_the_callers_value(conn):
    conn.execute("set work_mem = '5MB'")
    with conn.transaction():
        with pytest.raises(ZeroDivisionError):
            with local_setting(conn, "work_mem", "7MB"):
                assert show(conn, "work_mem") == "7MB"
                raise ZeroDivisionError
        assert show(conn, "work_mem") == "5MB"
    assert show(conn, "work_mem") == "5MB"
