"""The agent's sandbox: a program the LLM wrote is checked by sqlglot, then run as a role that can do
nothing else.

Two independent walls, so that a bug in one is caught by the other:

1. `validate` parses the text (PostgreSQL dialect) and accepts exactly one SELECT (WITH and set
   operations allowed) built only from an allow-list of expression kinds: no writes (in CTEs either),
   no DDL, no locking clauses, no recursive CTEs, no table but the toolkit's views (schema `agent`)
   and the query's own CTEs, no function but the toolkit's and a list of harmless built-ins (no
   `pg_sleep`, `set_config`, `dblink`, `lo_*`, `pg_read_file`, catalogue access, ...), and no slot
   (`:name`) but the known ones. A rejection says why; the training loop feeds that back to the LLM.
2. `run` binds the slots as literals (sqlglot writes them, quoting included), sets the SKB, opens a
   read-only transaction with a statement timeout on a connection logged in as `stark_agent` (a
   role with SELECT on the toolkit's views and EXECUTE on its functions only: migration 0011),
   fetches at most `row_limit` rows through a cursor, and always rolls back, so that not even a
   setting survives the program.

A program's memory is bounded too, not only its time: a few accepted built-ins (lpad, string_agg,
array_agg) can grow a value by doubling, and a backend can take gigabytes well inside the timeout.
Where the server runs on this machine (the embedded one, or any local server whose processes we may
set limits on), the agent connection's backend gets an address-space limit (RLIMIT_AS) of its size
when first used plus `MEMORY_MB`: past it PostgreSQL's allocations fail and the program ends with
"out of memory", the backend and the server unharmed. Parallel workers (other processes) are turned
off in the program's transaction so that the whole program runs under that limit. A remote server
gets the timeout only (`memory_bounded` says which applies).
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import psycopg
import sqlglot
from psycopg import conninfo
from sqlglot import exp
from sqlglot.errors import ParseError

from stark_pg.config import ENV_AGENT_PASSWORD, env

AGENT_ROLE = "stark_agent"
TOOLKIT_SCHEMA = "agent"
TOOLKIT_VIEWS = frozenset({"node", "node_text", "edge"})
TOOLKIT_FUNCTIONS = frozenset({"bm25", "vss", "similarity", "neighbours", "match_name"})

ENTITY_SLOTS = 3
SLOTS = ("query", "query_vector", "answer_type",
         *(f"entity_{i}{suffix}" for i in range(1, ENTITY_SLOTS + 1) for suffix in ("", "_type", "_node")))

# Built-ins a ranking program may call, beyond those sqlglot gives their own expression class below.
SAFE_FUNCTIONS = frozenset({
    "array_length", "cardinality", "array_position", "array_remove", "array_append", "array_cat",
    "string_to_array", "array_to_string", "split_part", "replace", "trim", "btrim", "ltrim", "rtrim",
    "lpad", "rpad", "initcap", "reverse", "starts_with", "regexp_replace", "regexp_match",
    "to_tsvector", "plainto_tsquery", "websearch_to_tsquery", "ts_rank", "ts_rank_cd",
    "log", "log10", "sign", "trunc", "ceiling", "width_bucket", "percent_rank", "cume_dist", "ntile",
    "lag", "lead", "first_value", "last_value", "nth_value", "bool_or", "bool_and", "string_agg",
    "nullif", "num_nulls", "num_nonnulls", "jsonb_build_object",
})

# Expression kinds a program may contain (sqlglot classes); anything else is refused by name.
ALLOWED = tuple(getattr(exp, name) for name in """
    Select From Join Where Group Having Order Ordered Limit Offset Distinct Window WindowSpec Qualify
    With CTE Subquery Union Intersect Except Values Tuple Lateral Unnest Explode TableAlias Alias Star
    Column Identifier Table Literal RawString Null Boolean Placeholder Paren Array Bracket Cast DataType
    DataTypeParam Var Interval Anonymous Dot
    EQ NEQ GT GTE LT LTE And Or Not Is In Between Like ILike SimilarTo Any All Exists Neg Case If
    Add Sub Mul Div Mod IntDiv DPipe BitwiseAnd BitwiseOr Coalesce Greatest Least Nullif
    Sum Max Min Count Avg ArrayAgg ArrayContains ArrayContainsAll ArrayOverlaps ArraySize
    RowNumber Rank DenseRank PercentileCont
    Abs Exp Ln Log Sqrt Pow Round Floor Ceil Sign
    Lower Upper Length Substring StrPosition Concat ConcatWs Trim Left Right Initcap RegexpLike
    RegexpILike StartsWith Filter ToChar Split
