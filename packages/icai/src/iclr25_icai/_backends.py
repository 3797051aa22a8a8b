"""LLM backends behind one small protocol, and the append-only JSONL call cache.

A backend is anything with a ``model_name`` string and ``chat(messages, *, max_tokens, temperature) -> str``
(:class:`LLMBackend`). A backend that can also score the next token (the local transformers judge) implements
``choice_logprobs(prompts, options) -> (n_prompts, n_options)`` (:class:`ChoiceBackend`); the voting and
reconstruction stages then compare the log-probabilities of "A" and "B" instead of parsing generated text.

Backends here:

- :class:`OpenAICompatibleBackend`: ``POST {base_url}/chat/completions`` (and ``/embeddings``) over ``httpx`` for any
  OpenAI-compatible server (vLLM, llama.cpp server, Ollama ``/v1``, OpenAI). Retries with exponential backoff on
  408/409/429/5xx and on every error that carries no HTTP status code (connection refused, timeouts, a body that is
  not the expected JSON, a 200 without ``choices[0].message.content``); other 4xx fail at once. The API key comes
  only from where the user says (:func:`resolve_api_key`): ``$OPENAI_API_KEY`` is sent to OpenAI's own URL only.
- :class:`LocalChatBackend`: a ``transformers`` causal LM (SmolLM2-135M-Instruct from ``iclr25_shared.models`` by
  default); generation with the tokenizer's chat template, and next-token log-probabilities with a shared-prefix
  key/value cache so that many prompts that differ only at the end cost one prefix pass.
- :class:`ScriptedBackend`: replies from a Python function, for tests and dry runs.
- :class:`CachedBackend`: wraps any of them; every call is keyed by its inputs and appended to a JSONL file, so an
  interrupted run resumes without repeating a call. The key holds the backend's endpoint (normalised base URL, for
  an HTTP backend) and model name, so a cache written for one server is never served for another.

Concurrency: ``chat_many(prompts)`` (on :class:`OpenAICompatibleBackend` and :class:`CachedBackend`) sends at most
``concurrency`` requests at a time from a thread pool and returns the replies in prompt order, so the results do not
depend on ``concurrency``. The cache is safe under concurrent callers: one lock orders its appends, a call already in
flight for the same key is waited for rather than repeated, and appends from other processes sharing the file are
serialised with an advisory file lock (``fcntl.flock``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import random
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

import numpy as np

try:  # POSIX: serialises appends of several processes sharing one cache file
    import fcntl
except ImportError:  # pragma: no cover - Windows: one process per cache file
    fcntl = None  # type: ignore[assignment]

from iclr25_shared.checks import check_float, check_int
from iclr25_shared.errors import InputError, SourceUnavailable

__all__ = [
    "OPENAI_URL",
    "RETRY_STATUS",
    "CachedBackend",
    "ChoiceBackend",
    "EndpointUnavailable",
    "LLMBackend",
    "LocalChatBackend",
    "Message",
    "OpenAICompatibleBackend",
    "ScriptedBackend",
    "bounded_map",
    "check_cache_file",
    "default_base_url",
    "is_openai_url",
    "is_retryable",
    "normalise_base_url",
    "resolve_api_key",
    "status_code_of",
]

Message = Mapping[str, str]
"""One chat message: ``{"role": "system"|"user"|"assistant", "content": str}``."""

RETRY_STATUS = frozenset({408, 409, 425, 429})
"""HTTP codes retried besides every 5xx."""


class EndpointUnavailable(SourceUnavailable):
    """The LLM endpoint failed after the bounded retries (or with a status that is never retried)."""


@runtime_checkable
class LLMBackend(Protocol):
    """What every stage needs from an LLM: a name (part of every cache key) and chat completion."""

    model_name: str

    def chat(self, messages: Sequence[Message], *, max_tokens: int = 256, temperature: float = 0.0) -> str:
        """The assistant's reply to ``messages`` (text only)."""
        ...


@runtime_checkable
class ChoiceBackend(LLMBackend, Protocol):
    """A backend that can also score single-token answers."""

    def choice_logprobs(self, prompts: Sequence[Sequence[Message]], options: Sequence[str]) -> np.ndarray:
        """``(n_prompts, n_options)`` float64: log-probability of each option's first token as the reply's first
        token (after the chat template's assistant header)."""
        ...


def _check_messages(messages: Sequence[Message]) -> list[dict[str, str]]:
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence) or not messages:
        raise ValueError("messages must be a non-empty list of {'role', 'content'} dicts")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or set(m) != {"role", "content"}:
            raise ValueError(f"messages[{i}] must have exactly the keys 'role' and 'content', got {m!r}")
        if m["role"] not in {"system", "user", "assistant"}:
            raise ValueError(f"messages[{i}]['role'] must be system, user or assistant, got {m['role']!r}")
        if not isinstance(m["content"], str):
            raise TypeError(f"messages[{i}]['content'] must be a string, got {type(m['content']).__name__}")
        out.append({"role": m["role"], "content": m["content"]})
    return out


