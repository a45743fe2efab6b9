"""Translation through any OpenAI-compatible chat-completions endpoint (Deepseek, as ATRI §5.1 used, or a
local server such as vLLM / llama.cpp / Ollama).

One request translates a batch: the captions go as numbered lines and :data:`SYSTEM_PROMPT` (fixed, so
the cache key's model is the whole story) asks for the same numbered lines back, one translation per
line. A reply that is not exactly ``1. ... n. ...`` is malformed: the batch is sent again one caption per
request, and a caption whose own reply is still malformed fails (left missing, never the source text).

Transport: ``POST {base_url}/chat/completions`` with ``urllib`` (no extra package), the key from an
environment variable as a bearer token. HTTP 429 and 5xx, timeouts and dropped connections are retried
with exponential backoff (``backoff * 2^attempt`` seconds, at most 60; a ``Retry-After`` header wins when
given); 401/403/404 stop the run (a wrong key, model or URL would fail every batch); other 4xx fail the
batch. ``max_requests_per_minute`` spaces request starts at least ``60 / rate`` seconds apart.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence

from mlatr.errors import MlatrError
from mlatr.languages import LANGUAGE_NAMES
from mlatr.translation.backend import TranslationBackend, TranslationFailure, clean_output, single_line

SYSTEM_PROMPT = (
    "You are a professional translator of short descriptions of sounds (audio captions). "
    "Translate each numbered line from {source} to {target}. Keep the meaning, the sound events and "
    "their order; write natural {target}. Reply with exactly {n} lines numbered like the input "
    "(\"1. ...\"), one translation per line and nothing else: no notes, no quotes, no blank lines."
)

_NUMBERED = re.compile(r"^\s*(\d+)\s*[.):]\s*(.*?)\s*$")
#: Statuses that stop the whole run: the same request would fail for every batch.
FATAL_STATUSES = (401, 403, 404)
MAX_BACKOFF_S = 60.0


class MalformedReply(TranslationFailure):
    """The endpoint answered, but not with one numbered line per caption."""


def language_name(code: str) -> str:
    return LANGUAGE_NAMES.get(code, code)


def build_messages(texts: Sequence[str], source: str, target: str) -> list[dict[str, str]]:
    """The chat messages of one request: the fixed system prompt and the numbered captions."""
    system = SYSTEM_PROMPT.format(source=language_name(source), target=language_name(target), n=len(texts))
    user = "\n".join(f"{i}. {single_line(t)}" for i, t in enumerate(texts, start=1))
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def parse_numbered_lines(reply: str, n: int) -> list[str | None]:
    """``"1. a\\n2. b"`` -> ``["a", "b"]``; raise :class:`MalformedReply` unless the non-empty lines are
    exactly ``1..n`` in order (an empty translation comes back as ``None``)."""
    lines = [line for line in reply.strip().splitlines() if line.strip()]
    out: list[str | None] = []
    for k, line in enumerate(lines, start=1):
        match = _NUMBERED.match(line)
        if match is None or int(match.group(1)) != k:
            raise MalformedReply(f"reply line {k} is not numbered {k}: {line[:80]!r}")
        out.append(clean_output(match.group(2)))
    if len(out) != n:
        raise MalformedReply(f"{len(out)} numbered lines for {n} captions")
    return out


class OpenAIBackend(TranslationBackend):
    """Chat-completions translation (see the module docstring)."""

    name = "openai"

    def __init__(self, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY", batch_size: int = 20,
                 timeout: float = 60.0, retries: int = 5, backoff: float = 1.0,
                 max_requests_per_minute: float | None = None, temperature: float = 0.0,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic):
        super().__init__(model, batch_size)
        if not base_url:
            raise MlatrError("openai backend: --base-url is required (e.g. https://api.deepseek.com/v1)")
        if not model:
            raise MlatrError("openai backend: --model is required (e.g. deepseek-chat)")
        parsed = urllib.parse.urlparse(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise MlatrError(f"openai backend: --base-url {base_url!r} is not an http(s) URL")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.api_key = os.environ.get(api_key_env, "") if api_key_env else ""
        local = parsed.hostname in ("localhost", "127.0.0.1", "::1")
        if not self.api_key and not local:
            raise MlatrError(f"openai backend: the environment variable {api_key_env or '(none given)'} holding "
                             f"the API key is not set (export {api_key_env or 'OPENAI_API_KEY'}=...; "
                             f"--api-key-env names another variable)")
        if timeout <= 0 or retries < 0 or backoff < 0:
            raise MlatrError("openai backend: timeout must be > 0, retries and backoff >= 0")
        if max_requests_per_minute is not None and max_requests_per_minute <= 0:
            raise MlatrError("openai backend: --max-requests-per-minute must be > 0")
        self.timeout, self.retries, self.backoff = float(timeout), int(retries), float(backoff)
        self.min_interval = 60.0 / max_requests_per_minute if max_requests_per_minute else 0.0
        self.temperature = float(temperature)
        self._sleep, self._clock = sleep, clock
        self._last_start: float | None = None
        self._retry_after: str | None = None  # the Retry-After header of the last 429 / 5xx
        #: Requests sent (retries included), for the summary.
        self.requests = 0

    # ---- one batch -------------------------------------------------------------------------------
    def translate_batch(self, texts: Sequence[str], source: str, target: str) -> list[str | None]:
        try:
            return parse_numbered_lines(self._complete(build_messages(texts, source, target)), len(texts))
        except MalformedReply:
            if len(texts) == 1:
                raise
        out: list[str | None] = []  # one caption per request: a bad line costs only its own caption
        for text in texts:
            try:
                out.extend(parse_numbered_lines(self._complete(build_messages([text], source, target)), 1))
            except TranslationFailure:
                out.append(None)
        return out

    # ---- transport -------------------------------------------------------------------------------
    def _complete(self, messages: list[dict[str, str]]) -> str:
        """The reply text of one chat completion, with rate limiting and retries."""
        body = json.dumps({"model": self.model, "messages": messages, "temperature": self.temperature,
                           "stream": False}).encode("utf-8")
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                self._sleep(self._retry_delay(attempt, last))
            self._wait_for_rate_limit()
            self.requests += 1
            request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    raw = response.read()
            except urllib.error.HTTPError as exc:
                detail = exc.read()[:200].decode("utf-8", "replace")
                if exc.code in FATAL_STATUSES:
                    raise MlatrError(f"openai backend: {self.url} answered HTTP {exc.code} ({detail.strip()}); "
                                     f"check --base-url, --model and the API key") from exc
                last = f"HTTP {exc.code}: {detail.strip()}"
                self._retry_after = exc.headers.get("Retry-After") if exc.headers else None
                if exc.code == 429 or exc.code >= 500:
                    continue
                raise TranslationFailure(last) from exc
            except TimeoutError as exc:
                last, self._retry_after = f"no answer within {self.timeout:g} s ({exc})", None
                continue
            except urllib.error.URLError as exc:
                last, self._retry_after = f"connection failed ({exc.reason})", None
                continue
            except (ConnectionError, OSError) as exc:  # a connection dropped while reading
                last, self._retry_after = f"connection failed ({exc})", None
                continue
            return self._reply_text(raw)
        raise TranslationFailure(f"gave up after {self.retries + 1} attempts; last: {last}")

    def _retry_delay(self, attempt: int, last: str) -> float:
        if self._retry_after:
            try:
                return min(max(float(self._retry_after), 0.0), MAX_BACKOFF_S)
            except ValueError:
                pass  # an HTTP date: fall back to the backoff
        return min(self.backoff * 2 ** (attempt - 1), MAX_BACKOFF_S)

    def _wait_for_rate_limit(self) -> None:
        if self.min_interval and self._last_start is not None:
            wait = self._last_start + self.min_interval - self._clock()
            if wait > 0:
                self._sleep(wait)
        self._last_start = self._clock()

    @staticmethod
    def _reply_text(raw: bytes) -> str:
        try:
            payload = json.loads(raw.decode("utf-8"))
            content = payload["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise MalformedReply(f"not a chat-completions reply: {raw[:120]!r}") from exc
        if not isinstance(content, str):
            raise MalformedReply(f"message content is {type(content).__name__}, not text")
        return content
