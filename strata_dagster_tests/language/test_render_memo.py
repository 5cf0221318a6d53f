"""Renderings kept beside the warehouse (language/render_memo.py): a tree is looked up by all that
sqlglot renders it from, so a kept rendering is the one sqlglot gives; trees that differ in any
way that shows (quoting, a literal's kind, a comment, an option) are kept apart; a tree holding a
class that is not sqlglot's is always rendered; a damaged or unprotected file is ignored and
written again; a memo keeps only the renderings last asked for."""

import marshal
import os

import pytest
from sqlglot import exp, parse_one

from strata_dagster.language import render_memo
from strata_dagster.language.render_memo import keep, remembered, rendered

STATEMENTS = (
    "SELECT a, b FROM raw.orders WHERE a > 1",
    'SELECT "a", b FROM raw.orders WHERE a > 1',  # quoted
    "SELECT a, b FROM raw.orders WHERE a > '1'",  # a string, not a number
    "SELECT a /* why */, b FROM raw.orders WHERE a > 1",  # a comment
    "SELECT COUNT(*), SUM(HASH(t)) FROM raw.orders AS t",
    "WITH x AS (SELECT 1 AS y) SELECT y FROM x UNION ALL SELECT 2",
    "DESCRIBE SELECT * FROM raw.customers",
    "SELECT CAST(a AS DECIMAL(18, 3)), a::DATE FROM t",
)


@pytest.fixture
def cache_dir(tmp_path):
    (tmp_path / "w.duckdb").write_bytes(b"")  # a warehouse file: a memo is kept only beside one
    return tmp_path / "w.duckdb.parsed"


def trees():
    return [parse_one(sql, dialect="duckdb") for sql in STATEMENTS]


def test_without_a_memo_a_tree_is_rendered():
    tree = parse_one(STATEMENTS[0])
    assert rendered(tree, "duckdb") == tree.sql(dialect="duckdb")


def test_a_kept_rendering_is_sqlglots_and_trees_that_differ_are_kept_apart(cache_dir):
    expected = [tree.sql(dialect="duckdb") for tree in trees()]
    expected_plain = [tree.sql(dialect="duckdb", comments=False) for tree in trees()]
    assert len(set(expected)) == len(STATEMENTS)
    with remembered(cache_dir) as memo:
        assert [rendered(tree, "duckdb") for tree in trees()] == expected
        assert [rendered(tree, "duckdb", comments=False) for tree in trees()] == expected_plain
        keep(memo)
    assert len(render_memo._read(cache_dir)) == 2 * len(STATEMENTS)  # options are part of the key
    with remembered(cache_dir) as memo:
        assert memo is not None and memo.known
        assert [rendered(tree, "duckdb") for tree in trees()] == expected
        assert [rendered(tree, "duckdb", comments=False) for tree in trees()] == expected_plain
        assert [rendered(tree, "duckdb", copy=False) for tree in trees()] == expected


def test_a_kept_rendering_is_what_the_memo_gives(cache_dir):
    """What the file holds is what is used (a rendering is looked up, not made again)."""
    tree = parse_one(STATEMENTS[0])
    with remembered(cache_dir) as memo:
        rendered(tree, "duckdb")
        keep(memo)
    (key,) = render_memo._read(cache_dir)
    path = cache_dir / render_memo.FILE_NAME
    form, versions, _ = marshal.loads(path.read_bytes())
    path.write_bytes(marshal.dumps((form, versions, {key: "SELECT 'kept'"})))
    with remembered(cache_dir):
        assert rendered(parse_one(STATEMENTS[0]), "duckdb") == "SELECT 'kept'"


class Strange(exp.Column):
    """A node class that is not sqlglot's: how it renders is not sqlglot's alone to say."""


def test_a_tree_with_a_class_not_sqlglots_is_always_rendered(cache_dir):
    tree = exp.select(Strange(this=exp.to_identifier("a"))).from_("t")
    with remembered(cache_dir) as memo:
        with pytest.raises(ValueError, match="Strange"):  # sqlglot's own answer, not a lookup
            rendered(tree, "duckdb")
        assert memo is not None and memo.used == {}


def test_a_memo_keeps_only_what_it_was_last_asked_for(cache_dir):
    first, second = trees()[:2]
    for tree in (first, second):
        with remembered(cache_dir) as memo:
            rendered(tree, "duckdb")
            keep(memo)
    assert list(render_memo._read(cache_dir).values()) == [second.sql(dialect="duckdb")]


def test_a_damaged_or_unprotected_file_is_ignored_and_written_again(cache_dir):
    with remembered(cache_dir) as memo:
        rendered(trees()[0], "duckdb")
        keep(memo)
    path = cache_dir / render_memo.FILE_NAME
    good = path.read_bytes()
    for damage in (
        b"",
        b"not a memo",
        good[:-10],
        marshal.dumps((1, "another python", {})),
        marshal.dumps((1,)),
    ):
        path.write_bytes(damage)
        assert render_memo._read(cache_dir) == {}
        with remembered(cache_dir) as memo:
            assert rendered(trees()[0], "duckdb") == trees()[0].sql(dialect="duckdb")
            keep(memo)
        assert len(render_memo._read(cache_dir)) == 1
    os.chmod(path, 0o666)
    assert render_memo._read(cache_dir) == {}
    os.chmod(path, 0o644)
    os.chmod(cache_dir, 0o777)
    assert render_memo._read(cache_dir) == {}
    os.chmod(cache_dir, 0o755)
    assert len(render_memo._read(cache_dir)) == 1


def test_nothing_is_kept_beside_a_warehouse_that_does_not_exist(tmp_path):
    cache_dir = tmp_path / "typo.duckdb.parsed"
    with remembered(cache_dir) as memo:
        rendered(trees()[0], "duckdb")
        keep(memo)
    assert not cache_dir.exists()


def test_a_forgotten_memo_looks_nothing_up_and_is_never_kept(cache_dir):
    with remembered(cache_dir) as memo:
        rendered(trees()[0], "duckdb")
        render_memo.forget()
        rendered(trees()[1], "duckdb")
        assert memo is not None and len(memo.used) == 1
        keep(memo)
    assert not (cache_dir / render_memo.FILE_NAME).exists()
