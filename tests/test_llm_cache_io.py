"""`stark-pg llm-cache stats | export | import` (stark_pg/llm/cache_io.py): the LLM cache kept in a file and
brought into another database, against the real embedded PostgreSQL.

A file exported from one database and imported into an empty one gives the same rows, column by column
(plain and gzip, a file and stdout/stdin); a replay with cache=only of an LLM method run in the first
database then makes no request in the second. A bad line names FILE:LINE and imports nothing.
"""

from __future__ import annotations

import gzip
import json
import re
from datetime import datetime, timezone

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from typer.testing import CliRunner

from conftest import cloned_database
from fake_llm_server import FakeLLMServer, user_text
from stark_pg.cli import app
from stark_pg.llm import cache_io
from stark_pg.llm.cache import LLMCache, request_hash
from stark_pg.llm.cache_io import CacheFileError, check_line

ROWS = ("select provider, model, request_hash, request::text, response::text, prompt_tokens, completion_tokens, "
        "cost_usd, seconds, created_at from stark.llm_cache order by provider, model, request_hash")
BULK = 2500           # beyond one import batch (1,000 lines) and one cursor fetch


def invoke(url: str, *args: str, input: str | bytes | None = None, expect: int = 0):
    result = CliRunner().invoke(app, ["--dsn", url, "llm-cache", *args], input=input,
                                env={"COLUMNS": "200", "TERMINAL_WIDTH": "200"})
    assert result.exit_code == expect, (result.output, result.exception)
    return result


def rows(url: str) -> list[tuple]:
    with psycopg.connect(url) as c:
        return c.execute(ROWS).fetchall()


def put(conn, provider: str, model: str, request: dict, response: dict, endpoint: str = "", **numbers) -> str:
    key = request_hash(request, endpoint)
    numbers = {"prompt_tokens": 11, "completion_tokens": 7, "cost_usd": 1.2345678901234567e-05,
               "seconds": 3.141592653589793} | numbers
    LLMCache(conn).put(provider, model, key, request | {"base_url": endpoint or None, "endpoint": endpoint},
                       response, **numbers)
    return key


def fill(conn) -> None:
    """Rows as the LLM layer writes them (texts in several scripts, escapes, floats to the last digit,
    unknown prices, an embedding), an old one, and BULK plain ones."""
    put(conn, "openai", "gpt-4o-mini",
        {"messages": [{"role": "user", "content": "Which drugs target PPARG? ünïcødé ✓ 药物 \"quoted\"\n\ttab \\ "}],
         "max_tokens": 200, "temperature": 0.0},
        {"text": '{"document": "name: rosiglitazone"}', "finish_reason": "stop",
         "raw": {"id": "chatcmpl-1", "logprob": -0.12345678901234566, "list": [1, 2.5, None, True, "\u0001"]}})
    put(conn, "anthropic", "claude-haiku-4-5", {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 5},
        {"text": "hi", "finish_reason": "end_turn", "raw": {}}, prompt_tokens=None, completion_tokens=None,
        cost_usd=None)
    old = put(conn, "openai", "qwen2.5-coder-1.5b", {"messages": [{"role": "user", "content": "old"}]},
              {"text": "old answer", "finish_reason": "stop", "raw": {}}, endpoint="http://127.0.0.1:8008/v1",
              cost_usd=None, seconds=12.5)
    put(conn, "openai", "text-embedding-3-small", {"kind": "embedding", "input": "PPARG"},
        {"embedding_b64": "AACAPwAAAEA=", "dim": 2}, completion_tokens=0)
    conn.execute("update stark.llm_cache set created_at = '2020-01-02 03:04:05.678901+00' where request_hash = %s",
                 (old,))
    conn.execute("insert into stark.llm_cache select 'openai', 'bulk', encode(sha256(i::text::bytea), 'hex'), "
                 "jsonb_build_object('messages', jsonb_build_array(jsonb_build_object('content', 'q' || i))), "
                 "jsonb_build_object('text', repeat('x', i %% 50), 'raw', jsonb_build_object('n', i * 0.1)), "
                 "i, 1, i * 1e-7, i / 7.0, now() - i * interval '1 second' from generate_series(1, %s) i", (BULK,))