def bounded_map(
    fn: Callable[[Any], Any],
    items: Sequence[Any],
    concurrency: int,
    *,
    abort: threading.Event | None = None,
) -> list[Any]:
    """``[fn(x) for x in items]`` with at most ``concurrency`` calls running at once (threads), in item order.

    The first exception (in completion order) is raised once every call already running has finished; calls not
    yet started are cancelled, and ``abort`` (when given) is set meanwhile so that running calls stop retrying
    (:class:`OpenAICompatibleBackend` checks its ``abort_event`` before each retry). ``concurrency == 1`` (or one
    item) is the plain loop in this thread.

    Raises:
        ValueError: ``concurrency < 1``.
    """
    concurrency = check_int("concurrency", concurrency, low=1)
    items = list(items)
    if concurrency == 1 or len(items) <= 1:
        return [fn(x) for x in items]
    pool = ThreadPoolExecutor(max_workers=min(concurrency, len(items)), thread_name_prefix="icai-call")
    try:
        futures = [pool.submit(fn, x) for x in items]
        wait(futures, return_when=FIRST_EXCEPTION)
        failed = [f for f in futures if f.done() and not f.cancelled() and f.exception() is not None]
        if failed:
            if abort is not None:
                abort.set()
            for f in futures:
                f.cancel()
            wait([f for f in futures if not f.cancelled()])
            raise failed[0].exception()  # type: ignore[misc]
        return [f.result() for f in futures]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        if abort is not None:
            abort.clear()


# ----------------------------------------------------------------------------------------------------------------
# Scripted backend (tests, dry runs)
# ----------------------------------------------------------------------------------------------------------------


class ScriptedBackend:
    """Replies computed by a Python function; counts its calls.

    Args:
        reply: ``fn(messages) -> str`` for :meth:`chat`.
        choice: optional ``fn(messages, options) -> sequence of n_options floats`` (log-probabilities); when given,
            the backend also implements :meth:`choice_logprobs`.
        model_name: the name used in cache keys.
    """

    def __init__(
        self,
        reply: Callable[[list[dict[str, str]]], str],
        *,
        choice: Callable[[list[dict[str, str]], list[str]], Sequence[float]] | None = None,
        model_name: str = "scripted",
    ) -> None:
        self._reply = reply
        self._choice = choice
        self.model_name = model_name
        self.calls = 0

    def chat(self, messages: Sequence[Message], *, max_tokens: int = 256, temperature: float = 0.0) -> str:
        msgs = _check_messages(messages)
        self.calls += 1
        return str(self._reply(msgs))

    def __getattr__(self, name: str) -> Any:
        if name == "choice_logprobs" and self.__dict__.get("_choice") is not None:
            return self._choice_logprobs
        raise AttributeError(name)

    def _choice_logprobs(self, prompts: Sequence[Sequence[Message]], options: Sequence[str]) -> np.ndarray:
        out = np.empty((len(prompts), len(options)), dtype=np.float64)
        for i, p in enumerate(prompts):
            self.calls += 1
            out[i] = np.asarray(self._choice(_check_messages(p), list(options)), dtype=np.float64)
        return out


# ----------------------------------------------------------------------------------------------------------------
# OpenAI-compatible endpoint
# ----------------------------------------------------------------------------------------------------------------


def status_code_of(exc: BaseException) -> int | None:
    """The HTTP status code an exception carries, or ``None`` when it has none.

    Looks at ``exc.response.status_code`` (httpx, requests) and ``exc.status_code`` / ``exc.status`` (openai,
    aiohttp). Never raises.
    """
    response = getattr(exc, "response", None)
    for holder, attr in ((response, "status_code"), (exc, "status_code"), (exc, "status")):
        value = getattr(holder, attr, None) if holder is not None else None
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def is_retryable(exc: BaseException) -> bool:
    """Whether a failed LLM call should be retried.

    Retried: 408, 409, 425, 429 and every 5xx, and **every exception without an HTTP status code** (connection
    refused, DNS failure, timeouts, a 200 whose body is not the expected JSON). The official ``inverse-cai`` computes
    ``code // 100`` on such exceptions and crashes with ``TypeError`` instead of retrying; this predicate never
    raises. Not retried: other 4xx (bad request, authentication, not found), which would fail again.
    """
    code = status_code_of(exc)
    if code is None:
        return True
    return code in RETRY_STATUS or 500 <= code <= 599


class _BadResponse(RuntimeError):
    """A 2xx response whose body is not what the OpenAI API specifies (no status code: retried)."""


OPENAI_URL = "https://api.openai.com/v1"
"""OpenAI's own base URL: the only one ``$OPENAI_API_KEY`` is sent to unless the user names that variable."""

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def normalise_base_url(url: str) -> str:
    """The identity of an endpoint: scheme and host lower-cased, default port (80/443) dropped, repeated and
    trailing slashes removed. ``"HTTP://LocalHost:80/v1/"`` → ``"http://localhost/v1"``.

    Raises:
        ValueError: not ``http(s)://``, no host, a port that is not a number, or a URL holding credentials
            (``user:password@``: keys go in an environment variable, never in a URL that is logged and cached),
            a query or a fragment.
    """
    if not isinstance(url, str) or not url.strip().lower().startswith(("http://", "https://")):
        raise ValueError(f"base_url must start with http:// or https://, got {url!r}")
    parts = urlsplit(url.strip())
    if parts.username is not None or parts.password is not None:
        raise ValueError(
            "base_url must not hold credentials (user:password@host); give the key through an environment "
            "variable (api_key_env / --api-key-env)"
        )
    if parts.query or parts.fragment:
        raise ValueError(f"base_url must not have a query or fragment, got {url!r}")
    host = (parts.hostname or "").lower()
    if not host:
        raise ValueError(f"base_url has no host: {url!r}")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"base_url has a port that is not a number: {url!r}") from None
    scheme = parts.scheme.lower()
    if (scheme, port) in {("http", 80), ("https", 443)}:
        port = None
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    path = re.sub(r"/{2,}", "/", parts.path).rstrip("/")
    return urlunsplit((scheme, netloc, path, "", ""))


