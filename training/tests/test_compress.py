"""Compressors: extractive parity with Go (golden file), the LLM client against a local fake endpoint."""
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from icicle import compress
from icicle.compress import (CachedCompressor, Extractive, LLMCompressor, ResponseError, StatusError,
                             extractive, load_prompt, messages)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
GOLDEN = os.path.join(REPO, "internal", "compress", "testdata")


def test_extractive_matches_go_golden():
    with open(os.path.join(GOLDEN, "extractive.golden.json"), encoding="utf-8") as f:
        g = json.load(f)
    assert len(g["cases"]) >= 5
    for c in g["cases"]:
        assert extractive(c["text"]) == c["summary"], c["name"]
        assert Extractive().compress("any title", c["text"]) == c["summary"]
    # The separator set Go's compress.isPySpace is checked against is Python's own.
    assert g["python_whitespace"] == [c for c in range(sys.maxunicode + 1) if chr(c).isspace()]
    assert Extractive.id == "extractive-lead-120w"


def test_llm_id_and_messages_match_go_golden():
    with open(os.path.join(GOLDEN, "llm.golden.json"), encoding="utf-8") as f:
        g = json.load(f)
    c = LLMCompressor("http://127.0.0.1:1/v1", g["model"], max_tokens=g["max_tokens"], api_key="")
    assert c.id == g["id"]
    assert messages(c.prompt, g["title"], g["text"]) == g["messages"]
    assert c.prompt_hash in c.id


def test_prompt_is_appendix_d1():
    p, h = load_prompt()
    assert p["system"] == "You compress documents for retrieval/indexing datasets."
    for must in ("Write ONE retrieval-oriented summary.", "Target length: 256 tokens.", "Output ONLY the summary.",
                 "Preserve key entities, dates, definitions, aliases", "Title: {title}",
                 "Source Document:\n{document}", "Summary:"):
        assert must in p["user"]
    assert len(h) == 12


class FakeLLM:
    """A local OpenAI-compatible /v1/chat/completions endpoint; ``reply(n, request) -> (status, body)``."""

    def __init__(self, reply=None):
        self.requests = []
        self.reply = reply or (lambda n, req: (200, completion("summary of " + title_line(req))))
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                req = {"path": self.path, "auth": self.headers.get("Authorization"), "body": json.loads(raw)}
                fake.requests.append(req)
                status, body = fake.reply(len(fake.requests), req)
                data = body.encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def completion(content):
    return json.dumps({"id": "x", "object": "chat.completion", "choices": [
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}]})


def title_line(req):
    for m in req["body"]["messages"]:
        for line in m["content"].split("\n"):
            if line.startswith("Title: "):
                return line[len("Title: "):]
    return ""


@pytest.fixture
def fake_llm():
    made = []

    def make(reply=None):
        f = FakeLLM(reply)
        made.append(f)
        return f

    yield make
    for f in made:
        f.close()


def llm(url, retries=0, **kw):
    return LLMCompressor(url, "fake-14b", api_key="k-123", max_retries=retries, backoff=0.001, timeout=5, **kw)


def test_llm_request_shape(fake_llm):
    f = fake_llm()
    c = llm(f.url)
    assert c.compress("Roanoke Colony", "The Roanoke Colony was the first attempt ...") == "summary of Roanoke Colony"
    (r,) = f.requests
    assert r["path"] == "/v1/chat/completions"
    assert r["auth"] == "Bearer k-123"
    b = r["body"]
    assert b["model"] == "fake-14b" and b["temperature"] == 0 and b["max_tokens"] == 256
    p, _ = load_prompt()
    assert b["messages"][0] == {"role": "system", "content": p["system"]}
    user = b["messages"][1]
    assert user["role"] == "user"
    assert "Write ONE retrieval-oriented summary." in user["content"]
    assert "Title: Roanoke Colony\n" in user["content"]
    assert "Source Document:\nThe Roanoke Colony was the first attempt ...\n" in user["content"]
    assert "{document}" not in user["content"]
    assert c.id.startswith("llm:fake-14b:") and c.id.endswith(":256")