@pytest.fixture
def second_url(server_url, template_db):
    """Another empty, migrated database on the same server."""
    with cloned_database(server_url, template_db, "stark_cache_b") as url:
        yield url


@pytest.fixture
def filled_url(db_url, conn):
    fill(conn)
    return db_url


@pytest.mark.parametrize("name", ["cache.jsonl", "cache.jsonl.gz"])
def test_export_and_import_into_an_empty_database_gives_the_same_rows(filled_url, second_url, tmp_path, name):
    path = tmp_path / name
    done = invoke(filled_url, "export", str(path))
    assert done.stdout.strip() == f"wrote {BULK + 4:,} rows to {path}"
    assert not (tmp_path / f"{name}.part").exists()
    raw = path.read_bytes()
    assert raw.startswith(b"\x1f\x8b") == name.endswith(".gz")
    lines = (gzip.decompress(raw) if name.endswith(".gz") else raw).decode("utf-8").splitlines()
    assert len(lines) == BULK + 4 and all(json.loads(line).keys() == set(cache_io.COLUMNS) for line in lines)

    assert rows(second_url) == []
    report = json.loads(invoke(second_url, "import", str(path), "--json").stdout)
    assert report == {"rows": BULK + 4, "inserted": BULK + 4, "kept": 0, "replaced": 0}
    assert rows(second_url) == rows(filled_url)
    imported, exported = (json.loads(invoke(url, "stats", "--json").stdout) for url in (second_url, filled_url))
    assert len(imported) == len(exported) == 5
    for mine, theirs in zip(imported, exported):       # float sums may differ in the last digit: row order
        assert mine == {k: pytest.approx(v, rel=1e-12) if isinstance(v, float) else v for k, v in theirs.items()}

    again = invoke(second_url, "import", str(path))     # everything is there already: kept
    assert again.stdout.strip() == f"{BULK + 4:,} rows read from {path}: 0 inserted, {BULK + 4:,} kept, 0 replaced"
    assert rows(second_url) == rows(filled_url)


def test_export_to_stdout_and_import_from_stdin(filled_url, second_url):
    done = invoke(filled_url, "export", "-", "--model", "gpt-4o-mini")
    assert done.stderr.strip() == "wrote 1 rows to -"
    line = json.loads(done.stdout)
    assert line["request"]["messages"][0]["content"].startswith("Which drugs target PPARG? ünïcødé ✓ 药物")
    assert line["cost_usd"] == 1.2345678901234567e-05 and line["response"]["raw"]["logprob"] == -0.12345678901234566
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", line["created_at"])
    json_report = invoke(filled_url, "export", "-", "--model", "gpt-4o-mini", "--json")
    assert json.loads(json_report.stderr) == {"file": "-", "rows": 1} and json_report.stdout == done.stdout

    imported = invoke(second_url, "import", "-", input=done.stdout.encode("utf-8"))
    assert "1 inserted, 0 kept, 0 replaced" in imported.stdout
    assert rows(second_url) == [r for r in rows(filled_url) if r[1] == "gpt-4o-mini"]


