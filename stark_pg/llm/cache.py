"""stark.llm_cache: every request and response, so a rerun replays without calls.

Reads go through the caller's connection. Writes must outlive whatever the caller does with its
transaction (the evaluation runner rolls back after a failed query; a method may call the LLM
inside `with conn.transaction():` and then fail): a paid-for answer is never thrown away with it.
So a write goes straight through the caller's connection only when that connection is autocommit
and idle (the write commits at once, as stark-pg's connections are); otherwise it goes through a
second, autocommit connection to the same database, opened on first need. A connection that reads on
a hot standby (stark_pg.db.connection.connect(read=True)) cannot write: its writes go over a second
connection to the primary.

A cache may be shared by threads (a method scoring candidates with --workers): its reads and writes
are serialised, so its connection is never used by two of them at once.
"""

from __future__ import annotations

import hashlib
import json
import threading
import weakref
from dataclasses import dataclass

import psycopg
from psycopg import pq
from psycopg.conninfo import make_conninfo

from stark_pg.db.connection import write_dsn_for
from stark_pg.resources import queries as sql


def canonical_json(value) -> str:
    """One text per request whatever the dict order or spacing: what the hash is taken of."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_hash(request: dict, endpoint: str = "") -> str:
    """The cache key of a request sent to `endpoint` (settings.endpoint_identity: "" for the
    provider's own API, whose keys are those of the request alone)."""
    keyed = request | {"endpoint": endpoint} if endpoint else request
    return hashlib.sha256(canonical_json(keyed).encode("utf-8")).hexdigest()


@dataclass
class CachedReply:
    response: dict
    prompt_tokens: int | None
    completion_tokens: int | None
    cost_usd: float | None
    seconds: float | None


class LLMCache:
    def __init__(self, conn: psycopg.Connection):
        self.conn = conn
        self._side: psycopg.Connection | None = None
        self._lock = threading.RLock()

    def get(self, provider: str, model: str, key: str) -> CachedReply | None:
        with self._lock:
            row = sql().llm_cache_get(self.conn, provider=provider, model=model, request_hash=key)
        return CachedReply(*row) if row else None

    def put(self, provider: str, model: str, key: str, request: dict, response: dict, *,
            prompt_tokens: int | None, completion_tokens: int | None, cost_usd: float | None,
            seconds: float) -> None:
        with self._lock:
            sql().llm_cache_put(self._writer(), provider=provider, model=model, request_hash=key,
                                request=canonical_json(request), response=canonical_json(response),
                                prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                                cost_usd=cost_usd, seconds=seconds)

    def _writer(self) -> psycopg.Connection:
        primary = write_dsn_for(self.conn)      # the caller reads on a standby: write on the primary
        if primary is None and self.conn.autocommit and self.conn.info.transaction_status == pq.TransactionStatus.IDLE:
            return self.conn
        if self._side is None or self._side.closed:
            if primary is None:
                # conn.info.dsn leaves the password out; the libpq connection still knows it
                password = self.conn.pgconn.password
                params = {"password": password.decode()} if password else {}
                primary = make_conninfo(self.conn.info.dsn, **params)
            self._side = psycopg.connect(primary, autocommit=True)
            weakref.finalize(self, self._side.close)
        return self._side

    def close(self) -> None:
        if self._side is not None:
            self._side.close()
            self._side = None
