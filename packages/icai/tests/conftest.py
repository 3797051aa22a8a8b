"""Shared fixtures: a tiny random-init chat LM, a local OpenAI-compatible stub server, hand-made pairs."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pandas as pd
import pytest

WORDS = [
    "A",
    "B",
    "Both",
    "Neither",
    "Response",
    "Prompt",
    "Principle",
    "Which",
    "response",
    "does",
    "the",
    "principle",
    "select",
    "Answer",
    "with",
    "one",
    "word",
    "or",
    "letter",
    "is",
    "better",
    "Select",
    "according",
    "to",
    "these",
    "rules",
    "use",
    "ones",
    "that",
    "apply",
    "if",
    "none",
    "applies",
    "choose",
    "as",
    "you",
    "normally",
    "would",
    "a",
    "cat",
    "sat",
    "on",
    "mat",
    "dog",
    "ran",
    "far",
    "away",
    "sun",
    "hot",
    "cold",
    "short",
    "long",
    "text",
    "person",
    "city",
    "river",
    "born",
    "was",
    "who",
    "of",
    "in",
    "and",
]


@pytest.fixture(scope="session")
def tiny_lm():
    """A 2-layer random-init Llama with a word-level tokenizer and a chat template (no download)."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, "[PAD]": 1, "[EOS]": 2}
    for w in [
        *WORDS,
        "<|",
        "|>",
        "user",
        "assistant",
        "system",
        ":",
        ".",
        ",",
        "?",
        "!",
        "'",
        '"',
        "{",
        "}",
        "[",
        "]",
    ]:
        vocab.setdefault(w, len(vocab))
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]"
    )
    tok.chat_template = (
        "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} {% endfor %}"
        "{% if add_generation_prompt %}<|assistant|> {% endif %}"
    )
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        pad_token_id=1,
        eos_token_id=2,
        bos_token_id=2,
    )
    model = LlamaForCausalLM(config).eval()
    return SimpleNamespace(model=model, tokenizer=tok, source="tiny")


@pytest.fixture
def length_pairs() -> pd.DataFrame:
    """Six hand-written pairs; the preferred text is always the shorter one (planted rule "shorter")."""
    short = ["The cat sat.", "A dog ran.", "Sun is hot.", "Cold river.", "A short city.", "Who was born."]
    long = [
        "The cat sat on the mat in the sun and the dog ran far away from it.",
        "A dog ran far away from the city and the river and the long text.",
        "The sun is hot and the river is cold and a cat sat on the mat.",
        "The cold river ran far from the city where a person was born long ago.",
        "A short city text is long when a dog and a cat sat on the mat.",
        "Who was born in the city of the river, and who ran far away in the sun?",
    ]
    rows = []
    for i, (s, lo) in enumerate(zip(short, long)):
        if i % 2:
            rows.append(
                {"text_a": s, "text_b": lo, "preferred_text": "text_a", "person_a": False, "person_b": False}
            )
        else:
            rows.append(
                {"text_a": lo, "text_b": s, "preferred_text": "text_b", "person_a": False, "person_b": False}
            )
    return pd.DataFrame(rows)


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest output clean
        pass

    def do_POST(self):
        srv = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        srv.requests.append((self.path, body, self.headers.get("Authorization")))
        if srv.fail:
            code = srv.fail.pop(0)
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"error": {"message": "scripted failure"}}')
            return
        if self.path.endswith("/chat/completions"):
            content = srv.reply(body["messages"])
            out = {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}
        elif self.path.endswith("/embeddings"):
            out = {"data": [{"index": i, "embedding": srv.embed(t)} for i, t in enumerate(body["input"])]}
        else:
            self.send_response(404)
            self.end_headers()
            return
        data = json.dumps(out).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _bag_of_words(text: str) -> list[float]:
    keys = [
        "short",
        "concise",
        "brief",
        "long",
        "detail",
        "person",
        "number",
        "formal",
        "english",
        "accurate",
    ]
    return [float(text.lower().count(k)) + 0.01 * i for i, k in enumerate(keys)]


def _start_stub_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.requests = []
    server.fail = []
    server.reply = lambda messages: "A"
    server.embed = _bag_of_words
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    server.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    return server, thread


def _stop_stub_server(server, thread):
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def stub_server():
    """An OpenAI-compatible server on 127.0.0.1 (chat + embeddings); set ``.reply`` / ``.fail`` per test.
    ``.requests`` records (path, body, Authorization header)."""
    server, thread = _start_stub_server()
    yield server
    _stop_stub_server(server, thread)


@pytest.fixture
def second_stub_server():
    """Another server like ``stub_server``, on its own port."""
    server, thread = _start_stub_server()
    yield server
    _stop_stub_server(server, thread)