def test_export_filters(filled_url, tmp_path):
    def exported(*args: str) -> list[dict]:
        path = tmp_path / "part.jsonl"
        invoke(filled_url, "export", str(path), *args)
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]

    assert {r["provider"] for r in exported("--provider", "anthropic")} == {"anthropic"}
    assert len(exported("--provider", "openai")) == BULK + 3
    assert len(exported("--provider", "openai", "--model", "bulk")) == BULK
    assert exported("--model", "nope") == []
    recent = exported("--since", "2021-01-01")
    assert len(recent) == BULK + 3 and "qwen2.5-coder-1.5b" not in {r["model"] for r in recent}
    assert [r["created_at"] for r in exported("--model", "qwen2.5-coder-1.5b")] == ["2020-01-02T03:04:05.678901Z"]
    assert len(exported("--since", "2020-01-02T03:04:05.678901Z")) == BULK + 4
    assert len(exported("--since", "2020-01-02T03:04:05.678902+00:00")) == BULK + 3
    bad = invoke(filled_url, "export", str(tmp_path / "x.jsonl"), "--since", "last week", expect=1)
    assert "--since 'last week' is not an ISO 8601 date or time" in bad.stderr
    keys = [(r["provider"], r["model"], r["request_hash"]) for r in exported()]
    assert keys == sorted(keys)                                      # key order: one cache, one file


def test_stats(filled_url, db_url):
    listed = {(r["provider"], r["model"]): r for r in json.loads(invoke(filled_url, "stats", "--json").stdout)}
    assert set(listed) == {("anthropic", "claude-haiku-4-5"), ("openai", "bulk"), ("openai", "gpt-4o-mini"),
                           ("openai", "qwen2.5-coder-1.5b"), ("openai", "text-embedding-3-small")}
    bulk = listed["openai", "bulk"]
    assert bulk["rows"] == BULK and bulk["prompt_tokens"] == BULK * (BULK + 1) // 2
    assert bulk["completion_tokens"] == BULK and bulk["seconds"] == pytest.approx(BULK * (BULK + 1) / 2 / 7)
    assert bulk["cost_usd"] == pytest.approx(BULK * (BULK + 1) / 2 * 1e-7)
    assert bulk["oldest"] < bulk["newest"]
    claude = listed["anthropic", "claude-haiku-4-5"]
    assert claude["prompt_tokens"] is None and claude["cost_usd"] is None and claude["rows"] == 1
    assert datetime.fromisoformat(listed["openai", "qwen2.5-coder-1.5b"]["oldest"]) == \
        datetime(2020, 1, 2, 3, 4, 5, 678901, tzinfo=timezone.utc)
    table = invoke(filled_url, "stats").stdout
    assert "gpt-4o-mini" in table and "claude-haiku-4-5" in table and f"{BULK + 4:,} rows" in table


def test_stats_of_an_empty_cache(second_url):
    assert invoke(second_url, "stats").stdout.strip() == "the LLM cache is empty"
    assert json.loads(invoke(second_url, "stats", "--json").stdout) == []


def good_lines(url: str, tmp_path, model: str = "bulk") -> list[str]:
    path = tmp_path / "good.jsonl"
    invoke(url, "export", str(path), "--model", model)
    return path.read_text(encoding="utf-8").splitlines()


def without(line: str, key: str) -> str:
    row = json.loads(line)
    del row[key]
    return json.dumps(row)


def with_value(line: str, key: str, value) -> str:
    return json.dumps(json.loads(line) | {key: value})


BAD_THIRD_LINES = {
    "truncated JSON": (lambda line: line[:len(line) // 2], "not valid JSON"),
    "missing key": (lambda line: without(line, "response"), "missing key response"),
    "bad hash": (lambda line: with_value(line, "request_hash", "abc123"),
                 'request_hash must be 64 lowercase hex digits (a sha256), not "abc123"'),
}


@pytest.mark.parametrize("case", list(BAD_THIRD_LINES))
def test_a_bad_line_is_named_and_nothing_is_imported(filled_url, second_url, tmp_path, case):
    lines = good_lines(filled_url, tmp_path)[:6]
    spoil, message = BAD_THIRD_LINES[case]
    lines[2] = spoil(lines[2])
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with psycopg.connect(second_url, autocommit=True) as c:      # a row there already, which must stay alone
        put(c, "openai", "before", {"messages": []}, {"text": "kept"})
    before = rows(second_url)
    for replace in ([], ["--replace"]):
        failed = invoke(second_url, "import", str(path), *replace, expect=1)
        assert isinstance(failed.exception, CacheFileError)
        assert str(failed.exception).startswith(f"{path}:3: {message}")
        assert rows(second_url) == before


def test_a_bad_line_after_several_batches_still_imports_nothing(filled_url, second_url, tmp_path, monkeypatch):
    monkeypatch.setattr(cache_io, "_BATCH_ROWS", 2)
    lines = good_lines(filled_url, tmp_path)[:9]
    lines[7] = with_value(lines[7], "prompt_tokens", 1.5)
    path = tmp_path / "bad.jsonl.gz"
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode("utf-8")))
    failed = invoke(second_url, "import", str(path), expect=1)
    assert str(failed.exception) == (f"{path}:8: prompt_tokens must be a whole number from 0 to 2147483647 or null, "
                                     f"not 1.5")
    assert rows(second_url) == []


