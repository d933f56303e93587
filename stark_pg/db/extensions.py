"""The PostgreSQL extensions stark-pg uses: which the server offers and which this database has.

`vector` (pgvector) is required: migration 0001 creates it and every embedding table needs it.
`pg_textsearch` (a BM25 index) and `vectorscale` (DiskANN) are optional: the embedded server ships
both, an external server (by DSN, docker) may lack them, so no migration creates them; `stark-pg db
status` reports them so a user can see what their server can do. `stark-pg index --vector-index
diskann` creates `vectorscale` when the server has it and builds HNSW with a notice where it does not
(stark_pg.index.dense). The embedded package also ships `age` and `http`. `http` (outbound HTTP from SQL)
is created only when the database owner sets stark.embed's endpoint (`stark-pg db embedding-endpoint`,
sql/functions/embed.sql), in its own schema with its functions revoked from everyone but stark.embed;
it is not reported here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import psycopg

REQUIRED = ("vector",)
OPTIONAL = ("pg_textsearch", "vectorscale")
# extensions whose library refuses to load unless listed in shared_preload_libraries
NEEDS_PRELOAD = frozenset({"pg_textsearch"})


@dataclass(frozen=True)
class Extension:
    name: str
    required: bool
    available: str | None       # the version the server offers; None: the server does not have it
    installed: str | None       # the version created in this database; None: not created here
    preloaded: bool | None      # for NEEDS_PRELOAD: in shared_preload_libraries; None when that does not matter

    @property
    def usable(self) -> bool:
        """Created here, or the server could create it now (its library loads)."""
        return self.installed is not None or (self.available is not None and self.preloaded is not False)

    def as_dict(self) -> dict:
        return asdict(self) | {"usable": self.usable}

    def describe(self) -> str:
        """One phrase for `stark-pg db status`."""
        if self.installed is not None:
            state = f"{self.installed} installed"
        elif self.available is None:
            state = "not on this server" + ("" if self.required else " (optional)")
        elif self.preloaded is False:
            state = f"{self.available} available, not in shared_preload_libraries"
        else:
            state = f"{self.available} available"
        return f"{self.name} {state}"


def extensions(conn: psycopg.Connection, names: tuple[str, ...] = REQUIRED + OPTIONAL) -> list[Extension]:
    """What the server and this database have of each extension in `names` (in that order)."""
    from stark_pg.resources import queries

    rows = queries().extensions(conn, names=list(names))
    return [Extension(name=name, required=name in REQUIRED, available=available, installed=installed,
                      preloaded=preloaded if name in NEEDS_PRELOAD else None)
            for name, available, installed, preloaded in rows]