""".split() if hasattr(exp, name))
CAST_TYPES = frozenset({"INT", "BIGINT", "SMALLINT", "FLOAT", "DOUBLE", "DECIMAL", "TEXT", "VARCHAR",
                        "BOOLEAN", "VECTOR", "ARRAY"})
FORBIDDEN_HINTS = {
    exp.Insert: "writes (INSERT) are not allowed", exp.Update: "writes (UPDATE) are not allowed",
    exp.Delete: "writes (DELETE) are not allowed", exp.Merge: "writes (MERGE) are not allowed",
    exp.Create: "DDL (CREATE) is not allowed", exp.Drop: "DDL (DROP) is not allowed",
    exp.Alter: "DDL (ALTER) is not allowed",
    exp.Copy: "COPY is not allowed", exp.Lock: "locking clauses (FOR UPDATE/SHARE) are not allowed",
    exp.Set: "SET is not allowed", exp.Transaction: "transaction control is not allowed",
    exp.NullSafeEQ: "the <=> operator is not allowed: score vectors with agent.vss or agent.similarity",
}


class Rejected(ValueError):
    """The validator refused a program; the message says why (and is fed back to the LLM)."""


class ProgramFailed(RuntimeError):
    """A valid program failed in the database (error, timeout, wrong columns)."""


@dataclass(frozen=True)
class Program:
    """A validated program: its parse tree and the slots it uses."""

    text: str
    tree: exp.Expression
    slots: tuple[str, ...]

    @property
    def uses_entities(self) -> bool:
        return any(s.startswith("entity_") for s in self.slots)


def validate(text: str) -> Program:
    """The program if it passes every check of the module docstring; else `Rejected` with the reason."""
    if not text or not text.strip():
        raise Rejected("the program is empty")
    try:
        with _quiet_sqlglot():
            statements = [s for s in sqlglot.parse(text, read="postgres") if s is not None]
    except ParseError as exc:
        raise Rejected(f"not valid PostgreSQL: {_first_line(str(exc))}") from None
    except Exception as exc:  # sqlglot raises assorted errors on odd input
        raise Rejected(f"cannot parse the program: {_first_line(str(exc))}") from None
    if len(statements) != 1:
        raise Rejected(f"exactly one statement is allowed, found {len(statements)}")
    tree = statements[0]
    if not isinstance(tree, (exp.Select, exp.Union, exp.Intersect, exp.Except, exp.Subquery)):
        specific = next((hint for kind, hint in FORBIDDEN_HINTS.items() if isinstance(tree, kind)), None)
        verb = (tree.sql("postgres").split() or ["?"])[0].upper()
        raise Rejected(specific or f"only a SELECT may run, not {verb}")
    ctes = _cte_names(tree)
    slots: list[str] = []
    for node in tree.walk():
        refusal = _refusal(node)
        if refusal:
            raise Rejected(refusal)
        if isinstance(node, exp.With) and node.args.get("recursive"):
            raise Rejected("recursive CTEs are not allowed (use agent.neighbours for graph walks)")
        if isinstance(node, exp.Table):
            _check_table(node, ctes)
        elif isinstance(node, exp.Anonymous):
            _check_function(node)
        elif isinstance(node, exp.Dot):
            _check_dot(node)
        elif isinstance(node, exp.Column):
            if node.args.get("db") or node.args.get("catalog"):
                raise Rejected(f"column {node.sql('postgres')!r}: name columns by table alias only")
        elif isinstance(node, exp.DataType):
            kind = getattr(node.this, "name", None) or str(node.this)
            if kind.upper() not in CAST_TYPES:
                raise Rejected(f"cast to {node.sql('postgres')} is not allowed (allowed: int, bigint, float, "
                               "double precision, numeric, text, boolean, vector)")
        elif isinstance(node, exp.Placeholder):
            name = node.name
            if name not in SLOTS:
                raise Rejected(f"unknown slot :{name or '?'} (slots: {', '.join(':' + s for s in SLOTS)})")
            slots.append(name)
    return Program(text, tree, tuple(dict.fromkeys(slots)))


@contextmanager
def _quiet_sqlglot():
    """sqlglot logs a warning when it falls back to a raw Command; the rejection says it instead."""
    logger = logging.getLogger("sqlglot")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _first_line(message: str) -> str:
    return message.strip().splitlines()[0][:300] if message.strip() else "syntax error"


def _refusal(node: exp.Expression) -> str | None:
    for kind, hint in FORBIDDEN_HINTS.items():
        if isinstance(node, kind):
            return hint
    if not isinstance(node, ALLOWED):
        return f"{node.key.upper()} ({node.sql('postgres')[:60]!r}) is not allowed in a program"
    return None


def _cte_names(tree: exp.Expression) -> set[str]:
    return {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}


def _check_table(node: exp.Table, ctes: set[str]) -> None:
    if node.args.get("catalog"):
        raise Rejected(f"{node.sql('postgres')!r}: three-part names are not allowed")
    schema = node.args.get("db")
    schema_name = schema.name.lower() if schema is not None else None
    target = node.this
    if isinstance(target, exp.Anonymous):                 # a set-returning function in FROM
        if schema_name != TOOLKIT_SCHEMA or target.name.lower() not in TOOLKIT_FUNCTIONS:
            raise Rejected(f"function {_qualified(schema_name, target.name)} is not in the toolkit "
                           f"(functions: {_toolkit_list(TOOLKIT_FUNCTIONS)})")
        return
    if not isinstance(target, exp.Identifier):
        raise Rejected(f"{node.sql('postgres')[:60]!r} is not allowed in FROM")
    name = target.name.lower()
    if schema_name is None and name in ctes:
        return
    if schema_name == TOOLKIT_SCHEMA and name in TOOLKIT_VIEWS:
        return
    raise Rejected(f"table {_qualified(schema_name, target.name)} is not allowed (tables: "
                   f"{_toolkit_list(TOOLKIT_VIEWS)} and the program's own CTEs)")


def _check_function(node: exp.Anonymous) -> None:
    parent = node.parent
    if isinstance(parent, exp.Table) or (isinstance(parent, exp.Dot) and parent.expression is node):
        return  # a qualified call: checked with its table or dot
    name = node.name.lower()
    if name in TOOLKIT_FUNCTIONS:
        raise Rejected(f"call the toolkit function as agent.{name}(...)")
    if name not in SAFE_FUNCTIONS:
        raise Rejected(f"function {node.name}() is not allowed")


def _check_dot(node: exp.Dot) -> None:
    left, right = node.this, node.expression
    if (isinstance(left, exp.Identifier) and left.name.lower() == TOOLKIT_SCHEMA and isinstance(right, exp.Anonymous)
            and right.name.lower() in TOOLKIT_FUNCTIONS):
        return
    raise Rejected(f"{node.sql('postgres')[:80]!r} is not allowed (functions: {_toolkit_list(TOOLKIT_FUNCTIONS)})")


def _qualified(schema: str | None, name: str) -> str:
    return f"{schema}.{name}" if schema else name


def _toolkit_list(names) -> str:
    return ", ".join(f"{TOOLKIT_SCHEMA}.{n}" for n in sorted(names))


# ------------------------------------------------------------------------------------------------
# Binding and running

def bind(program: Program, values: dict) -> str:
    """The program's SQL with every slot replaced by its value as a literal (NULL when absent)."""
    def literal(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, exp.Placeholder):
            return node
        value = values.get(node.name)
        if value is None:   # typed, so that overloaded functions still resolve
            return exp.Cast(this=exp.Null(), to=exp.DataType.build(_slot_type(node.name), dialect="postgres"))
        if isinstance(value, np.ndarray) or node.name == "query_vector":
            text = "[" + ",".join(f"{float(x):.7g}" for x in np.asarray(value).ravel()) + "]"
            return exp.Cast(this=exp.Literal.string(text), to=exp.DataType.build("vector", dialect="postgres"))
        if isinstance(value, bool):
            return exp.Boolean(this=value)
        if isinstance(value, int):
            return exp.Literal.number(value)
        return exp.Literal.string(str(value))

    return program.tree.copy().transform(literal).sql(dialect="postgres")


