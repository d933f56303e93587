"""The LLM layer: providers through their official SDKs, a Postgres cache, meters, structured replies.

    client = client_from_options(conn, llm="openai:gpt-4o-mini")   # None: STARK_PG_LLM and friends
    completion = client.chat([{"role": "user", "content": "..."}])
    value, completions = client.chat_json(messages, SomePydanticModel)
    with client.metered() as meter: ...; trace["llm"] = meter.as_dict()

See settings.py for how the LLM is chosen, cache.py for stark.llm_cache, providers.py for retries
and timeouts, embeddings.py for embedding models served the same way (`openai:MODEL`).
"""

from stark_pg.llm.client import Completion, LLMClient, client_from_options
from stark_pg.llm.errors import LLMCacheMiss, LLMCallFailed, LLMError, LLMInvalidOutput
from stark_pg.llm.meter import Meter
from stark_pg.llm.settings import LLMSettings

__all__ = ["Completion", "LLMCacheMiss", "LLMCallFailed", "LLMClient", "LLMError", "LLMInvalidOutput",
           "LLMSettings", "Meter", "client_from_options"]
