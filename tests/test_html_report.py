"""`stark-pg eval --out DIR` writes report.html: self-contained, escaped, with every query's rankings.

The page is parsed (html.parser, with a check that every element closes in order) rather than looked
at in a browser: its structure and content are what a reader relies on.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser

import pytest

from conftest import IBD
from loaders.bundle import BundleSource
from stark_pg.index.lexical import build_lexical
from stark_pg.skb.store import load_skb

pytestmark = pytest.mark.skipif(not IBD.is_dir(), reason="../shared/data/stark-prime-ibd is not here")
VOID = {"meta", "img", "br", "hr", "link", "input"}
NASTY = '<script>alert("x")</script> drugs & "targets" that bind PPARG'


class Page(HTMLParser):
    """Elements as (tag, attrs, text inside), checking that every element is closed in order."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.elements: list[dict] = []
        self.stack: list[dict] = []
        self.feed(text)
        self.close()
        assert not self.stack, f"unclosed: {[e['tag'] for e in self.stack]}"

    def handle_starttag(self, tag, attrs):
        element = {"tag": tag, "attrs": dict(attrs), "text": "", "parent": self.stack[-1] if self.stack else None}
        self.elements.append(element)
        if tag not in VOID:
            self.stack.append(element)

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1]["tag"] == tag, f"</{tag}> closes {self.stack[-1]['tag']}"
        self.stack.pop()

    def handle_data(self, data):
        for element in self.stack:
            element["text"] += data

    def find(self, tag: str, **attrs) -> list[dict]:
        return [e for e in self.elements if e["tag"] == tag and all(e["attrs"].get(k) == v for k, v in attrs.items())]


def inside(element: dict, ancestor: dict) -> bool:
    while element is not None:
        if element is ancestor:
            return True
        element = element["parent"]
    return False


def test_eval_writes_a_self_contained_html_report(cli, conn, tmp_path):
    load_skb(conn, BundleSource(IBD))
    build_lexical(conn, "stark-prime-ibd")
    queries = tmp_path / "mine.csv"
    queries.write_text('id,query,answer_ids\n1,"' + NASTY.replace('"', '""') + '","[16610, 16255]"\n'
                       '2,interleukin 10 receptor,[179]\n3,nothing matches zzzqqq,[179]\n', encoding="utf-8")
    out = tmp_path / "report"
    result = json.loads(cli("eval", "stark-prime-ibd", "-m", "bm25,prf", "-o", "prf.retriever=bm25", "--queries",
                            queries, "--split", "all", "--out", out, "--json").stdout)
    html = (out / "report.html").read_text(encoding="utf-8")
    page = Page(html)

    # nothing outside the page: no scripts, no external links or sources; the chart is inline
    assert not page.find("script") and not page.find("link")
    assert "<script>" not in html                       # the query's own <script> is escaped text
    for element in page.elements:
        for attr in ("src", "href"):
            value = element["attrs"].get(attr)
            assert value is None or value.startswith(("#", "data:")), (element["tag"], attr, value)
    (img,) = page.find("img")
    assert img["attrs"]["src"].startswith("data:image/png;base64,") and len(img["attrs"]["src"]) > 5000
    assert page.find("style") and page.find("meta", charset="utf-8")

    # the metrics table: one row per method, with its run id
    (metrics,) = page.find("table", **{"class": "metrics"})
    rows = [e for e in page.find("tr") if inside(e, metrics)][1:]
    cells = [[c["text"] for c in page.find("td") if c["parent"] is r][:2] for r in rows]
    assert cells == [[m, str(result["methods"][m]["run_id"])] for m in ("bm25", "prf")]

    # every query has a section: its text, its answers, every method's ranking and trace
    sections = page.find("section", **{"class": "query"})
    assert [s["attrs"]["id"] for s in sections] == ["q-1", "q-2", "q-3"]
    first = sections[0]
    (text,) = [e for e in page.find("p", **{"class": "query-text"}) if inside(e, first)]
    assert text["text"] == NASTY
    answers = [e for e in page.find("li") if inside(e, first) and e["parent"]["attrs"].get("class") == "answers"]
    assert sorted(a["attrs"]["data-node"] for a in answers) == ["16255", "16610"]
    assert all("bm25:" in a["text"] and "prf:" in a["text"] for a in answers)
    for section in sections:
        methods = [e for e in page.find("div", **{"class": "method"}) if inside(e, section)]
        assert [m["attrs"]["data-method"] for m in methods] == ["bm25", "prf"]
        for method in methods:
            ranked = [e for e in page.find("li") if inside(e, method)]
            if section["attrs"]["id"] == "q-3":          # no document has these words: an empty ranking
                assert not ranked and "nothing ranked" in method["text"]
            else:
                assert 1 <= len(ranked) <= 10
            (trace,) = [e for e in page.find("details") if inside(e, method)]
            assert "trace" in trace["text"] and '"method"' in trace["text"]
    # an answer bm25 ranks in its top 10 is marked, and only answers are
    marked = [e for e in page.find("li", **{"class": "answer"}) if inside(e, first)]
    assert marked and {m["attrs"]["data-node"] for m in marked} <= {"16610", "16255"}
    assert all(m["text"].startswith("✓") for m in marked)
    unmarked = [e for e in page.find("li") if inside(e, first) and "class" not in e["attrs"]
                and e["parent"]["tag"] == "ol"]
    assert all(u["attrs"]["data-node"] not in {"16610", "16255"} for u in unmarked)
    # the overview links to each query and shows where each method ranked its first answer
    links = [e["attrs"]["href"] for e in page.find("a")]
    assert links == ["#q-1", "#q-2", "#q-3"]
