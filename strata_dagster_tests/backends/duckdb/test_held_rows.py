"""Rows a session holds for the statements after it (Session.held_rows): found once per key,
forgotten with the transaction that made them, dropped on request."""

from sqlglot import exp

from strata_dagster.backends.opening import open_session


def numbers(upto: int) -> exp.Query:
    return exp.select("range").from_(exp.func("range", exp.Literal.number(upto)))


def count(session, relation) -> int:
    return len(session.read_rows(relation)[1])


def test_held_rows_are_found_once_per_key_and_survive_a_commit(tmp_path):
    made = []

    def rows() -> exp.Query:
        made.append(1)
        return numbers(5)

    with open_session(tmp_path / "w.duckdb") as session:
        with session.transaction():
            first = session.held_rows(("five",), rows)
        again = session.held_rows(("five",), rows)
        assert first == again and len(made) == 1
        assert count(session, again) == 5
        other = session.held_rows(("three",), lambda: numbers(3))
        assert other != first and count(session, other) == 3


def test_a_rollback_forgets_what_its_transaction_held(tmp_path):
    with open_session(tmp_path / "w.duckdb") as session:
        kept = session.held_rows(("before",), lambda: numbers(2))
        session.begin()
        session.held_rows(("inside",), lambda: numbers(4))
        session.rollback()
        # The table made inside is gone with the transaction: asked again, it is made again, under
        # a name no table had (the one made before the transaction still exists).
        remade = session.held_rows(("inside",), lambda: numbers(4))
        assert count(session, remade) == 4
        assert remade != kept
        # A rollback forgets every key (simpler than knowing which tables the transaction made):
        # the next ask reads again.
        assert count(session, session.held_rows(("before",), lambda: numbers(9))) == 9


def test_forgetting_held_rows_drops_them_and_the_next_ask_reads_again(tmp_path):
    with open_session(tmp_path / "w.duckdb") as session:
        session.held_rows(("n",), lambda: numbers(2))
        session.forget_held(("n",))
        session.forget_held(("never held",))  # nothing to drop: no error
        assert count(session, session.held_rows(("n",), lambda: numbers(7))) == 7