def default_base_url(base_url: str | None = None) -> str:
    """``base_url``, else ``$OPENAI_BASE_URL``, else ``$OPENAI_API_BASE``, else OpenAI's own, normalised."""
    url = base_url or os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_BASE") or OPENAI_URL
    return normalise_base_url(url)


def is_openai_url(base_url: str) -> bool:
    """Whether ``base_url`` is OpenAI's own API (``https://api.openai.com``)."""
    parts = urlsplit(normalise_base_url(base_url))
    return parts.scheme == "https" and parts.netloc == "api.openai.com"


def resolve_api_key(
    base_url: str, *, api_key: str | None = None, api_key_env: str | None = None, label: str = "api_key_env"
) -> str | None:
    """The API key for ``base_url``, read only from where the user says.

    - ``api_key`` given: that key (``""``: no key).
    - ``api_key_env`` given: the value of that environment variable, for any URL; unset or empty is an
      :class:`~iclr25_shared.errors.InputError` naming the variable (the user said a key is needed).
    - neither: ``$OPENAI_API_KEY`` for OpenAI's own URL (an InputError when it is unset), **no key for any other
      server** (a local vLLM/llama.cpp/Ollama server needs none; name the variable to send one).

    The key is never logged, cached or written; error messages name the variable, never its value.

    Raises:
        InputError: the named variable is unset or empty; no key for OpenAI's URL; ``api_key_env`` is not a
            variable name (the message does not repeat it: it may be a key pasted by mistake).
        ValueError: both ``api_key`` and ``api_key_env``.
    """
    if api_key is not None and api_key_env is not None:
        raise ValueError("give api_key or api_key_env, not both")
    if api_key is not None:
        return api_key or None
    if api_key_env is not None:
        if not isinstance(api_key_env, str) or not _ENV_NAME.fullmatch(api_key_env):
            raise InputError(
                f"{label} takes the NAME of an environment variable (letters, digits and _, not starting with a "
                "digit), not the key itself"
            )
        value = os.environ.get(api_key_env, "").strip()
        if not value:
            raise InputError(
                f"{label}: the environment variable {api_key_env} is not set or empty; set it to the key of "
                f"{normalise_base_url(base_url)} (or leave {label} unset for a server that needs no key)"
            )
        return value
    if is_openai_url(base_url):
        value = os.environ.get("OPENAI_API_KEY", "").strip()
        if not value:
            raise InputError(
                f"{OPENAI_URL} needs an API key: set OPENAI_API_KEY (or name another variable with {label})"
            )
        return value
    return None