def test_the_command_line_says_file_and_line_in_one_line(filled_url, second_url, tmp_path, cli):
    """The real command: the error on stderr, exit code 1 (the CliRunner tests see the exception itself)."""
    lines = good_lines(filled_url, tmp_path)[:4]
    lines[2] = lines[2][:40]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines), encoding="utf-8")
    done = cli("--dsn", second_url, "llm-cache", "import", str(path), expect=1)
    assert done.stderr.startswith(f"error: {path}:3: not valid JSON") and done.stderr.count("\n") == 1
    assert rows(second_url) == []


def test_replace_versus_keep_on_a_conflicting_key(filled_url, second_url, tmp_path):
    lines = good_lines(filled_url, tmp_path)[:3]
    path = tmp_path / "three.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    first = json.loads(lines[0])
    with psycopg.connect(second_url, autocommit=True) as c:      # the first key, with another answer
        c.execute("insert into stark.llm_cache (provider, model, request_hash, request, response, seconds) "
                  "values (%s, %s, %s, '{}', '{\"text\": \"mine\"}', 1)",
                  (first["provider"], first["model"], first["request_hash"]))
    mine = rows(second_url)

    kept = json.loads(invoke(second_url, "import", str(path), "--json").stdout)
    assert kept == {"rows": 3, "inserted": 2, "kept": 1, "replaced": 0}
    after = rows(second_url)
    assert mine[0] in after and len(after) == 3                  # the conflicting row is as it was

    replaced = invoke(second_url, "import", str(path), "--replace")
    assert replaced.stdout.strip() == f"3 rows read from {path}: 0 inserted, 0 kept, 3 replaced"
    assert rows(second_url) == [r for r in rows(filled_url) if r[2] in {json.loads(x)["request_hash"] for x in lines}]


def test_the_same_key_twice_in_a_file_is_refused(filled_url, second_url, tmp_path):
    lines = good_lines(filled_url, tmp_path)[:3]
    path = tmp_path / "twice.jsonl"
    path.write_text("\n".join([*lines, "", with_value(lines[1], "seconds", 9)]) + "\n", encoding="utf-8")
    failed = invoke(second_url, "import", str(path), expect=1)
    assert str(failed.exception) == f"{path}:5: the same provider, model and request_hash as line 2"
    assert rows(second_url) == []


