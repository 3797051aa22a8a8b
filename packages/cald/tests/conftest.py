"""Fast-tier settings (one torch thread) and the tiny local model / Wikipedia file the CLI tests share."""

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


WORDS = [
    "the",
    "a",
    "of",
    "is",
    "was",
    "in",
    "and",
    "city",
    "river",
    "animal",
    "number",
    "war",
    "king",
    "song",
    "planet",
    "cell",
    "art",
]
TOPICS = ["Arts", "Geography", "History"]


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """A random 2-layer Llama saved with a word-level tokenizer (no download)."""
    import transformers
    from tiny_models import tiny_llama
    from tokenizers import Tokenizer, models, pre_tokenizers

    folder = tmp_path_factory.mktemp("tiny-llama")
    vocab = {"<pad>": 0, "<unk>": 1, **{w: i + 2 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", eos_token="<pad>"
    )
    model = tiny_llama(2, dtype=torch.float32, seq=64)
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def wiki_file(tmp_path_factory):
    rng = torch.Generator().manual_seed(0)
    rows = {}
    for i in range(48):
        topic = TOPICS[i % 3]
        words = [WORDS[int(j)] for j in torch.randint(0, len(WORDS), (12,), generator=rng)]
        rows[str(i)] = {
            "title": f"t{i}",
            "extract": " ".join([topic.lower(), *words]),
            "description": "",
            "topic": topic,
        }
    path = tmp_path_factory.mktemp("wiki") / "summaries_en-us.json"
    path.write_text(json.dumps(rows))
    return path