class OpenAICompatibleBackend:
    """Chat completions and embeddings from any OpenAI-compatible HTTP endpoint.

    Args:
        model: the model name the server expects (e.g. ``"gpt-4o-mini"``, a vLLM model id, an Ollama tag).
        base_url: e.g. ``"http://127.0.0.1:8000/v1"``; default ``$OPENAI_BASE_URL``, then ``$OPENAI_API_BASE``,
            then ``https://api.openai.com/v1``. Normalised (:func:`normalise_base_url`); credentials in the URL are
            refused.
        api_key: the bearer token itself (``""``: none).
        api_key_env: the name of the environment variable holding the key (read once, here). With neither,
            ``$OPENAI_API_KEY`` is sent to OpenAI's own URL only and no key to any other server
            (:func:`resolve_api_key`).
        embedding_model: model name for :meth:`embed` (default: ``model``).
        timeout: seconds per HTTP request.
        max_retries: retries after the first attempt (so at most ``max_retries + 1`` requests per call).
        backoff: first retry delay in seconds; doubles per retry, with jitter in ``[0.5, 1]``, capped at
            ``max_backoff``; a numeric ``Retry-After`` header is honoured (capped too).
        transport: an ``httpx`` transport (tests use ``httpx.MockTransport``); default: real network.
        sleep: the sleep function (tests pass a recorder); default ``time.sleep``, looked up when the backend is made.
        concurrency: requests in flight at once in :meth:`chat_many` (``>= 1``; 1 = one at a time).

    Attributes:
        endpoint: the normalised base URL (part of every :class:`CachedBackend` key).
        calls / requests: logical calls and HTTP requests (retries included); exact under concurrency.

    Raises:
        InputError: no usable key where one is required (see :func:`resolve_api_key`).
        EndpointUnavailable: from :meth:`chat` / :meth:`embed` after the retries, naming the URL, the attempts
            and the last error.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str | None = None,
        embedding_model: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 5,
        backoff: float = 1.0,
        max_backoff: float = 30.0,
        transport: Any = None,
        sleep: Callable[[float], None] | None = None,
        seed: int = 0,
        concurrency: int = 1,
    ) -> None:
        import httpx

        if not isinstance(model, str) or not model.strip():
            raise ValueError(f"model must be a non-empty string, got {model!r}")
        self.model_name = model
        self.embedding_model = embedding_model or model
        self.base_url = default_base_url(base_url)
        self.endpoint = self.base_url
        self.max_retries = check_int("max_retries", max_retries, low=0)
        self.backoff = check_float("backoff", backoff, low=0.0)
        self.max_backoff = check_float("max_backoff", max_backoff, low=0.0)
        check_float("timeout", timeout, low=0.0, low_inclusive=False)
        key = resolve_api_key(self.base_url, api_key=api_key, api_key_env=api_key_env)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._secret = key or ""  # only to scrub it from error messages
        self._client = httpx.Client(timeout=timeout, headers=headers, transport=transport)
        self._sleep = sleep if sleep is not None else time.sleep
        self._rng = random.Random(seed)
        self.concurrency = check_int("concurrency", concurrency, low=1)
        self._count_lock = threading.Lock()
        self.abort_event = (
            threading.Event()
        )  # set by chat_many when a concurrent call failed: no more retries
        self.calls = 0  # logical calls
        self.requests = 0  # HTTP requests, retries included

    def __repr__(self) -> str:  # never the headers
        return f"OpenAICompatibleBackend({self.model_name!r}, base_url={self.base_url!r})"

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()

    def _post(self, path: str, payload: dict[str, Any], parse: Callable[[dict[str, Any]], Any]) -> Any:
        """POST ``payload`` and return ``parse(body)``; a body ``parse`` refuses (:class:`_BadResponse`) is retried
        like any error without a status code, with the same backoff and ``max_retries``."""
        import httpx

        url = f"{self.base_url}{path}"
        last: BaseException | None = None
        for attempt in range(self.max_retries + 1):
            with self._count_lock:
                self.requests += 1
            try:
                response = self._client.post(url, json=payload)
                response.raise_for_status()
                try:
                    body = response.json()
                except ValueError as exc:
                    raise _BadResponse(f"response body is not JSON: {response.text[:200]!r}") from exc
                if not isinstance(body, dict):
                    raise _BadResponse(f"response body is not a JSON object: {str(body)[:200]!r}")
                return parse(body)
            except (httpx.HTTPError, _BadResponse, OSError) as exc:
                last = exc
                if not is_retryable(exc) or attempt == self.max_retries or self.abort_event.is_set():
                    break
                with self._count_lock:
                    jitter = self._rng.random()
                delay = min(self.max_backoff, self.backoff * 2**attempt) * (0.5 + 0.5 * jitter)
                retry_after = getattr(getattr(exc, "response", None), "headers", {}).get("retry-after")
                if retry_after is not None:
                    with contextlib.suppress(ValueError):
                        delay = min(self.max_backoff, max(delay, float(retry_after)))
                self._sleep(delay)
        code = status_code_of(last) if last is not None else None
        if code is not None:
            what = f"HTTP {code}"
        elif isinstance(last, _BadResponse):
            what = str(last)
        else:
            what = f"{type(last).__name__}: {last}"
        message = (
            f"LLM endpoint {url} failed after {attempt + 1} attempt(s) ({what}); check --base-url, the server and "
            "the API key"
        )
        if self._secret:  # a server that echoes the request headers must not put the key into the log
            message = message.replace(self._secret, "<api key>")
        raise EndpointUnavailable(message)

    def chat(self, messages: Sequence[Message], *, max_tokens: int = 256, temperature: float = 0.0) -> str:
        """``POST /chat/completions``; returns ``choices[0].message.content``.

        Raises:
            EndpointUnavailable: after the bounded retries (a 2xx reply without that field counts as an error
                without status code: retried with backoff, up to ``max_retries`` times).
        """
        msgs = _check_messages(messages)
        check_int("max_tokens", max_tokens, low=1)
        check_float("temperature", temperature, low=0.0)
        with self._count_lock:
            self.calls += 1
        payload = {
            "model": self.model_name,
            "messages": msgs,
            "max_tokens": max_tokens,
            "temperature": temperature,
        }

        def content(body: dict[str, Any]) -> str:
            try:
                value = body["choices"][0]["message"]["content"]
            except (KeyError, IndexError, TypeError):
                value = None
            if not isinstance(value, str):
                raise _BadResponse(f"a reply without choices[0].message.content: {json.dumps(body)[:200]}")
            return value

        return self._post("/chat/completions", payload, content)

    def chat_many(
        self, prompts: Sequence[Sequence[Message]], *, max_tokens: int = 256, temperature: float = 0.0
    ) -> list[str]:
        """:meth:`chat` for each prompt, at most ``concurrency`` requests in flight, replies in prompt order.

        Raises:
            EndpointUnavailable: the first call that failed after its retries (requests not yet sent are not sent).
        """
        return bounded_map(
            lambda p: self.chat(p, max_tokens=max_tokens, temperature=temperature),
            prompts,
            self.concurrency,
            abort=self.abort_event,
        )

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """``POST /embeddings``: ``(n_texts, dim)`` float32 embeddings, in the order of ``texts``.

        Raises:
            EndpointUnavailable: after the bounded retries (a reply that does not hold one embedding per text is
                retried like an error without status code).
        """
        texts = list(texts)
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        with self._count_lock:
            self.calls += 1

        def embeddings(body: dict[str, Any]) -> np.ndarray:
            try:
                rows = sorted(body["data"], key=lambda r: r["index"])
                emb = np.asarray([r["embedding"] for r in rows], dtype=np.float32)
            except (KeyError, TypeError, ValueError):
                raise _BadResponse("a reply without data[].embedding") from None
            if emb.ndim != 2 or emb.shape[0] != len(texts):
                raise _BadResponse(f"a reply with {emb.shape[0]} embeddings for {len(texts)} texts")
            return emb

        return self._post("/embeddings", {"model": self.embedding_model, "input": texts}, embeddings)


# ----------------------------------------------------------------------------------------------------------------
# Local transformers judge
# ----------------------------------------------------------------------------------------------------------------


class LocalChatBackend:
    """A local ``transformers`` causal LM as chat model and next-token judge.

    Args:
        model: a name or path for :func:`iclr25_shared.models.load_causal_lm` (default: the packaged
            SmolLM2-135M-Instruct); with ``lm`` given it is only the name used in cache keys (``"local:<model>"``).
        lm: an already loaded object with ``.model`` and ``.tokenizer`` (the tokenizer must have a chat template).
        device: where to run (``torch.device`` or string).
        batch_size: prompts per forward pass in :meth:`choice_logprobs` and :meth:`chat_batch`.
        share_prefix: run the longest common token prefix of a batch once and reuse its key/value cache for the
            suffixes (identical results up to float rounding; much faster when prompts differ only at the end).
        seed: seed of the sampler when ``temperature > 0``.

    A trailing ``assistant`` message in ``messages`` is a prefill: the reply continues it (and does not repeat it).
    """

    supports_prefill = True

    def __init__(
        self,
        model: str = "smollm2-135m-instruct",
        *,
        lm: Any = None,
        device: Any = "cpu",
        batch_size: int = 8,
        share_prefix: bool = True,
        seed: int = 0,
    ) -> None:
        if lm is None:
            from iclr25_shared.models import load_causal_lm

            lm = load_causal_lm(model, device=device)
        self.model = lm.model
        self.tokenizer = lm.tokenizer
        if getattr(self.tokenizer, "chat_template", None) is None:
            raise ValueError(
                "the tokenizer has no chat template; LocalChatBackend needs an instruct/chat model"
            )
        self.model_name = f"local:{model}"
        self.batch_size = check_int("batch_size", batch_size, low=1)
        self.share_prefix = bool(share_prefix)
        self.seed = check_int("seed", seed, low=0)
        self.device = next(self.model.parameters()).device
        # transformers >= 5.x names the key/value cache argument ``cache`` (``past_key_values`` before)
        import inspect

        params = inspect.signature(self.model.forward).parameters
        self._cache_name = "cache" if "cache" in params else "past_key_values"
        self.calls = 0
        self.tokens_forwarded = 0

    # -- prompts ---------------------------------------------------------------------------------------------
    def _render(self, messages: Sequence[Message]) -> str:
        msgs = _check_messages(messages)
        prefill = ""
        if msgs[-1]["role"] == "assistant":
            prefill = msgs.pop()["content"]
        if not msgs:
            raise ValueError("messages must hold at least one non-assistant message before a prefill")
        text = self.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        return text + prefill

    def _ids(self, messages: Sequence[Message]) -> list[int]:
        return list(self.tokenizer(self._render(messages), add_special_tokens=False)["input_ids"])

    def option_token_ids(self, options: Sequence[str]) -> list[int]:
        """The first token id of each option as the reply's first token; options must differ in it.

        Raises:
            ValueError: empty options, an option that tokenizes to nothing, or two options sharing a first token.
        """
        if not options:
            raise ValueError("options must be a non-empty list of strings")
        ids = []
        for o in options:
            toks = self.tokenizer(o, add_special_tokens=False)["input_ids"]
            if not toks:
                raise ValueError(f"option {o!r} tokenizes to no token")
            ids.append(int(toks[0]))
        if len(set(ids)) != len(ids):
            raise ValueError(f"options {list(options)} do not differ in their first token ({ids})")
        return ids

    # -- scoring ---------------------------------------------------------------------------------------------
    def choice_logprobs(self, prompts: Sequence[Sequence[Message]], options: Sequence[str]) -> np.ndarray:
        """``(n_prompts, n_options)`` float64 next-token log-probabilities (log-softmax over the whole vocabulary)
        of each option's first token after each prompt's assistant header.

        Prompts are processed in batches of ``batch_size``; within a batch the longest common token prefix is run
        once (``share_prefix``) and its key/value cache is repeated over the batch for the suffixes. Suffixes are
        right-padded: with causal attention a position never sees the padding after it, so no mask is needed.
        """
        import torch

        option_ids = torch.tensor(self.option_token_ids(options), device=self.device)
        seqs = [self._ids(p) for p in prompts]
        out = np.empty((len(seqs), len(options)), dtype=np.float64)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        with torch.no_grad():
            for start, stop in self._chunks(seqs):
                chunk = seqs[start:stop]
                self.calls += len(chunk)
                common = 0
                if self.share_prefix and len(chunk) > 1:
                    shortest = min(len(s) for s in chunk)
                    while common < shortest - 1 and all(s[common] == chunk[0][common] for s in chunk):
                        common += 1
                cache = None
                if common > 0:
                    prefix = torch.tensor([chunk[0][:common]], device=self.device)
                    prefix_out = self.model(prefix, use_cache=True)
                    cache = getattr(prefix_out, self._cache_name)
                    cache.batch_repeat_interleave(len(chunk))
                    self.tokens_forwarded += common
                tails = [s[common:] for s in chunk]
                width = max(len(t) for t in tails)
                ids = torch.full((len(chunk), width), pad, dtype=torch.long, device=self.device)
                for i, t in enumerate(tails):
                    ids[i, : len(t)] = torch.tensor(t, device=self.device)
                self.tokens_forwarded += sum(len(t) for t in tails)
                if cache is not None:
                    logits = self.model(ids, **{self._cache_name: cache}, use_cache=True).logits
                else:
                    logits = self.model(ids, use_cache=False).logits
                last = torch.tensor([len(t) - 1 for t in tails], device=self.device)
                final = logits[torch.arange(len(chunk), device=self.device), last].float()
                logp = torch.log_softmax(final, dim=-1)[:, option_ids]
                out[start : start + len(chunk)] = logp.double().cpu().numpy()
        return out

    def _chunks(self, seqs: list[list[int]]) -> list[tuple[int, int]]:
        """Consecutive batches of at most ``batch_size``; with ``share_prefix`` a batch also ends where the next
        prompt shares less than half of the batch's common prefix (so prompts of one pair stay together)."""
        bounds, start, common = [], 0, 0
        for i in range(1, len(seqs) + 1):
            if i < len(seqs) and i - start < self.batch_size:
                if not self.share_prefix:
                    continue
                a, b = seqs[start], seqs[i]
                n = 0
                limit = min(len(a), len(b), common or len(a))
                while n < limit and a[n] == b[n]:
                    n += 1
                if i == start + 1 or n * 2 >= common:
                    common = n if i == start + 1 else min(common, n)
                    continue
            bounds.append((start, i))
            start, common = i, 0
        return bounds

    # -- generation ------------------------------------------------------------------------------------------
    def chat_batch(
        self, prompts: Sequence[Sequence[Message]], *, max_tokens: int = 256, temperature: float = 0.0
    ) -> list[str]:
        """Replies to several prompts, generated in left-padded batches (greedy when ``temperature == 0``)."""
        import torch

        check_int("max_tokens", max_tokens, low=1)
        check_float("temperature", temperature, low=0.0)
        texts = [self._render(p) for p in prompts]
        replies: list[str] = []
        tok = self.tokenizer
        side = tok.padding_side
        tok.padding_side = "left"
        try:
            for start in range(0, len(texts), self.batch_size):
                chunk = texts[start : start + self.batch_size]
                self.calls += len(chunk)
                enc = tok(chunk, return_tensors="pt", padding=True, add_special_tokens=False).to(self.device)
                kwargs: dict[str, Any] = {"max_new_tokens": max_tokens, "pad_token_id": tok.pad_token_id}
                if temperature > 0:
                    torch.manual_seed(self.seed + start)
                    kwargs.update(do_sample=True, temperature=temperature)
                else:
                    kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
                with torch.no_grad():
                    gen = self.model.generate(**enc, **kwargs)
                width = enc["input_ids"].shape[1]
                self.tokens_forwarded += int(enc["attention_mask"].sum()) + len(chunk) * (
                    gen.shape[1] - width
                )
                replies += [tok.decode(g[width:], skip_special_tokens=True) for g in gen]
        finally:
            tok.padding_side = side
        return replies

    def chat(self, messages: Sequence[Message], *, max_tokens: int = 256, temperature: float = 0.0) -> str:
        """The reply to one prompt (see :meth:`chat_batch`)."""
        return self.chat_batch([messages], max_tokens=max_tokens, temperature=temperature)[0]


