"""`POST /v1/embeddings` of `stark-pg serve`: OpenAI's embeddings protocol over stark-pg's own encoder.

Why here: `stark.embed` (sql/functions/embed.sql) needs a question's vector from inside PostgreSQL, and
for `stark.search` to rank as `stark-pg search` does, the vector must be the one `stark-pg search`
computes. So this endpoint embeds with `stark_pg.embed.encode_query`, one text at a time as search does
(a batch is padded together, which moves the last bits of a vector). Any OpenAI-compatible client can
call it too.

Only the models this database uses are served: those it has document vectors of (stark.embedding_model),
and the query encoders its stored mFAR and fusion models name. Anything else is OpenAI's `404
model_not_found`, so the endpoint never loads an arbitrary model name or path it is sent. It reads the
database and writes nothing.
"""

from __future__ import annotations

import base64

import numpy as np
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse

from stark_pg.resources import queries as sql

MAX_INPUTS = 2048          # OpenAI's bound on the texts of one request


class EmbeddingError(Exception):
    """A request the endpoint refuses, as OpenAI's protocol reports it: status, message, type, param, code."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind

    def response(self) -> JSONResponse:
        return JSONResponse({"error": {"message": self.message, "type": self.kind, "param": self.param,
                                       "code": self.code}}, status_code=self.status)


def parse_request(payload) -> tuple[list[str], str, str, bool]:
    """(texts, model, encoding_format, whether input was one string) of a request body, or EmbeddingError."""
    if not isinstance(payload, dict):
        raise EmbeddingError(400, "the body must be a JSON object with `input` and `model`")
    model = payload.get("model")
    if not isinstance(model, str) or not model.strip():
        raise EmbeddingError(400, "you must provide a model parameter (a model name)", "model")
    text = payload.get("input")
    single = isinstance(text, str)
    texts = [text] if single else text
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise EmbeddingError(400, "input must be a string or a non-empty list of strings (token arrays are not "
                                  "accepted)", "input")
    if len(texts) > MAX_INPUTS:
        raise EmbeddingError(400, f"input holds {len(texts)} texts, at most {MAX_INPUTS} a request", "input")
    if any(not t.strip() for t in texts):
        raise EmbeddingError(400, "input texts must not be empty", "input")
    encoding = payload.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise EmbeddingError(400, f"encoding_format must be float or base64, not {encoding!r}", "encoding_format")
    if payload.get("dimensions") is not None:
        raise EmbeddingError(400, "dimensions is not supported: the vectors have the model's own size", "dimensions")
    return texts, model, encoding, single


def served_models(conn) -> list[str]:
    """The model names this database uses for queries (see the module's docstring), sorted."""
    return sorted({name for (name,) in sql().served_embedding_models(conn) if name})


def model_encoders(conn) -> dict:
    """Per model, the encoder its most recent build recorded (a request names a model, not an SKB: where
    SKBs of one model were built with different encoders, the latest build's is served)."""
    from stark_pg.embed import Encoder

    return {name: Encoder.from_record(record) for name, record in sql().model_encoders(conn)}


def embed_texts(texts: list[str], model: str, encoder=None) -> tuple[list[np.ndarray], int]:
    """Each text's vector as `stark-pg search` computes it (with `encoder`, the backend the model's vectors
    were built with; None: torch), and how many tokens the model read."""
    from stark_pg.embed import count_tokens, encode_query

    vectors = [encode_query(t, model, encoder) for t in texts]
    return vectors, count_tokens(texts, model, encoder)


def reply(vectors: list[np.ndarray], model: str, tokens: int, encoding: str) -> dict:
    def encoded(v: np.ndarray):
        if encoding == "base64":
            return base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode("ascii")
        return [float(x) for x in v]

    return {"object": "list", "model": model,
            "data": [{"object": "embedding", "index": i, "embedding": encoded(v)} for i, v in enumerate(vectors)],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


def embeddings_route(store, problem_of):
    """The handler of POST /v1/embeddings over `store` (the app's read-only connections); `problem_of`
    turns an expected failure (the database, a model out of reach) into a status and one line."""

    def answer(payload) -> dict:
        from stark_pg.embed import canonical_name

        texts, model, encoding, _ = parse_request(payload)
        with store.connect() as conn:
            known = served_models(conn)
            encoders = model_encoders(conn)
        name = canonical_name(model)
        if name not in known and f"openai:{name}" in known:     # stark.embed asks for `openai:NAME` as NAME
            name = f"openai:{name}"
        if name not in known:
            raise EmbeddingError(404, f"the model {model!r} does not exist here: this endpoint serves the models "
                                      f"the database uses ({', '.join(known) or 'none yet: run stark-pg index'})",
                                 "model", "model_not_found")
        vectors, tokens = embed_texts(texts, name, encoders.get(name))
        return reply(vectors, model, tokens, encoding)

    async def handle(request: Request):
        try:
            try:
                payload = await request.json()
            except ValueError:
                raise EmbeddingError(400, "the body is not JSON: send {\"model\": ..., \"input\": ...}") from None
            return JSONResponse(await run_in_threadpool(answer, payload))
        except EmbeddingError as exc:
            return exc.response()
        except Exception as exc:
            problem = problem_of(exc)
            if problem is None:
                raise
            return EmbeddingError(problem.status, problem.message, kind="server_error" if problem.status >= 500
                                  else "invalid_request_error").response()

    return handle
