"""Document compressors: the summary each in-context candidate is shown with (paper section 3, appendix D.1).

Twin of Go's internal/compress; both sides must give the same summary for the same document, or the model is
served summaries unlike those it was trained on.

- ``Extractive`` (id ``extractive-lead-120w``, the default): ``" ".join(text.split()[:120])``. Go's
  compress.Extractive splits at exactly the characters str.split() does; internal/compress/testdata/
  extractive.golden.json pins both (tests/test_compress.py, internal/compress/compress_test.go).
- ``LLMCompressor``: the paper's abstractive summary. One POST per document to an OpenAI-compatible
  ``<base_url>/chat/completions`` (base URL up to and including /v1, as OpenAI clients take it) with the
  appendix D.1 prompt, temperature 0, max_tokens 256; retries transport errors, 429 and 5xx with exponential
  backoff; a malformed answer raises ``ResponseError`` naming the JSON field. Standard library only (urllib).
  The prompt lives in ONE file, internal/compress/prompt.json (``{"system", "user"}``, ``{title}`` and
  ``{document}`` substituted in one left-to-right pass), embedded by the Go binary and read here through the
  repository path, so the two sides cannot drift; the compressor id
  ``llm:<model>:<sha256(prompt.json)[:12]>:<max_tokens>`` changes with any byte of it.
- ``CachedCompressor`` wraps either with a disk cache keyed by (compressor id, sha256 of title and text):
  ``<cache_dir>/<id, made path-safe>/<hash[:2]>/<hash>.txt``, written atomically, so an interrupted corpus run
  resumes where it stopped.

Settings from the environment (the Go config's variable names): ICICLE_COMPRESSOR_LLM_URL,
ICICLE_COMPRESSOR_LLM_MODEL, ICICLE_COMPRESSOR_API_KEY, ICICLE_COMPRESSOR_TIMEOUT (seconds or Go-style
"60s"), ICICLE_COMPRESSOR_MAX_RETRIES, ICICLE_COMPRESSOR_MAX_TOKENS.

``python -m icicle.compress --compressor extractive|llm --out corpus.jsonl.gz`` writes the corpus with a
``summary`` field per document, which ``icicle ingest`` keeps as it is (it compresses only documents
without one).
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable, Protocol

LEAD_WORDS = 120
EXTRACTIVE_ID = "extractive-lead-120w"
PROMPT_PATH = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "internal", "compress", "prompt.json"))
ENV_PREFIX = "ICICLE_COMPRESSOR_"


class Compressor(Protocol):
    """Summarises one document. ``id`` names the compressor and every setting that changes its output."""

    id: str

    def compress(self, title: str, text: str) -> str: ...


def extractive(text: str) -> str:
    """The first 120 whitespace-separated words of text, joined by single spaces (Go: compress.Extractive)."""
    return " ".join(text.split()[:LEAD_WORDS])


@functools.lru_cache(maxsize=65536)
def cached_extractive(text: str) -> str:
    """extractive(text), memoised: training instances and evaluations summarise the same documents again and again."""
    return extractive(text)


class Extractive:
    """The deterministic default compressor: ``extractive(text)``; the title is not used."""

    id = EXTRACTIVE_ID

    def compress(self, title: str, text: str) -> str:
        return extractive(text)


def load_prompt(path: str = PROMPT_PATH) -> tuple[dict, str]:
    """Returns ({"system", "user"}, sha256(file bytes)[:12]) of the shared prompt file."""
    with open(path, "rb") as f:
        raw = f.read()
    p = json.loads(raw)
    if not p.get("system") or "{document}" not in p.get("user", ""):
        raise ValueError(f"{path}: want a JSON object with 'system' and a 'user' template containing {{document}}")
    return {"system": p["system"], "user": p["user"]}, hashlib.sha256(raw).hexdigest()[:12]


_PLACEHOLDER = re.compile(r"\{(title|document)\}")


def messages(prompt: dict, title: str, text: str) -> list[dict]:
    """The chat messages for one document: {title} and {document} replaced in one left-to-right pass (Go:
    strings.NewReplacer), so a title containing "{document}" stays as it is."""
    values = {"title": title, "document": text}
    user = _PLACEHOLDER.sub(lambda m: values[m.group(1)], prompt["user"])
    return [{"role": "system", "content": prompt["system"]}, {"role": "user", "content": user}]


def llm_id(model: str, prompt_hash: str, max_tokens: int) -> str:
    return f"llm:{model}:{prompt_hash}:{max_tokens}"


class ResponseError(ValueError):
    """A 2xx answer that is not a usable chat completion; ``field`` is the JSON path at fault."""

    def __init__(self, field: str, msg: str) -> None:
        super().__init__(f"llm response: field {field}: {msg}")
        self.field = field
        self.msg = msg


class StatusError(RuntimeError):
    """A non-2xx answer; ``code`` is the HTTP status, ``body`` the start of the response body."""

    def __init__(self, code: int, body: str) -> None:
        super().__init__(f"llm endpoint answered {code}: {body}")
        self.code = code
        self.body = body


def _kind(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, dict):
        return "an object"
    return type(v).__name__


def summary_of(body: bytes) -> str:
    """Extracts choices[0].message.content (trimmed) from a chat completion body; ResponseError otherwise."""
    try:
        v = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise ResponseError("(body)", f"not JSON: {e}") from None
    if not isinstance(v, dict):
        raise ResponseError("(body)", f"want a JSON object, got {_kind(v)}")
    if "choices" not in v:
        raise ResponseError("choices", "missing")
    ch = v["choices"]
    if not isinstance(ch, list):
        raise ResponseError("choices", f"want an array, got {_kind(ch)}")
    if not ch:
        raise ResponseError("choices", "empty")
    c0 = ch[0]
    if not isinstance(c0, dict):
        raise ResponseError("choices[0]", f"want an object, got {_kind(c0)}")
    if "message" not in c0:
        raise ResponseError("choices[0].message", "missing")
    msg = c0["message"]
    if not isinstance(msg, dict):
        raise ResponseError("choices[0].message", f"want an object, got {_kind(msg)}")
    if "content" not in msg:
        raise ResponseError("choices[0].message.content", "missing")
    content = msg["content"]
    if not isinstance(content, str):
        raise ResponseError("choices[0].message.content", f"want a string, got {_kind(content)}")
    content = content.strip()
    if not content:
        raise ResponseError("choices[0].message.content", "empty summary")
    return content


def _env(name: str, default=None):
    v = os.environ.get(ENV_PREFIX + name, "")
    return v if v != "" else default


def _seconds(v) -> float:
    if isinstance(v, (int, float)):
        return float(v)
    s = str(v).strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m)?", s)
    if not m:
        raise ValueError(f"{ENV_PREFIX}TIMEOUT: want seconds or a duration such as 60s, got {s!r}")
    return float(m.group(1)) * {"ms": 1e-3, "s": 1.0, "m": 60.0, None: 1.0}[m.group(2)]


class LLMCompressor:
    """The paper's abstractive summary from an OpenAI-compatible chat completions endpoint (module doc).
    Arguments left None come from the ICICLE_COMPRESSOR_* environment, then the defaults (timeout 60 s,
    3 retries, max_tokens 256). Thread-safe: ``compress_corpus`` runs several at once."""

    def __init__(self, base_url: str | None = None, model: str | None = None, *, api_key: str | None = None,
                 timeout: float | None = None, max_retries: int | None = None, max_tokens: int | None = None,
                 backoff: float = 1.0, prompt_path: str = PROMPT_PATH) -> None:
        self.base_url = base_url or _env("LLM_URL")
        self.model = model or _env("LLM_MODEL")
        if not self.base_url or not re.match(r"^https?://[^/\s]+", self.base_url):
            raise ValueError("llm compressor: want an http or https base URL such as http://127.0.0.1:8000/v1 "
                             f"(argument or {ENV_PREFIX}LLM_URL), got {self.base_url!r}")
        if not self.model or not self.model.strip():
            raise ValueError(f"llm compressor: model must be set (argument or {ENV_PREFIX}LLM_MODEL)")
        self.api_key = api_key if api_key is not None else _env("API_KEY", "")
        self.timeout = _seconds(timeout if timeout is not None else _env("TIMEOUT", 60))
        self.max_retries = int(max_retries if max_retries is not None else _env("MAX_RETRIES", 3))
        self.max_tokens = int(max_tokens if max_tokens is not None else _env("MAX_TOKENS", 256))
        if self.max_retries < 0 or self.max_tokens < 1 or self.timeout <= 0:
            raise ValueError("llm compressor: want max_retries >= 0, max_tokens >= 1 and timeout > 0")
        self.backoff = backoff
        self.endpoint = self.base_url.rstrip("/") + "/chat/completions"
        self.prompt, self.prompt_hash = load_prompt(prompt_path)
        self.id = llm_id(self.model, self.prompt_hash, self.max_tokens)

    def request_body(self, title: str, text: str) -> dict:
        return {"model": self.model, "messages": messages(self.prompt, title, text), "temperature": 0,
                "max_tokens": self.max_tokens}

    def compress(self, title: str, text: str) -> str:
        """Returns the summary ("" without a request for a blank text); StatusError / ResponseError /
        OSError once the retries are spent (only transport errors, 429 and 5xx are retried)."""
        if not text.strip():
            return ""
        body = json.dumps(self.request_body(title, text)).encode("utf-8")
        wait = self.backoff
        for attempt in range(self.max_retries + 1):
            retry_after = 0.0
            try:
                return self._attempt(body)
            except StatusError as e:
                if not (e.code == 429 or e.code >= 500) or attempt == self.max_retries:
                    raise
                retry_after = getattr(e, "retry_after", 0.0)
            except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
                if attempt == self.max_retries:
                    raise OSError(f"compress {title!r} with {self.model}: post {self.endpoint}: {e} "
                                  f"(attempt {attempt + 1} of {self.max_retries + 1})") from e
            time.sleep(retry_after or wait)
            wait = min(2 * wait, 30.0)
        raise AssertionError("unreachable")

    def _attempt(self, body: bytes) -> str:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.endpoint, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read(4 << 20)
        except urllib.error.HTTPError as e:
            err = StatusError(e.code, e.read(512).decode("utf-8", "replace"))
            ra = (e.headers.get("Retry-After") or "").strip() if e.headers else ""
            err.retry_after = float(ra) if ra.isdigit() and 0 < int(ra) <= 60 else 0.0
            raise err from None
        return summary_of(raw)


def doc_key(title: str, text: str) -> str:
    return hashlib.sha256(title.encode("utf-8") + b"\x00" + text.encode("utf-8")).hexdigest()


class CachedCompressor:
    """``inner`` with a disk cache keyed by (inner.id, sha256(title, text)); same id as inner."""

    def __init__(self, inner: Compressor, cache_dir: str) -> None:
        self.inner = inner
        self.id = inner.id
        self.dir = os.path.join(cache_dir, re.sub(r"[^A-Za-z0-9._-]+", "_", inner.id))
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()

    def path(self, title: str, text: str) -> str:
        k = doc_key(title, text)
        return os.path.join(self.dir, k[:2], k + ".txt")

    def compress(self, title: str, text: str) -> str:
        p = self.path(title, text)
        try:
            with open(p, encoding="utf-8") as f:
                s = f.read()
            with self._lock:
                self.hits += 1
            return s
        except FileNotFoundError:
            pass
        s = self.inner.compress(title, text)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        tmp = f"{p}.tmp{os.getpid()}.{threading.get_ident()}"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(s)
        os.replace(tmp, p)
        with self._lock:
            self.misses += 1
        return s


def compress_corpus(compressor: Compressor, docs: Iterable, workers: int = 1) -> list[str]:
    """Summaries of docs (objects with .title and .text), in order; ``workers`` calls at once."""
    docs = list(docs)
    if workers <= 1:
        return [compressor.compress(d.title, d.text) for d in docs]
    with ThreadPoolExecutor(workers) as ex:
        return list(ex.map(lambda d: compressor.compress(d.title, d.text), docs))


def main(argv=None) -> None:
    import argparse
    import gzip

    from .data import DEFAULT_DATA_DIR, load_beir

    ap = argparse.ArgumentParser(prog="python -m icicle.compress",
                                 description="write the corpus with a summary per document (for icicle ingest)")
    ap.add_argument("--compressor", choices=["extractive", "llm"], default="extractive")
    ap.add_argument("--llm-url", default=None, help=f"default ${ENV_PREFIX}LLM_URL")
    ap.add_argument("--llm-model", default=None, help=f"default ${ENV_PREFIX}LLM_MODEL")
    ap.add_argument("--workers", type=int, default=4, help="LLM requests in flight")
    ap.add_argument("--cache", default=os.path.join(os.path.dirname(__file__), "..", "out", "summaries"))
    ap.add_argument("--data", default=DEFAULT_DATA_DIR)
    ap.add_argument("--limit", type=int, default=0, help="only the first N documents (0: all)")
    ap.add_argument("--out", required=True, help="corpus JSONL(.gz) with docid, title, text, summary")
    a = ap.parse_args(argv)
    inner = Extractive() if a.compressor == "extractive" else LLMCompressor(a.llm_url, a.llm_model)
    comp = CachedCompressor(inner, a.cache) if a.compressor == "llm" else inner  # extractive: free to recompute
    docs = list(load_beir(a.data)[0].values())
    if a.limit:
        docs = docs[: a.limit]
    t0 = time.perf_counter()
    sums = compress_corpus(comp, docs, a.workers if a.compressor == "llm" else 1)
    op = gzip.open if a.out.endswith(".gz") else open
    with op(a.out, "wt", encoding="utf-8") as f:
        for d, s in zip(docs, sums):
            f.write(json.dumps({"docid": d.docid, "title": d.title, "text": d.text, "summary": s}, ensure_ascii=False) + "\n")
    print(json.dumps({"compressor": comp.id, "docs": len(docs), "cache_hits": getattr(comp, "hits", 0),
                      "computed": getattr(comp, "misses", len(docs)),
                      "seconds": round(time.perf_counter() - t0, 1), "out": a.out}))


if __name__ == "__main__":
    main()
