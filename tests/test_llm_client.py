"""The LLM layer against a local server speaking the OpenAI and Anthropic protocols (real SDK clients).

Covers the cache (hits make no request, `only` and `refresh`), the SDKs' retries and timeouts as
we configure them, token counts, cost and meters, structured replies with one repair, the Anthropic
path, and how the LLM is chosen from options and the environment.
"""

from __future__ import annotations

import json

import psycopg
import pytest
from pydantic import BaseModel, Field

from fake_llm_server import FakeLLMServer, Scripted, user_text
from stark_pg.llm import (LLMCacheMiss, LLMCallFailed, LLMClient, LLMError, LLMInvalidOutput, LLMSettings,
                          client_from_options)
from stark_pg.llm.cache import LLMCache

ENV = ("STARK_PG_LLM", "STARK_PG_LLM_BASE_URL", "STARK_PG_LLM_ENDPOINT", "STARK_PG_LLM_CACHE", "STARK_PG_LLM_TIMEOUT", "STARK_PG_LLM_RETRIES",
       "OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")
HELLO = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello."}]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server():
    fake = FakeLLMServer().start()
    fake.responder = lambda kind, body: f"echo: {user_text(kind, body)}"
    yield fake
    fake.stop()


def openai_client(conn, server, model="qwen-test", **options) -> LLMClient:
    return client_from_options(conn, llm=f"openai:{model}", base_url=server.openai_url, **options)


def cache_rows(conn) -> list[tuple]:
    return conn.execute("select provider, model, response->>'text', prompt_tokens, completion_tokens "
                        "from stark.llm_cache order by created_at").fetchall()


# --- cache --------------------------------------------------------------------------------------

def test_a_second_identical_call_is_answered_from_the_cache(conn, server):
    client = openai_client(conn, server)
    first = client.chat(HELLO)
    assert first.text == "echo: Say hello." and not first.cached and first.seconds > 0
    assert len(server.requests) == 1
    sent = server.requests[0]["body"]
    assert sent["messages"] == HELLO and sent["model"] == "qwen-test" and sent["temperature"] == 0.0
    again = openai_client(conn, server).chat(HELLO)       # a new client: the cache is in the database
    assert again.text == first.text and again.cached and again.seconds == 0
    assert len(server.requests) == 1
    assert cache_rows(conn) == [("openai", "qwen-test", "echo: Say hello.", 11, 7)]
    # a different request (another max_tokens) is another key
    openai_client(conn, server).chat(HELLO, max_tokens=5)
    assert len(server.requests) == 2 and len(cache_rows(conn)) == 2


def test_cache_only_fails_on_a_miss_without_calling_and_replays_a_hit(conn, server):
    with pytest.raises(LLMCacheMiss, match="cache=only"):
        openai_client(conn, server, cache="only").chat(HELLO)
    assert server.requests == [] and cache_rows(conn) == []
    openai_client(conn, server).chat(HELLO)
    assert openai_client(conn, server, cache="only").chat(HELLO).cached
    assert len(server.requests) == 1


def test_cache_only_needs_no_api_key(conn, server, monkeypatch):
    openai_client(conn, server).chat(HELLO)
    monkeypatch.setenv("STARK_PG_LLM_ENDPOINT", server.openai_url)    # the server that answered, declared
    replay = client_from_options(conn, llm="openai:qwen-test", cache="only")   # no base_url, no OPENAI_API_KEY
    assert replay.chat(HELLO).text == "echo: Say hello."


def test_cache_refresh_calls_again_and_overwrites(conn, server):
    openai_client(conn, server).chat(HELLO)
    server.responder = lambda kind, body: "a newer answer"
    fresh = openai_client(conn, server, cache="refresh").chat(HELLO)
    assert fresh.text == "a newer answer" and not fresh.cached and len(server.requests) == 2
    assert [row[2] for row in cache_rows(conn)] == ["a newer answer"]
    assert openai_client(conn, server).chat(HELLO).text == "a newer answer"


def test_cache_mode_from_the_environment(conn, server, monkeypatch):
    monkeypatch.setenv("STARK_PG_LLM_CACHE", "only")
    with pytest.raises(LLMCacheMiss):
        openai_client(conn, server).chat(HELLO)
    assert server.requests == []