def test_unreadable_files_are_named(second_url, tmp_path):
    missing = tmp_path / "missing.jsonl"
    failed = invoke(second_url, "import", str(missing), expect=1)
    assert str(failed.exception) == f"{missing}: cannot read: No such file or directory"
    cut = tmp_path / "cut.jsonl.gz"
    good = "".join(json.dumps(GOOD | {"request_hash": f"{i:064x}"}) + "\n" for i in range(1000))
    cut.write_bytes(gzip.compress(good.encode("utf-8"))[:200])
    failed = invoke(second_url, "import", str(cut), expect=1)
    assert re.match(rf"{re.escape(str(cut))}:\d+: (cannot read|not valid JSON)", str(failed.exception))
    not_gzip = tmp_path / "plain.jsonl.gz"
    not_gzip.write_text("{}\n", encoding="utf-8")
    failed = invoke(second_url, "import", str(not_gzip), expect=1)
    assert str(failed.exception).startswith(f"{not_gzip}:1: cannot read: Not a gzipped file")
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"provider": "caf\xe9"}\n')
    failed = invoke(second_url, "import", str(latin), expect=1)
    assert str(failed.exception) == f"{latin}:1: not valid UTF-8 (byte 18 of the line)"
    failed = invoke(second_url, "export", str(tmp_path / "no" / "such" / "dir.jsonl"), expect=1)
    assert "cannot write: No such file or directory" in str(failed.exception)
    assert rows(second_url) == [] and list(tmp_path.glob("**/*.part")) == []


GOOD = {"provider": "openai", "model": "m", "request_hash": "a" * 64, "request": {"messages": []},
        "response": {"text": "x"}}


@pytest.mark.parametrize("line,message", [
    ("[1, 2]", "not a JSON object but an array"),
    (json.dumps(GOOD | {"extra": 1}), "unknown key extra"),
    (json.dumps({"provider": "openai"}), "missing keys model, request_hash, request, response"),
    (json.dumps(GOOD | {"provider": ""}), 'provider must be a non-empty string, not ""'),
    (json.dumps(GOOD | {"model": 3}), "model must be a non-empty string, not 3"),
    (json.dumps(GOOD | {"request_hash": "A" * 64}), "request_hash must be 64 lowercase hex digits"),
    (json.dumps(GOOD | {"request_hash": "a" * 63}), "request_hash must be 64 lowercase hex digits"),
    (json.dumps(GOOD | {"request": "text"}), "request must be a JSON object, not a string"),
    (json.dumps(GOOD | {"response": None}), "response must be a JSON object, not null"),
    (json.dumps(GOOD | {"prompt_tokens": True}), "prompt_tokens must be a whole number"),
    (json.dumps(GOOD | {"completion_tokens": -1}), "completion_tokens must be a whole number"),
    (json.dumps(GOOD | {"completion_tokens": 2 ** 31}), "completion_tokens must be a whole number"),
    (json.dumps(GOOD | {"cost_usd": "0.1"}), 'cost_usd must be a finite number or null, not "0.1"'),
    (json.dumps(GOOD)[:-1] + ', "seconds": NaN}', "not valid JSON (NaN is not a JSON number"),
    (json.dumps(GOOD)[:-1] + ', "seconds": 1e400}', "seconds must be a finite number or null, not Infinity"),
    (json.dumps(GOOD | {"created_at": "2026-11-24 15:43:00"}), "created_at must be an ISO 8601 timestamp with a"),
    (json.dumps(GOOD | {"created_at": "2026-13-24T15:43:00Z"}), "created_at must be an ISO 8601 timestamp"),
    (json.dumps(GOOD | {"created_at": "yesterday"}), "created_at must be an ISO 8601 timestamp"),
    (json.dumps(GOOD | {"response": {"text": "nul \u0000 here"}}),
     'the text "nul \\u0000 here" holds a character PostgreSQL\'s jsonb cannot store'),
    (json.dumps(GOOD | {"request": {"\ud800": 1}}), 'the text "\\ud800" holds a character'),
])
def test_check_line_says_what_is_wrong(line, message):
    with pytest.raises(ValueError) as raised:
        check_line(line)
    assert str(raised.value).startswith(message)


def test_check_line_takes_what_export_writes_and_the_optional_columns_absent():
    assert check_line(json.dumps(GOOD)) == GOOD
    full = GOOD | {"prompt_tokens": 0, "completion_tokens": None, "cost_usd": 0, "seconds": 2.5,
                   "created_at": "2026-11-24T15:43:00.123456Z"}
    assert check_line(json.dumps(full)) == full
    for stamp in ("2026-11-24 15:43+01:00", "2026-11-24T15:43:00-05", "2026-11-24T15:43:00.5+05:30"):
        assert check_line(json.dumps(GOOD | {"created_at": stamp}))["created_at"] == stamp
    assert check_line(json.dumps(GOOD | {"response": {"text": "\\u0000 is only text here"}}))