# ----------------------------------------------------------------------------------------------------------------
# Cache
# ----------------------------------------------------------------------------------------------------------------


def _key(record: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(record, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def check_cache_file(path: str | os.PathLike[str], *, label: str | None = None) -> Path:
    """A call cache :class:`CachedBackend` can read and append to: an existing file that is UTF-8 JSON lines with at
    least one cache record (an empty file is a valid cache), or a path that can be created.

    Raises:
        InputError: a folder; a file that is not UTF-8, or not empty and holding no cache record (another file
            given by mistake: it is never appended to); a path whose parent is a file or not writable.
    """
    p = Path(path).expanduser()
    where = f"{label}: {str(path)!r}" if label else repr(str(path))
    if p.is_dir():
        raise InputError(f"{where} is a folder; expected a JSONL cache file (created when missing)")
    if p.exists():
        if not os.access(p, os.R_OK | os.W_OK):
            raise InputError(f"{where} cannot be read and written (permission denied)")
        try:
            lines = [line for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
        except UnicodeDecodeError:
            raise InputError(f"{where} is not a JSONL cache file (not UTF-8 text); give a new path") from None
        partial_first = len(lines) == 1 and lines[0].startswith('{"key": ')  # killed while writing it
        if lines and not partial_first and not any(_cache_record(line) for line in lines):
            raise InputError(
                f"{where} holds {len(lines)} line(s) but no cache record; it is not a cache of this package "
                "(refusing to append to it): give a new path or an earlier run's cache"
            )
        return p
    parent = p.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{where} cannot be created in {str(parent)!r}")
    return p


def _cache_record(line: str) -> bool:
    try:
        row = json.loads(line)
    except ValueError:
        return False
    return isinstance(row, dict) and "key" in row and "response" in row


class CachedBackend:
    """Any backend with an append-only JSONL cache of its calls.

    Every call is keyed by SHA-256 of its inputs: the backend's ``endpoint`` (the normalised base URL of an HTTP
    backend such as :class:`OpenAICompatibleBackend`; absent for local and scripted backends), its model name, the
    kind of call, the messages, and the options or generation settings. So one cache file can serve several
    servers: a reply cached for one endpoint is never served for another, even when both call their model
    ``default``. A hit returns the stored answer without calling the backend; a miss calls it and appends one line
    ``{"key", "kind", "endpoint", "model", "request", "response"}`` (flushed and fsynced) before returning, so a run
    that is killed at any point resumes with every finished call intact. No header and no API key is ever
    written. A partly written last line (the process died while
    writing it) is ignored on load and completed with a newline before the next append; no line is ever rewritten.

    Args:
        backend: the wrapped backend.
        path: the JSONL file (created with its folder when missing); ``None`` keeps the cache in memory only.

    Attributes:
        hits / misses: counts since construction.
        skipped_lines: unreadable lines found on load.
    """

    def __init__(self, backend: LLMBackend, path: str | os.PathLike[str] | None) -> None:
        self.backend = backend
        self.model_name = backend.model_name
        endpoint = getattr(backend, "endpoint", None)
        self.endpoint = normalise_base_url(endpoint) if endpoint is not None else None
        self.path = Path(path) if path is not None else None
        self._store: dict[str, Any] = {}
        self._lock = threading.RLock()  # the store, the counters, the file offset and the appends
        self._inflight: dict[str, Future] = {}  # key -> the pending reply of a call another thread is making
        self._offset = 0  # bytes of the file already read into the store
        self.hits = 0
        self.misses = 0
        self.skipped_lines = 0
        if self.path is not None and self.path.exists():
            check_cache_file(self.path)
            data = self.path.read_bytes()
            self._offset = len(data)
            for line in data.decode("utf-8").splitlines():
                self._load_line(line)
        if hasattr(backend, "choice_logprobs"):
            self.choice_logprobs = self._choice_logprobs
        self.supports_prefill = bool(getattr(backend, "supports_prefill", False))

    def _load_line(self, line: str) -> str | None:
        """Put one cache line into the store; returns its key (``None`` for an unreadable line, counted)."""
        try:
            row = json.loads(line)
            self._store[row["key"]] = row["response"]
            return row["key"]
        except (ValueError, KeyError, TypeError):
            self.skipped_lines += int(bool(line.strip()))
            return None

    @property
    def concurrency(self) -> int:
        """Calls :meth:`chat_many` makes at once: the wrapped backend's ``concurrency`` (1 when it has none)."""
        return int(getattr(self.backend, "concurrency", 1))

    def __len__(self) -> int:
        return len(self._store)

    @property
    def calls(self) -> int:
        """Calls made to the wrapped backend (misses) since construction."""
        return self.misses

    def _key(self, kind: str, model: str, request: Mapping[str, Any]) -> str:
        """SHA-256 of the call: endpoint (when the backend has one), model, kind and request."""
        record = {"kind": kind, "model": model, **request}
        if self.endpoint is not None:
            record["endpoint"] = self.endpoint
        return _key(record)

    def _append(self, key: str, kind: str, request: Any, response: Any) -> None:
        """Store the reply and append its line, once: under the lock (threads) and an exclusive ``flock`` on the
        file (processes). Lines other processes appended since the last read are loaded first; when one of them
        already holds ``key`` nothing is written (no duplicate line)."""
        with self._lock:
            self._store[key] = response
            if self.path is None:
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            head = (
                {"key": key, "kind": kind, "endpoint": self.endpoint}
                if self.endpoint
                else {"key": key, "kind": kind}
            )
            line = json.dumps(
                {**head, "model": self.model_name, "request": request, "response": response},
                ensure_ascii=False,
                allow_nan=False,
            )
            with self.path.open("a+b") as f:
                if fcntl is not None:
                    fcntl.flock(f.fileno(), fcntl.LOCK_EX)
                try:
                    end = f.seek(0, os.SEEK_END)
                    if end > self._offset:  # another process appended: read its complete lines
                        f.seek(self._offset)
                        new = f.read(end - self._offset)
                        complete = new[: new.rfind(b"\n") + 1]
                        seen = {self._load_line(x) for x in complete.decode("utf-8", "replace").splitlines()}
                        if key in seen:
                            self._store[key] = response
                            self._offset = self._offset + len(complete)
                            return
                        f.seek(0, os.SEEK_END)
                    if end > 0:
                        f.seek(-1, os.SEEK_END)
                        if f.read(1) != b"\n":  # a line cut short by a killed writer: end it
                            f.write(b"\n")
                    f.write(line.encode("utf-8") + b"\n")
                    f.flush()
                    os.fsync(f.fileno())
                    self._offset = f.tell()
                finally:
                    if fcntl is not None:
                        fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def _cached_call(self, key: str, kind: str, request: Any, call: Callable[[], Any]) -> Any:
        """The stored reply of ``key``, else ``call()`` once (concurrent callers of the same key wait for it, and
        count as hits), appended to the cache before it is returned."""
        with self._lock:
            if key in self._store:
                self.hits += 1
                return self._store[key]
            pending = self._inflight.get(key)
            if pending is None:
                pending = self._inflight[key] = Future()
                self.misses += 1
                owner = True
            else:
                self.hits += 1
                owner = False
        if not owner:
            return pending.result()
        try:
            reply = call()
            self._append(key, kind, request, reply)
        except BaseException as exc:
            with self._lock:
                del self._inflight[key]
            pending.set_exception(exc)
            raise
        with self._lock:
            del self._inflight[key]
        pending.set_result(reply)
        return reply

    def chat(self, messages: Sequence[Message], *, max_tokens: int = 256, temperature: float = 0.0) -> str:
        """Cached :meth:`chat` of the wrapped backend; safe to call from several threads."""
        request = {
            "messages": _check_messages(messages),
            "max_tokens": max_tokens,
            "temperature": temperature,
        }
        key = self._key("chat", self.model_name, request)
        return self._cached_call(
            key,
            "chat",
            request,
            lambda: self.backend.chat(request["messages"], max_tokens=max_tokens, temperature=temperature),
        )

    def chat_many(
        self, prompts: Sequence[Sequence[Message]], *, max_tokens: int = 256, temperature: float = 0.0
    ) -> list[str]:
        """:meth:`chat` for each prompt with at most :attr:`concurrency` calls in flight, replies in prompt order.
        Each reply is appended to the cache as soon as it arrives (a killed run keeps every finished call)."""
        return bounded_map(
            lambda p: self.chat(p, max_tokens=max_tokens, temperature=temperature),
            prompts,
            self.concurrency,
            abort=getattr(self.backend, "abort_event", None),
        )

    def chat_batch(
        self, prompts: Sequence[Sequence[Message]], *, max_tokens: int = 256, temperature: float = 0.0
    ) -> list[str]:
        """Batched :meth:`chat`: misses go to the backend's ``chat_batch`` when it has one (the local judge), else
        to :meth:`chat_many` (one call per prompt, :attr:`concurrency` at a time)."""
        if not hasattr(self.backend, "chat_batch"):
            return self.chat_many(prompts, max_tokens=max_tokens, temperature=temperature)
        requests = [
            {"messages": _check_messages(p), "max_tokens": max_tokens, "temperature": temperature}
            for p in prompts
        ]
        keys = [self._key("chat", self.model_name, r) for r in requests]
        todo = sorted({k: i for i, k in enumerate(keys) if k not in self._store}.values())
        self.hits += len(keys) - len(todo)
        if todo:
            self.misses += len(todo)
            replies = self.backend.chat_batch(
                [requests[i]["messages"] for i in todo], max_tokens=max_tokens, temperature=temperature
            )
            for i, r in zip(todo, replies):
                self._append(keys[i], "chat", requests[i], r)
        return [self._store[k] for k in keys]

    def _choice_logprobs(self, prompts: Sequence[Sequence[Message]], options: Sequence[str]) -> np.ndarray:
        requests = [{"messages": _check_messages(p), "options": list(options)} for p in prompts]
        keys = [self._key("choice", self.model_name, r) for r in requests]
        todo = sorted({k: i for i, k in enumerate(keys) if k not in self._store}.values())
        self.hits += len(keys) - len(todo)
        if todo:
            self.misses += len(todo)
            scores = self.backend.choice_logprobs([requests[i]["messages"] for i in todo], options)
            for i, row in zip(todo, np.asarray(scores, dtype=np.float64)):
                # -inf (an impossible token) is stored as null: JSON has no infinities.
                self._append(
                    keys[i], "choice", requests[i], [float(v) if math.isfinite(v) else None for v in row]
                )
        return np.asarray(
            [[-math.inf if v is None else v for v in self._store[k]] for k in keys], dtype=np.float64
        ).reshape(len(keys), len(options))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Cached ``embed`` of the wrapped backend (one line per batch of texts)."""
        if not hasattr(self.backend, "embed"):
            raise AttributeError(f"backend {self.model_name!r} has no embed()")
        request = {"texts": list(texts)}
        key = self._key("embed", getattr(self.backend, "embedding_model", self.model_name), request)
        if key in self._store:
            self.hits += 1
            return np.asarray(self._store[key], dtype=np.float32).reshape(len(request["texts"]), -1)
        self.misses += 1
        emb = np.asarray(self.backend.embed(request["texts"]), dtype=np.float32)
        self._append(key, "embed", request, emb.tolist())
        return emb