def test_a_cached_answer_survives_the_callers_rollback(conn, db_url, server):
    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        with conn.transaction():
            conn.execute("create table public.scratch (x int)")
            openai_client(conn, server).chat(HELLO)
            raise Boom
    with psycopg.connect(db_url) as other:
        assert other.execute("select count(*) from stark.llm_cache").fetchone()[0] == 1
        assert other.execute("select to_regclass('public.scratch')").fetchone()[0] is None
    assert openai_client(conn, server).chat(HELLO).cached


def test_the_cache_key_ignores_dict_order_but_not_the_server(conn, server, monkeypatch):
    client = openai_client(conn, server)
    client.chat([{"content": "Say hello.", "role": "user"}])
    assert openai_client(conn, server).chat([{"role": "user", "content": "Say hello."}]).cached
    other = FakeLLMServer().start()
    try:
        moved = client_from_options(conn, llm="openai:qwen-test", base_url=other.openai_url)
        assert not moved.chat([{"role": "user", "content": "Say hello."}]).cached   # another server answers
        assert len(other.requests) == 1
        monkeypatch.setenv("STARK_PG_LLM_ENDPOINT", server.openai_url)              # declared: the same model
        declared = client_from_options(conn, llm="openai:qwen-test", base_url=other.openai_url)
        assert declared.chat([{"role": "user", "content": "Say hello."}]).cached and len(other.requests) == 1
    finally:
        other.stop()
    stored = conn.execute("select request from stark.llm_cache order by created_at").fetchone()[0]
    assert stored["base_url"] == server.openai_url and stored["endpoint"] == server.openai_url.rstrip("/")
    assert stored["messages"] == [{"role": "user", "content": "Say hello."}]


def test_a_local_servers_answer_is_not_replayed_as_the_providers(conn, server, monkeypatch):
    openai_client(conn, server).chat(HELLO)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    official = client_from_options(conn, llm="openai:qwen-test", cache="only")
    assert official.settings.endpoint == ""
    with pytest.raises(LLMCacheMiss):
        official.chat(HELLO)


# --- retries, timeouts, errors ------------------------------------------------------------------

def test_server_errors_and_rate_limits_are_retried_then_succeed(conn, server):
    server.script = [Scripted(status=500), Scripted(status=429, headers={"retry-after-ms": "10"}),
                     Scripted(text="finally")]
    client = client_from_options(conn, llm="openai:qwen-test", base_url=server.openai_url)
    assert client.settings.max_retries == 3
    completion = client.chat(HELLO)
    assert completion.text == "finally" and len(server.requests) == 3
    # the SDK's backoff waited about 0.5 s after the 500 (jitter up to -25%) and 10 ms after the 429
    assert completion.seconds >= 0.35
    assert server.requests[2]["headers"].get("x-stainless-retry-count") == "2"


def test_errors_left_after_the_retries_are_llm_call_failed(conn, server, monkeypatch):
    monkeypatch.setenv("STARK_PG_LLM_RETRIES", "1")
    server.responder = lambda kind, body: Scripted(status=503)
    with pytest.raises(LLMCallFailed, match=r"openai:qwen-test at http://127\.0\.0\.1:\d+/v1/: HTTP 503"):
        openai_client(conn, server).chat(HELLO)
    assert len(server.requests) == 2 and cache_rows(conn) == []


def test_a_client_error_is_not_retried(conn, server):
    server.responder = lambda kind, body: Scripted(status=400)
    with pytest.raises(LLMCallFailed, match="HTTP 400"):
        openai_client(conn, server).chat(HELLO)
    assert len(server.requests) == 1


def test_a_timeout_is_llm_call_failed(conn, server, monkeypatch):
    monkeypatch.setenv("STARK_PG_LLM_RETRIES", "0")
    server.responder = lambda kind, body: Scripted(text="too late", delay=1.5)
    client = openai_client(conn, server, timeout=0.3)
    with pytest.raises(LLMCallFailed, match=r"timed out after 0\.3 s"):
        client.chat(HELLO)
    assert cache_rows(conn) == []


