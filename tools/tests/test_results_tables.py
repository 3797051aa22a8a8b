"""tools/results_tables.py: README tables rendered from results files, and the lint check that catches drift."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parent.parent / "results_tables.py"
spec = importlib.util.spec_from_file_location("results_tables", TOOL)
results_tables = importlib.util.module_from_spec(spec)
spec.loader.exec_module(results_tables)

RESULTS = {
    "metrics": {"speedup": 1.23456, "failed": None, "nan_as_text": "nan"},
    "tables": {"bench": [{"arm": "a|b", "median_s": 0.5, "n": 3, "ok": True}, {"arm": "c", "median_s": 2.0, "n": 4, "ok": False}]},
}  # fmt: skip


@pytest.fixture
def readme(tmp_path: Path) -> Path:
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "r.json").write_text(json.dumps(RESULTS))
    path = tmp_path / "README.md"
    path.write_text(
        "Intro 1.5\n<!-- results: results/r.json tables.bench columns=arm,median_s,ok -->\nstale\n<!-- /results -->\n"
        "<!-- results: results/r.json metrics -->\n<!-- /results -->\nend\n"
    )
    return path


def test_write_renders_every_block_and_check_then_passes(readme):
    assert results_tables.process(readme, write=False) != []  # stale before
    assert results_tables.process(readme, write=True) == []
    text = readme.read_text()
    assert "| arm | median_s | ok |\n|---|---|---|\n| a\\|b | 0.5 | true |\n| c | 2 | false |\n" in text
    assert "| speedup | 1.235 |\n| failed | n/a |\n| nan_as_text | n/a |\n" in text
    assert text.startswith("Intro 1.5\n") and text.endswith("<!-- /results -->\nend\n")
    assert results_tables.process(readme, write=False) == []


def test_a_hand_edited_number_or_a_missing_source_fails_the_check(readme):
    results_tables.process(readme, write=True)
    readme.write_text(readme.read_text().replace("| c | 2 |", "| c | 1.9 |"))
    [problem] = results_tables.process(readme, write=False)
    assert "differs from its file" in problem and "tables.bench" in problem
    (readme.parent / "results" / "r.json").unlink()
    problems = results_tables.process(readme, write=False)
    assert len(problems) == 2 and all("no file" in p for p in problems)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("results/r.json", "need '<file> <selector>"),
        ("results/r.json rows", "selector must be"),
        ("results/r.json tables.other", "no non-empty table 'tables.other'"),
        ("results/r.json tables.bench columns=arm,speed", "lack column(s) speed"),
    ],
)
def test_malformed_blocks_are_named(readme, spec, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        results_tables.render(spec, readme.parent)


def test_the_repositorys_markdown_is_in_sync():
    problems = [p for f in results_tables.default_files() for p in results_tables.process(f, write=False)]
    assert problems == []


def test_quoted_table_names_and_row_filters(tmp_path: Path):
    data = {
        "tables": {"G-set at equal time": [{"g": "G1", "s": 10, "v": 0.5}, {"g": "G1", "s": 30, "v": 0.75}]}
    }
    (tmp_path / "r.json").write_text(json.dumps(data))
    table = results_tables.render('r.json tables."G-set at equal time" columns=g,v where=s:30', tmp_path)
    assert table == "| g | v |\n|---|---|\n| G1 | 0.75 |\n"
    with pytest.raises(ValueError, match="no row"):
        results_tables.render('r.json "tables.G-set at equal time" where=s:60', tmp_path)


def test_inline_values_render_and_a_hand_edited_headline_fails(tmp_path: Path):
    data = {"metrics": {"tau": 1.3612}, "tables": {"cmp": [{"name": "A - B", "mean_difference": 1.18}, {"name": "C - B", "mean_difference": -0.5}]}}  # fmt: skip
    (tmp_path / "r.json").write_text(json.dumps(data))
    readme = tmp_path / "README.md"
    readme.write_text(
        "tau <!-- value: r.json metrics.tau fmt=.2f -->?<!-- /value -->, "
        "diff <!-- value: r.json 'tables.cmp[name=A - B].mean_difference' fmt=+.2f -->?<!-- /value -->, "
        "last <!-- value: r.json tables.cmp[-1].mean_difference -->?<!-- /value -->.\n"
    )
    assert len(results_tables.process(readme, write=False)) == 3
    assert results_tables.process(readme, write=True) == []
    text = readme.read_text()
    assert "-->1.36<!--" in text and "-->+1.18<!--" in text and "-->-0.5<!--" in text
    readme.write_text(text.replace("-->+1.18<!--", "-->+1.20<!--"))
    [problem] = results_tables.process(readme, write=False)
    assert "is +1.18, the text says +1.20" in problem


@pytest.mark.parametrize(
    ("selector", "message"),
    [("metrics.none", "no metric"), ("tables.cmp[name=X].mean_difference", "0 rows match"), ("tables.cmp", "selector must be")],
)  # fmt: skip
def test_inline_value_errors_name_what_is_missing(tmp_path: Path, selector, message):
    (tmp_path / "r.json").write_text(json.dumps({"metrics": {}, "tables": {"cmp": [{"name": "A"}]}}))
    with pytest.raises(ValueError, match=message):
        results_tables.render_value(f"r.json {selector}", tmp_path)


def test_nested_metrics_and_wall_time_are_values(tmp_path: Path):
    data = {"wall_s": 78.04, "metrics": {"diagnostics": {"codes_used": 37, "top1": 0.6431}, "a.b": 2}}
    (tmp_path / "r.json").write_text(json.dumps(data))
    assert results_tables.render_value("r.json metrics.diagnostics.top1 fmt=.2f", tmp_path) == "0.64"
    assert results_tables.render_value("r.json metrics.diagnostics.codes_used", tmp_path) == "37"
    assert (
        results_tables.render_value("r.json metrics.a.b", tmp_path) == "2"
    )  # a dotted key wins over nesting
    assert results_tables.render_value("r.json wall_s fmt=.0f", tmp_path) == "78"
    with pytest.raises(ValueError, match="no metric"):
        results_tables.render_value("r.json metrics.diagnostics.missing", tmp_path)


def test_column_names_with_commas_and_pipes(tmp_path: Path):
    data = {"tables": {"t": [{"spearman(phi, exact) mean": 0.5, "|U|": 3, "k": 1}]}}
    (tmp_path / "r.json").write_text(json.dumps(data))
    table = results_tables.render(r'r.json tables.t "columns=k,spearman(phi\, exact) mean,|U|"', tmp_path)
    assert table == "| k | spearman(phi, exact) mean | \\|U\\| |\n|---|---|---|\n| 1 | 0.5 | 3 |\n"


def test_a_table_of_numbers_needs_a_source_or_a_static_marker(tmp_path: Path):
    (tmp_path / "r.json").write_text(json.dumps(RESULTS))
    readme = tmp_path / "README.md"
    hand = "| arm | s |\n|---|---|\n| lozo | 2.80 |\n"
    readme.write_text(f"Intro\n\n{hand}")
    [problem] = results_tables.process(readme, write=False)
    assert "README.md:3: a table with numbers and no source (| lozo | 2.80 |" in problem
    readme.write_text(f"Intro\n<!-- static table: test tolerances -->\n{hand}")
    assert results_tables.process(readme, write=False) == []
    # a marker two lines above does not count; an empty reason does not either
    readme.write_text(f"<!-- static table: tolerances -->\n\n{hand}<!-- static table: -->\n{hand}")
    assert len(results_tables.process(readme, write=False)) == 2


@pytest.mark.parametrize(
    "row",
    [
        "| the first column names the row: 2.80 | none |",
        "| arm | `--lr 1e-3 --steps 300` |",
        "| arm | 2 seeds |",
        '| arm | <!-- value: r.json "tables.bench[arm=c].median_s" -->2<!-- /value --> s |',
    ],
)
def test_names_code_small_counts_and_rendered_values_are_not_unsourced_numbers(tmp_path: Path, row):
    (tmp_path / "r.json").write_text(json.dumps(RESULTS))
    readme = tmp_path / "README.md"
    readme.write_text(f"| arm | value |\n|---|---|\n{row}\n")
    assert results_tables.process(readme, write=False) == []


@pytest.mark.parametrize("cell", ["2.80", "41 %", "1.3×", "1024"])
def test_decimals_percentages_ratios_and_large_numbers_are_caught(tmp_path: Path, cell):
    readme = tmp_path / "README.md"
    readme.write_text(f"| arm | value |\n|---|---|\n| a | {cell} |\n")
    assert len(results_tables.process(readme, write=False)) == 1