def _slot_type(name: str) -> str:
    return "vector" if name == "query_vector" else "bigint" if name.endswith("_node") else "text"


MEMORY_MB = 512
"""Memory a program may allocate in its backend beyond what the backend held when first used."""

_connections: dict[tuple[str, int], psycopg.Connection] = {}
_lock = threading.Lock()
_bounds: "weakref.WeakKeyDictionary[psycopg.Connection, list]" = weakref.WeakKeyDictionary()
"""Per agent connection: [its backend's address space (bytes) when first seen, or None where it cannot be
bounded; the limit in force]."""


def agent_connection(conn: psycopg.Connection) -> psycopg.Connection:
    """A connection to `conn`'s database logged in as the agent role (kept open per thread).

    Password: STARK_PG_AGENT_PASSWORD, for servers that do not trust local connections (set it with
    `ALTER ROLE stark_agent PASSWORD '...'`)."""
    params = conninfo.conninfo_to_dict(conn.info.dsn)
    params["user"] = AGENT_ROLE
    params.pop("password", None)
    password = env(ENV_AGENT_PASSWORD)
    if password:
        params["password"] = password
    dsn = conninfo.make_conninfo(**params)
    key = (dsn, threading.get_ident())
    with _lock:
        existing = _connections.get(key)
        if existing is not None and not existing.closed and not existing.broken:
            return existing
        try:
            fresh = psycopg.connect(dsn, autocommit=True)
        except psycopg.OperationalError as exc:
            raise ProgramFailed(f"cannot connect as {AGENT_ROLE} (the sandbox role of migration 0011): {exc}") from exc
        _connections[key] = fresh
        return fresh


