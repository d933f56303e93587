"""A local HTTP server speaking the OpenAI chat-completions and embeddings and the Anthropic messages protocols.

The real SDK clients talk to it through their base_url, so the tests exercise the same code as a
run against OpenAI, Anthropic or a vLLM/llama.cpp server, without a network or a model. What it
answers is up to the test: a `responder(kind, body)` returning the reply text, or a scripted queue
of replies (text, HTTP errors, delays) consumed first. Every request is recorded.

`/v1/embeddings` answers each input with `fake_embedding(text, dim)`: a deterministic vector made from
the text's sha256 (the same text always gets the same vector, different texts nearly orthogonal
ones), `embedding_dim` long, as floats or base64 float32 as the request's encoding_format asks (the
openai SDK asks for base64 unless told otherwise). Scripted errors and delays apply to it too; its
usage reports `embedding_tokens_per_text` prompt tokens per input.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np


@dataclass
class Scripted:
    """One scripted answer: reply text, or an HTTP error status; optionally after a delay."""

    text: str | None = None
    status: int = 200
    delay: float = 0.0
    headers: dict = field(default_factory=dict)


class _Server(ThreadingHTTPServer):
    """A listen backlog for many clients at once (the standard library's 5 would refuse the rest of
    16 workers' first connections, and the SDK would retry them, as a real server never makes it)."""

    request_queue_size = 128


class FakeLLMServer:
    def __init__(self):
        self.requests: list[dict] = []          # {"kind": "openai"|"anthropic", "path", "body", "headers"}
        self.script: list[Scripted] = []
        self.responder = lambda kind, body: '{"ok": true}'
        self.usage = (11, 7)                    # prompt/input and completion/output tokens reported
        self.embedding_dim = 8                  # length of the vectors /v1/embeddings returns
        self.embedding_tokens_per_text = 5      # prompt tokens reported per embedded input
        self._lock = threading.Lock()
        self._httpd = _Server(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def openai_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeLLMServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _next(self, kind: str, body: dict) -> Scripted:
        with self._lock:
            if self.script:
                return self.script.pop(0)
        answer = self.responder(kind, body)
        return answer if isinstance(answer, Scripted) else Scripted(text=answer)

    def _next_embedding(self, body: dict) -> Scripted:
        """A scripted error or delay if one is queued, else a plain answer (the vectors come from the texts)."""
        with self._lock:
            if self.script:
                return self.script.pop(0)
        return Scripted(text="")

    def _embeddings(self, body: dict) -> dict:
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        as_base64 = body.get("encoding_format") == "base64"
        data = []
        for i, text in enumerate(texts):
            vector = fake_embedding(text, self.embedding_dim)
            data.append({"object": "embedding", "index": i,
                         "embedding": base64.b64encode(vector.astype("<f4").tobytes()).decode() if as_base64
                         else vector.tolist()})
        tokens = self.embedding_tokens_per_text * len(texts)
        return {"object": "list", "model": body.get("model"), "data": data,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

    def _handler_class(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path.endswith("/chat/completions"):
                    kind = "openai"
                elif self.path.endswith("/v1/messages"):
                    kind = "anthropic"
                elif self.path.endswith("/embeddings"):
                    kind = "embeddings"
                else:
                    return self._send(404, {"error": {"message": f"no route {self.path}"}})
                with server._lock:
                    server.requests.append({"kind": kind, "path": self.path, "body": body,
                                            "headers": {k.lower(): v for k, v in self.headers.items()}})
                answer = server._next(kind, body) if kind != "embeddings" else server._next_embedding(body)
                if answer.delay:
                    time.sleep(answer.delay)
                if answer.status != 200:
                    error = ({"error": {"message": f"scripted {answer.status}", "type": "server_error"}}
                             if kind != "anthropic" else
                             {"type": "error", "error": {"type": "api_error", "message": f"scripted {answer.status}"}})
                    return self._send(answer.status, error, answer.headers)
                prompt, completion = server.usage
                if kind == "embeddings":
                    payload = server._embeddings(body)
                elif kind == "openai":
                    payload = {"id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
                               "model": body.get("model"),
                               "choices": [{"index": 0, "finish_reason": "stop",
                                            "message": {"role": "assistant", "content": answer.text}}],
                               "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                         "total_tokens": prompt + completion}}
                else:
                    payload = {"id": "msg_fake", "type": "message", "role": "assistant", "model": body.get("model"),
                               "content": [{"type": "text", "text": answer.text}], "stop_reason": "end_turn",
                               "stop_sequence": None,
                               "usage": {"input_tokens": prompt, "output_tokens": completion}}
                self._send(200, payload, answer.headers)

            def _send(self, status: int, payload: dict, headers: dict | None = None):
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for key, value in (headers or {}).items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass   # the client gave up (a timeout test)

        return Handler


def user_text(kind: str, body: dict) -> str:
    """The last user message of a request, whichever protocol."""
    return [m for m in body["messages"] if m["role"] == "user"][-1]["content"]


def embedding_requests(server: FakeLLMServer) -> list[dict]:
    """The /v1/embeddings requests the server received, in order."""
    return [r for r in server.requests if r["kind"] == "embeddings"]


def fake_embedding(text: str, dim: int = 8) -> np.ndarray:
    """The unit vector the fake server returns for `text`: seeded by the text's sha256, so it is the
    same on every call and for every test, without a model."""
    seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")
    vector = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return vector / np.linalg.norm(vector)