def test_llm_retries_5xx(fake_llm):
    f = fake_llm(lambda n, req: (503, '{"error": "warming up"}') if n < 3 else (200, completion("  third time lucky \n")))
    assert llm(f.url, retries=3).compress("T", "text") == "third time lucky"
    assert len(f.requests) == 3

    f2 = fake_llm(lambda n, req: (502, "upstream down"))
    with pytest.raises(StatusError) as e:
        llm(f2.url, retries=2).compress("T", "text")
    assert e.value.code == 502 and len(f2.requests) == 3


def test_llm_no_retry_on_4xx(fake_llm):
    f = fake_llm(lambda n, req: (401, '{"error": "bad key"}'))
    with pytest.raises(StatusError) as e:
        llm(f.url, retries=3).compress("T", "text")
    assert e.value.code == 401 and "bad key" in e.value.body and len(f.requests) == 1


@pytest.mark.parametrize("body,field,msg", [
    ("not json", "(body)", "not JSON"),
    ("[1, 2]", "(body)", "want a JSON object, got an array"),
    ('{"id": "x"}', "choices", "missing"),
    ('{"choices": {}}', "choices", "want an array, got an object"),
    ('{"choices": []}', "choices", "empty"),
    ('{"choices": [3]}', "choices[0]", "want an object, got a number"),
    ('{"choices": [{"text": "legacy"}]}', "choices[0].message", "missing"),
    ('{"choices": [{"message": {"role": "assistant"}}]}', "choices[0].message.content", "missing"),
    ('{"choices": [{"message": {"content": null}}]}', "choices[0].message.content", "want a string, got null"),
    ('{"choices": [{"message": {"content": "  \\n"}}]}', "choices[0].message.content", "empty summary"),
])
def test_llm_malformed_response_names_the_field(fake_llm, body, field, msg):
    f = fake_llm(lambda n, req: (200, body))
    with pytest.raises(ResponseError) as e:
        llm(f.url, retries=3).compress("T", "text")
    assert e.value.field == field and msg in e.value.msg
    assert f"field {field}" in str(e.value)
    assert len(f.requests) == 1, "a malformed answer is not retried"


def test_llm_blank_text_and_bad_settings(fake_llm, monkeypatch):
    f = fake_llm()
    assert llm(f.url).compress("T", " \n") == "" and not f.requests
    for k in ("LLM_URL", "LLM_MODEL"):
        monkeypatch.delenv("ICICLE_COMPRESSOR_" + k, raising=False)
    with pytest.raises(ValueError, match="LLM_URL"):
        LLMCompressor(None, "m")
    with pytest.raises(ValueError, match="LLM_MODEL"):
        LLMCompressor("http://127.0.0.1:1/v1", None)
    monkeypatch.setenv("ICICLE_COMPRESSOR_LLM_URL", f.url)
    monkeypatch.setenv("ICICLE_COMPRESSOR_LLM_MODEL", "env-model")
    monkeypatch.setenv("ICICLE_COMPRESSOR_TIMEOUT", "2s")
    c = LLMCompressor()
    assert (c.model, c.timeout, c.max_tokens) == ("env-model", 2.0, 256)
    assert c.compress("T", "x") == "summary of T"
    assert f.requests[-1]["auth"] is None


def test_cache_keyed_by_id_and_doc(fake_llm, tmp_path):
    f = fake_llm()
    c = CachedCompressor(llm(f.url), str(tmp_path))
    assert c.compress("A", "text a") == "summary of A"
    assert c.compress("A", "text a") == "summary of A"
    assert len(f.requests) == 1 and (c.hits, c.misses) == (1, 1)
    c.compress("A", "text a, edited")
    assert len(f.requests) == 2, "a changed text is a new key"
    other = CachedCompressor(LLMCompressor(f.url, "other-model", max_retries=0), str(tmp_path))
    other.compress("A", "text a")
    assert len(f.requests) == 3, "another compressor id does not share entries"
    e = CachedCompressor(Extractive(), str(tmp_path))
    assert e.compress("A", "one  two") == "one two" and os.path.exists(e.path("A", "one  two"))
    assert compress.compress_corpus(c, [type("D", (), {"title": "A", "text": "text a"})()] * 3, workers=2) == ["summary of A"] * 3


def test_llm_transport_errors_are_retried_then_raised():
    c = LLMCompressor("http://127.0.0.1:1/v1", "m", max_retries=1, backoff=0.001, timeout=2)  # nothing listens
    with pytest.raises(OSError, match="attempt 2 of 2"):
        c.compress("T", "text")