def run(conn: psycopg.Connection, skb: str, sql_text: str, *, timeout_ms: int = 5000,
        row_limit: int = 1000) -> list[tuple[int, float]]:
    """Rows (node_id, score) of a bound program, in its order, at most `row_limit`, duplicates of a
    node dropped after its first row. Runs as the agent role in a read-only transaction that is
    always rolled back. `ProgramFailed` says what went wrong."""
    agent = agent_connection(conn)
    memory_bounded(agent)
    try:
        agent.execute("begin transaction isolation level repeatable read read only")
        agent.execute("select set_config('statement_timeout', %s, true), set_config('lock_timeout', %s, true), "
                      "set_config('stark.agent_skb', %s, true), "
                      "set_config('max_parallel_workers_per_gather', '0', true)",
                      (str(int(timeout_ms)), str(int(timeout_ms)), skb))
        with agent.cursor(name="agent_program") as cursor:
            cursor.execute(sql_text)
            rows = cursor.fetchmany(row_limit)
            width = len(cursor.description or ())
    except psycopg.errors.QueryCanceled:
        raise ProgramFailed(f"the program ran longer than {timeout_ms} ms") from None
    except psycopg.errors.OutOfMemory:
        raise ProgramFailed(f"the program needed more than {MEMORY_MB} MB of memory") from None
    except psycopg.Error as exc:
        raise ProgramFailed(_first_line(str(exc))) from None
    finally:
        if not agent.closed and not agent.broken:
            agent.execute("rollback")
    if rows and width < 2:
        raise ProgramFailed(f"a program must return (node_id, score) columns; it returned {width}")
    hits: list[tuple[int, float]] = []
    seen: set[int] = set()
    for row in rows:
        try:
            node_id = int(row[0])
            score = float(row[1]) if row[1] is not None else float("-inf")
        except (TypeError, ValueError):
            raise ProgramFailed(f"rows must be (node_id, score) numbers, got {row[:2]!r}") from None
        if node_id not in seen:
            seen.add(node_id)
            hits.append((node_id, score))
    return hits


def memory_bounded(agent: psycopg.Connection) -> bool:
    """Give the agent connection's backend an address-space limit of MEMORY_MB above its size when first
    seen; True when the limit is in force. Only a backend of this machine can be limited: it must be the
    process /proc shows under the connection's pid, a postgres backend of the agent role on a local
    socket or loopback (a remote server may have a local process of the same pid that is not it)."""
    state = _bounds.get(agent)
    if state is None:
        state = _bounds[agent] = [_local_backend_size(agent, agent.info.backend_pid), None]
    baseline, applied = state
    if baseline is None:
        return False
    limit = baseline + MEMORY_MB * 1024 * 1024
    if applied != limit:
        if not _set_address_limit(agent.info.backend_pid, limit):
            state[0] = None
            return False
        state[1] = limit
    return True


def _lower_address_limit(pid: int, limit: int) -> None:
    """RLIMIT_AS of process `pid` down to `limit` (the soft limit; the hard one kept)."""
    import resource

    _, hard = resource.prlimit(pid, resource.RLIMIT_AS)
    resource.prlimit(pid, resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))


def _set_address_limit(pid: int, limit: int) -> bool:
    """`_lower_address_limit`, here or, run as root without CAP_SYS_RESOURCE (as in containers), where
    only a process of the backend's own OS user may set it, through util-linux's `prlimit` run as that
    user (the soft limit only, as here)."""
    import shutil
    import subprocess

    try:
        _lower_address_limit(pid, limit)
        return True
    except PermissionError:
        if os.geteuid() != 0 or shutil.which("prlimit") is None:
            return False
    except (OSError, ValueError):
        return False
    try:
        done = subprocess.run([shutil.which("prlimit"), f"--pid={int(pid)}", f"--as={int(limit)}:"],
                              user=os.stat(f"/proc/{pid}").st_uid, capture_output=True, timeout=30, cwd="/")
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def _local_backend_size(agent: psycopg.Connection, pid: int) -> int | None:
    """The backend's address space in bytes (VmSize), if it is a local backend of the agent role."""
    host = agent.info.host or ""
    if not (host.startswith("/") or host in ("localhost", "127.0.0.1", "::1")):
        return None
    try:
        command = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode("utf-8", "replace")
        status = open(f"/proc/{pid}/status").read()
    except OSError:
        return None
    if not command.startswith("postgres:") or f" {AGENT_ROLE} " not in f"{command} ":
        return None
    for line in status.splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    return None