def test_an_unreachable_server_is_llm_call_failed(conn, monkeypatch):
    monkeypatch.setenv("STARK_PG_LLM_RETRIES", "0")
    client = client_from_options(conn, llm="openai:qwen-test", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(LLMCallFailed, match="127.0.0.1:9"):
        client.chat(HELLO)


# --- tokens, cost, meters -----------------------------------------------------------------------

def test_tokens_cost_and_the_meter(conn, server):
    server.usage = (1000, 200)
    client = openai_client(conn, server, model="gpt-4o-mini")
    with client.metered() as outer:
        with client.metered() as inner:
            first = client.chat(HELLO)
        second = client.chat(HELLO)                  # a cache hit
        client.chat([{"role": "user", "content": "Another."}])
    assert (first.prompt_tokens, first.completion_tokens) == (1000, 200)
    assert first.cost_usd == pytest.approx((1000 * 0.15 + 200 * 0.60) / 1e6)
    assert second.cached and second.cost_usd == 0.0 and (second.prompt_tokens, second.completion_tokens) == (1000, 200)
    assert inner.as_dict()["calls"] == 1
    usage = outer.as_dict()
    assert usage["provider"] == "openai" and usage["model"] == "gpt-4o-mini"
    assert (usage["calls"], usage["cache_hits"], usage["prompt_tokens"], usage["completion_tokens"]) == (2, 1, 3000, 600)
    assert usage["cost_usd"] == pytest.approx(2 * (1000 * 0.15 + 200 * 0.60) / 1e6)
    assert usage["seconds"] > 0
    json.dumps(usage)
    stored = conn.execute("select cost_usd, seconds from stark.llm_cache order by created_at").fetchall()
    assert stored[0][0] == pytest.approx(first.cost_usd) and stored[0][1] > 0


def test_an_unknown_model_has_no_cost(conn, server):
    client = openai_client(conn, server)
    with client.metered() as meter:
        completion = client.chat(HELLO)
    assert completion.cost_usd is None and meter.as_dict()["cost_usd"] is None


# --- structured replies -------------------------------------------------------------------------

class Verdict(BaseModel):
    label: str
    confidence: float = Field(ge=0, le=1)


def test_json_is_found_in_fences_and_prose(conn, server):
    server.script = [Scripted(text='Here you go:\n```json\n{"label": "yes", "confidence": 0.9}\n```'),
                     Scripted(text='I think {"label": "no", "confidence": 0.2} fits.')]
    client = openai_client(conn, server)
    value, completions = client.chat_json(HELLO, Verdict)
    assert value == Verdict(label="yes", confidence=0.9) and len(completions) == 1
    value, _ = client.chat_json(HELLO + [{"role": "user", "content": "again"}], Verdict)
    assert value.label == "no"


def test_an_invalid_reply_is_repaired_once(conn, server):
    server.script = [Scripted(text='{"label": "yes", "confidence": 7}'),
                     Scripted(text='{"label": "yes", "confidence": 0.7}')]
    value, completions = openai_client(conn, server).chat_json(HELLO, Verdict)
    assert value.confidence == 0.7 and len(completions) == 2
    repair = server.requests[1]["body"]["messages"]
    assert repair[:2] == HELLO and repair[2] == {"role": "assistant", "content": '{"label": "yes", "confidence": 7}'}
    assert "confidence" in repair[3]["content"] and "less than or equal to 1" in repair[3]["content"]
    # replayed from the cache, the repair happens the same way without calls
    value, completions = openai_client(conn, server).chat_json(HELLO, Verdict)
    assert value.confidence == 0.7 and all(c.cached for c in completions) and len(server.requests) == 2


def test_two_invalid_replies_are_llm_invalid_output(conn, server):
    server.script = [Scripted(text="yes, definitely"), Scripted(text='{"label": "yes"}')]
    with pytest.raises(LLMInvalidOutput, match="Verdict") as caught:
        openai_client(conn, server).chat_json(HELLO, Verdict)
    assert caught.value.text == '{"label": "yes"}' and len(caught.value.errors) == 2
    assert "no JSON" in caught.value.errors[0] and "confidence" in caught.value.errors[1]
    assert len(server.requests) == 2


# --- anthropic ----------------------------------------------------------------------------------

def test_the_anthropic_path(conn, server, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    server.usage = (100, 10)
    client = client_from_options(conn, llm="anthropic:claude-haiku-4-5", base_url=server.anthropic_url)
    completion = client.chat(HELLO, max_tokens=64)
    assert completion.text == "echo: Say hello." and completion.finish_reason == "end_turn"
    assert (completion.prompt_tokens, completion.completion_tokens) == (100, 10)
    assert completion.cost_usd == pytest.approx((100 * 1.00 + 10 * 5.00) / 1e6)
    request = server.requests[0]
    assert request["kind"] == "anthropic" and "anthropic-version" in request["headers"]
    # the key from ANTHROPIC_API_KEY (this SDK version sends it as a bearer token, older ones as x-api-key)
    sent_key = request["headers"].get("x-api-key") or request["headers"].get("authorization", "")
    assert sent_key.endswith("sk-ant-test")
    assert request["body"]["system"] == "Be brief." and request["body"]["max_tokens"] == 64
    assert request["body"]["messages"] == [{"role": "user", "content": "Say hello."}]
    assert client_from_options(conn, llm="anthropic:claude-haiku-4-5",
                               base_url=server.anthropic_url).chat(HELLO, max_tokens=64).cached
    assert conn.execute("select provider from stark.llm_cache").fetchone()[0] == "anthropic"


def test_anthropic_retries_and_structured_replies(conn, server, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    server.script = [Scripted(status=529), Scripted(text="not json"), Scripted(text='{"label":"ok","confidence":1}')]
    client = client_from_options(conn, llm="anthropic:claude-haiku-4-5", base_url=server.anthropic_url)
    value, completions = client.chat_json(HELLO, Verdict)
    assert value.label == "ok" and len(completions) == 2 and len(server.requests) == 3


# --- choosing the LLM ---------------------------------------------------------------------------

def test_no_llm_chosen_names_the_option_and_the_variable(conn):
    with pytest.raises(LLMError, match=r"-o llm=.*STARK_PG_LLM"):
        client_from_options(conn)


@pytest.mark.parametrize("spec, message", [("gpt-4o", "PROVIDER:MODEL"), ("mistral:large", "unknown provider"),
                                           ("openai:", "PROVIDER:MODEL")])
def test_bad_llm_specs(conn, spec, message):
    with pytest.raises(LLMError, match=message):
        client_from_options(conn, llm=spec)


def test_bad_cache_mode_and_timeout(conn, monkeypatch):
    with pytest.raises(LLMError, match="cache='sometimes'"):
        client_from_options(conn, llm="openai:gpt-4o", cache="sometimes")
    monkeypatch.setenv("STARK_PG_LLM_TIMEOUT", "soon")
    with pytest.raises(LLMError, match="STARK_PG_LLM_TIMEOUT"):
        client_from_options(conn, llm="openai:gpt-4o")


def test_settings_from_the_environment(conn, server, monkeypatch):
    monkeypatch.setenv("STARK_PG_LLM", "openai:from-env")
    monkeypatch.setenv("STARK_PG_LLM_BASE_URL", server.openai_url)
    monkeypatch.setenv("STARK_PG_LLM_TIMEOUT", "12.5")
    monkeypatch.setenv("STARK_PG_LLM_RETRIES", "0")
    client = client_from_options(conn)
    assert client.settings == LLMSettings("openai", "from-env", server.openai_url, "use", 12.5, 0,
                                          server.openai_url.rstrip("/"))
    client.chat(HELLO)
    assert server.requests[0]["body"]["model"] == "from-env"
    # a keyless server gets a placeholder key; options win over the environment
    assert server.requests[0]["headers"]["authorization"] == "Bearer no-key-needed"
    assert client_from_options(conn, llm="openai:from-option").settings.model == "from-option"


def test_the_providers_key_variable_is_used(conn, server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-123")
    openai_client(conn, server).chat(HELLO)
    assert server.requests[0]["headers"]["authorization"] == "Bearer sk-test-123"


def test_a_missing_key_without_a_base_url_is_a_clear_error(conn):
    with pytest.raises(LLMError, match="OPENAI_API_KEY is not set"):
        client_from_options(conn, llm="openai:gpt-4o").chat(HELLO)
    with pytest.raises(LLMError, match="ANTHROPIC_API_KEY is not set"):
        client_from_options(conn, llm="anthropic:claude-haiku-4-5").chat(HELLO)


@pytest.mark.parametrize("messages", [[], [{"role": "robot", "content": "hi"}], [{"role": "user"}], ["hi"]])
def test_bad_messages_are_rejected_before_any_call(conn, server, messages):
    with pytest.raises(LLMError, match="messages"):
        openai_client(conn, server).chat(messages)
    assert server.requests == []


def test_cache_writes_use_a_side_connection_only_inside_a_transaction(conn, server):
    cache = LLMCache(conn)
    assert cache._writer() is conn
    with conn.transaction():
        side = cache._writer()
        assert side is not conn and side.autocommit
    cache.close()
    assert side.closed