def test_missing_optional_columns_get_nulls_and_now(second_url, tmp_path):
    path = tmp_path / "short.jsonl"
    path.write_text(json.dumps(GOOD) + "\n", encoding="utf-8")
    assert "1 inserted" in invoke(second_url, "import", str(path)).stdout
    with psycopg.connect(second_url) as c:
        row = c.execute("select prompt_tokens, completion_tokens, cost_usd, seconds, now() - created_at < "
                        "interval '1 minute' from stark.llm_cache").fetchone()
    assert row == (None, None, None, None, True)


# -- end to end: an LLM method's answers carried to another database ------------------------------------

SKB = "synthetic-cache-io"


@pytest.fixture(scope="module")
def skb_database(server_url, template_db):
    """The name of a database holding a small synthetic SKB with BM25 (what hyde with retriever=bm25
    needs), no one connected: a template for the two databases of the replay test."""
    from loaders.synthetic import SyntheticSource
    from stark_pg.db import connect
    from stark_pg.index.lexical import build_lexical
    from stark_pg.skb.store import load_skb

    with cloned_database(server_url, template_db, "stark_cache_skb") as url:
        with connect(url) as c:
            load_skb(c, SyntheticSource(nodes=300, seed=11, edges_per_node=5), SKB)
            build_lexical(c, SKB)
        yield conninfo_to_dict(url)["dbname"]


@pytest.fixture(scope="module")
def llm():
    server = FakeLLMServer().start()
    yield server
    server.stop()


def test_a_replay_in_a_rebuilt_database_makes_no_request(server_url, skb_database, llm, tmp_path):
    from stark_pg.db import connect
    from stark_pg.eval import query_sets
    from stark_pg.eval.runner import run_method
    from stark_pg.retrieve import get_method

    llm.responder = lambda kind, body: json.dumps({"document": "name: " + user_text(kind, body)[-60:]})

    def hyde(conn, cache: str):
        skb_id = conn.execute("select stark.skb_id(%s)", (SKB,)).fetchone()[0]
        val = query_sets.from_split(conn, skb_id, "val")
        val.queries = val.queries[:5]
        options = get_method("hyde").Options(llm="openai:fake-hyde", base_url=llm.openai_url, cache=cache,
                                             retriever="bm25")
        run = run_method(conn, skb_id, SKB, "hyde", options, val, depth=20, resolve=get_method)
        ranked = dict(conn.execute("select query_id, ranked_ids from stark.eval_result where run_id = %s",
                                   (run.run_id,)).fetchall())
        return run.summary, ranked

    path = tmp_path / "hyde-cache.jsonl.gz"
    with cloned_database(server_url, skb_database, "stark_cache_run") as first_url, \
            cloned_database(server_url, skb_database, "stark_cache_replay") as fresh_url:
        with connect(first_url) as conn:
            summary, ranked = hyde(conn, "use")
        assert summary["failed"] == 0 and summary["llm"]["calls"] == 5 and len(llm.requests) == 5
        assert "5 rows" in invoke(first_url, "export", str(path)).stdout

        with connect(fresh_url) as conn:
            missed, _ = hyde(conn, "only")                      # nothing cached there yet: every query fails
        assert missed["failed"] == 5
        assert "5 inserted" in invoke(fresh_url, "import", str(path)).stdout
        with connect(fresh_url) as conn:
            replayed, replayed_ranked = hyde(conn, "only")
        assert len(llm.requests) == 5                              # the fake server heard nothing more
        assert replayed["failed"] == 0 and replayed["llm"]["calls"] == 0 and replayed["llm"]["cache_hits"] == 5
        assert replayed_ranked == ranked
