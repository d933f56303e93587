"""The LLM steps of STaRK's construction (section 3.3, steps 2-4): textual requirements read from the
gold answer's document in a role, fused with the relational requirement into a question in two stages
(compose, then rephrase), and every candidate checked against the requirements by two verifiers.

Only one model is at hand here, where STaRK used three, so the two verifiers are independent prompts:
one asks for a single yes or no over all requirements, the other for a verdict per requirement. A
candidate is an answer only when both accept it; the second is not asked when the first refuses. All
calls go through LLMClient (structured replies, stark.llm_cache), so a re-run replays for nothing.
The prompts are ours; PROMPT_VERSION changes whenever one does (it is stored with each question).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pydantic import BaseModel, Field, field_validator

from stark_pg.llm import LLMClient, LLMInvalidOutput
from stark_pg.llm.concurrency import ordered_map
from stark_pg.synthesize.prefilter import shortlist
from stark_pg.synthesize.templates import Role

PROMPT_VERSION = "synth-4"
MAX_REQUIREMENTS = 3
MIN_WORDS = 2          # a one-word requirement is a field's name ("description"), not a property


class Requirements(BaseModel):
    requirements: list[str] = Field(min_length=1, max_length=6)
    negative: list[str] = Field(default_factory=list, max_length=6)

    @field_validator("requirements", "negative")
    @classmethod
    def _texts(cls, values: list[str]) -> list[str]:
        return [v.strip() for v in values if isinstance(v, str) and v.strip()]


class Question(BaseModel):
    question: str = Field(min_length=8)


class Satisfies(BaseModel):
    satisfies: bool


class PerRequirement(BaseModel):
    supported: list[bool] = Field(min_length=1)


@dataclass
class Made:
    """What the LLM steps made of one (instantiation, gold) pair."""
    outcome: str  # kept | gold rejected | anchors missing | names the gold | no requirements | invalid reply
    question: str | None = None
    requirements: dict = field(default_factory=dict)
    verdicts: dict = field(default_factory=dict)   # node id -> {"one": bool, "each": [bool] | None}
    answers: list[int] = field(default_factory=list)
    requests: int = 0                    # requests asked, cache hits included (the same on a replay)
    calls: int = 0                       # of which sent to the provider (0 on a replay)
    seconds: float = 0.0                 # the provider's time


def extract_requirements(client: LLMClient, role: Role, answer_type: str, document: str, name: str,
                         negatives: bool) -> tuple[Requirements, list]:
    """Step 2: what a person in `role` might require that this document shows. Requirements that
    give the answer's name away are dropped here (a question naming its answer is no question), and
    so are those of fewer than MIN_WORDS words (small models list the entry's field names)."""
    ask_negative = (f'\nUnder "negative", list what the entry says this {answer_type} lacks or does badly; '
                    "those will never be asked for." if negatives else "")
    messages = [
        {"role": "system", "content": f"You help write search questions. The person asking is a {role.name}: "
                                      f"{role.instruction}"},
        {"role": "user", "content": f"Entry of a knowledge base ({answer_type}):\n{document}\n\n"
                                    f"Copy 2 or 3 short phrases (2 to 12 words each) from the entry's text that "
                                    f"describe what this {answer_type} is, does or is involved in, as a {role.name} "
                                    f'might search for it. Do not include the name "{name}".{ask_negative}\n'
                                    'Reply with JSON only: {"requirements": ["<phrase from the entry>", '
                                    '"<phrase from the entry>"]'
                                    + (', "negative": ["<what it lacks>"]' if negatives else "") + "}"},
    ]
    reply, calls = client.chat_json(messages, Requirements, max_tokens=200)
    reply.requirements = [r for r in reply.requirements
                          if _flat(name) not in _flat(r) and len(r.split()) >= MIN_WORDS][:MAX_REQUIREMENTS]
    return reply, calls


def compose(client: LLMClient, role: Role, answer_type: str, relational: str, requirements: list[str],
            anchors: list[str]) -> tuple[str, list]:
    """Step 3, first stage: one question that asks for the relational and the textual requirements."""
    listed = "\n".join(f"- {r}" for r in [relational, *requirements])
    names = ", ".join(f'"{a}"' for a in anchors)
    messages = [
        {"role": "system", "content": f"You write the question a {role.name} would type into a search box. "
                                      f"{role.instruction}"},
        {"role": "user", "content": f"Write one natural question asking for {answer_type} entries that meet all of "
                                    f"these requirements:\n{listed}\nKeep the names {names} exactly as written; "
                                    "say the other requirements in your own words.\n"
                                    'Reply with JSON only: {"question": "..."}'},
    ]
    reply, calls = client.chat_json(messages, Question, max_tokens=160)
    return reply.question.strip(), calls


def rephrase(client: LLMClient, role: Role, answer_type: str, question: str, anchors: list[str],
             reminder: bool = False) -> tuple[str, list]:
    """Step 3, second stage: the question rephrased and given some context, its requirements kept."""
    names = ", ".join(f'"{a}"' for a in anchors)
    again = (f" Your last version dropped one of {names}: every one of them must appear word for word."
             if reminder else "")
    messages = [
        {"role": "system", "content": f"You rewrite search questions in the voice of a {role.name}. "
                                      f"{role.instruction}"},
        {"role": "user", "content": f"Rewrite this question about {answer_type} entries with different wording and, "
                                    "if it helps, one sentence of context. Keep every requirement and keep "
                                    f"{names} exactly as written.{again}\nQuestion: {question}\n"
                                    'Reply with JSON only: {"question": "..."}'},
    ]
    reply, calls = client.chat_json(messages, Question, max_tokens=200)
    return reply.question.strip(), calls


def verify(client: LLMClient, answer_type: str, requirements: list[str], document: str) -> tuple[dict, list]:
    """Step 4 for one candidate: both verifiers' verdicts ({"one": bool, "each": [bool] or None})."""
    listed = "\n".join(f"{i}. {r}" for i, r in enumerate(requirements, start=1))
    one, calls = client.chat_json([
        {"role": "system", "content": "You check entries of a knowledge base against requirements. Answer only "
                                      "from the entry's text."},
        {"role": "user", "content": f"Entry ({answer_type}):\n{document}\n\nRequirements:\n{listed}\n\n"
                                    "Does the entry meet every requirement? "
                                    'Reply with JSON only: {"satisfies": true} or {"satisfies": false}'},
    ], Satisfies, max_tokens=20)
    verdict = {"one": one.satisfies, "each": None}
    if not one.satisfies:
        return verdict, calls
    each, more = client.chat_json([
        {"role": "system", "content": "You are a careful fact checker. A requirement is supported only if the "
                                      "text states it or directly implies it."},
        {"role": "user", "content": f"Requirements:\n{listed}\n\nText:\n{document}\n\nFor each requirement in "
                                    f"order, is it supported by the text? Reply with JSON only: "
                                    '{"supported": [...]} holding one true or false per requirement, in order.'},
    ], PerRequirement, max_tokens=60)
    verdict["each"] = each.supported
    return verdict, calls + more


def accepted(verdict: dict, requirements: int) -> bool:
    """Both verifiers agree: the first said yes and the second supports every requirement."""
    each = verdict.get("each")
    return bool(verdict.get("one")) and each is not None and len(each) >= requirements and all(each[:requirements])


def has_names(question: str, anchors: list[str]) -> bool:
    """Every anchor's name appears in the question (case and spacing aside)."""
    flat = _flat(question)
    return all(_flat(a) in flat for a in anchors)


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().casefold()


def make_question(client: LLMClient, *, role: Role, answer_type: str, relational: str, anchors: list[str],
                  gold: int, gold_name: str, documents: dict[int, str], candidates: list[int],
                  negatives: bool, prefilter: int | None = None) -> Made:
    """Steps 2-4 for one instantiation and its gold answer; with `prefilter`, at most that many
    candidates (the gold and those nearest the requirements, prefilter.py) are verified."""
    with client.metered() as meter:
        try:
            made = _steps(client, role, answer_type, relational, anchors, gold, gold_name, documents, candidates,
                          negatives, prefilter)
        except LLMInvalidOutput as exc:
            made = Made("invalid reply", requirements={"role": role.name, "relational": relational,
                                                       "error": str(exc)[:300]})
    made.requests = meter.calls + meter.cache_hits
    made.calls = meter.calls
    made.seconds = round(meter.seconds, 3)
    return made


def _steps(client, role, answer_type, relational, anchors, gold, gold_name, documents, candidates,
           negatives, prefilter) -> Made:
    found, _ = extract_requirements(client, role, answer_type, documents[gold], gold_name, negatives)
    requirements = {"role": role.name, "relational": relational, "textual": found.requirements,
                    "negative": found.negative}
    if not found.requirements:
        return Made("no requirements", requirements=requirements)
    composed, _ = compose(client, role, answer_type, relational, found.requirements, anchors)
    question, _ = rephrase(client, role, answer_type, composed, anchors)
    if not has_names(question, anchors):
        question, _ = rephrase(client, role, answer_type, composed, anchors, reminder=True)
    requirements["composed"] = composed
    if not has_names(question, anchors):
        return Made("anchors missing", question=question, requirements=requirements)
    if _flat(gold_name) in _flat(question):
        return Made("names the gold", question=question, requirements=requirements)
    def verdict(node: int) -> dict:
        try:
            return verify(client, answer_type, found.requirements, documents[node])[0]
        except LLMInvalidOutput as exc:       # an unusable verdict accepts nothing
            return {"one": None, "each": None, "error": str(exc)[:200]}

    verdicts = {str(gold): verdict(gold)}
    if not accepted(verdicts[str(gold)], len(found.requirements)):
        # the others are not asked about: the item is dropped whatever they would say
        return Made("gold rejected", question=question, requirements=requirements, verdicts=verdicts)
    others = [c for c in candidates if c != gold]
    asked = others if prefilter is None else shortlist(found.requirements, documents, others, prefilter - 1)
    # independent of one another: up to --workers at once (stark_pg.llm.concurrency), kept in order
    verdicts.update(zip(map(str, asked), ordered_map(verdict, asked)))
    verdicts.update({str(c): {"one": None, "each": None, "prefiltered": True} for c in others if c not in asked})
    answers = sorted(c for c in candidates if accepted(verdicts[str(c)], len(found.requirements)))
    return Made("kept", question=question, requirements=requirements, verdicts=verdicts, answers=answers)
