"""The docs runner finds every Python block, honours skip (with a reason) and setup markers, runs a file's blocks in
order in one process, and reports the failing block by file and line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import doc_blocks

MD = """# Title

<!-- docs: setup
```python
open("pairs.csv", "w").write("a,b\\n1,2\\n")
```
-->

```python
rows = open("pairs.csv").read().splitlines()
```

Text between.

<!-- docs: skip needs a GPU -->
```python
import torch; torch.zeros(1, device="cuda")
```

```bash
echo not python
```

```python
assert rows == ["a,b", "1,2"], rows
```
"""


def test_extract_marks_setup_skip_and_ignores_other_languages():
    blocks = doc_blocks.extract(MD)
    assert [(b.setup, b.skip) for b in blocks] == [
        (True, None),
        (False, None),
        (False, "needs a GPU"),
        (False, None),
    ]
    assert blocks[1].line == 10 and blocks[1].code.startswith("rows = ")


def test_a_skip_marker_needs_a_reason_and_a_setup_comment_must_close():
    with pytest.raises(ValueError, match="needs a reason"):
        doc_blocks.extract("<!-- docs: skip -->\n```python\nx = 1\n```\n")
    with pytest.raises(ValueError, match="never closed"):
        doc_blocks.extract("<!-- docs: setup\n```python\nx = 1\n```\n")
    with pytest.raises(ValueError, match="unclosed code fence"):
        doc_blocks.extract("```python\nx = 1\n")


def test_a_skip_marker_applies_only_to_the_next_block():
    blocks = doc_blocks.extract("<!-- docs: skip reason here -->\n\nsome prose\n\n```python\nx = 1\n```\n")
    assert blocks[0].skip is None


def test_blocks_of_a_file_share_one_namespace_in_an_empty_folder(tmp_path):
    md = tmp_path / "README.md"
    md.write_text(MD)
    result = doc_blocks.run_file(md, timeout=60)
    assert result.ok, result.output
    assert result.ran == 2 and len(result.skipped) == 1 and "needs a GPU" in result.skipped[0]
    assert not (tmp_path / "pairs.csv").exists()  # the blocks ran elsewhere


def test_a_failing_block_is_reported_with_its_file_and_line(tmp_path):
    md = tmp_path / "README.md"
    md.write_text("intro\n\n```python\nx = 1\n```\n\n```python\nraise KeyError('input')\n```\n")
    result = doc_blocks.run_file(md, timeout=60)
    assert not result.ok
    assert f"FAILED {md}:8 (block)" in result.output and "KeyError: 'input'" in result.output
