"""Readers during publication, on both engines (issue 15 item 5, issue 19): two readers query
every live view in a loop while a writer runs and repoints them; no read fails, and every read
sees a whole view (its rows equal some full rebuild the writer published, never a mix).

DuckDB readers read the serving copy (`strata connect`'s statement, a connection each); Spark
readers query the live views in the same Spark (ALTER VIEW is one catalog call)."""

import threading

import duckdb
import pytest

from strata_dagster.engine.reads.readers import reader_statement_for
from strata_dagster_tests.support.acceptance_support import MODELS, Sources, make_project
from strata_dagster_tests.support.engines_support import engine_under_test, normalised, spark_params

RUNS = {"duckdb": 4, "spark": 3}  # a Spark run takes seconds, while two readers hammer it


def _reader(engine, stop, errors, seen):
    """Query every live view until told to stop; keep each answer (as a multiset) per model."""
    con = None
    try:
        while not stop.is_set():
            for model in MODELS:
                try:
                    if engine.name == "spark":
                        rows = [
                            tuple(row) for row in engine.spark.sql(f"SELECT * FROM main.v_{model}").collect()
                        ]
                    else:
                        con = duckdb.connect()
                        con.execute(reader_statement_for(engine.warehouse))
                        rows = con.execute(f"SELECT * FROM main.v_{model}").fetchall()
                        con.close()
                        con = None
                    seen[model].append(normalised(rows))
                except Exception as error:  # noqa: BLE001 - every failure is what the test counts
                    errors.append(f"{model}: {type(error).__name__}: {str(error).splitlines()[0]}")
    finally:
        if con is not None:
            con.close()


@pytest.mark.parametrize("engine_name", spark_params())
def test_two_readers_never_fail_and_see_whole_views_while_a_writer_publishes(engine_name, tmp_path):
    with engine_under_test(engine_name, tmp_path) as engine:
        project = make_project(tmp_path)
        sources = Sources()
        for cust, status, value in ((0, "open", 1), (1, "paid", 4), (2, "paid", 2)):
            sources.insert(cust, status, value)
        sources.write(engine)
        engine.run(project)
        published = {model: [normalised(engine.live(model))] for model in MODELS}
        stop, errors = threading.Event(), []
        seen = [{model: [] for model in MODELS} for _ in range(2)]
        readers = [threading.Thread(target=_reader, args=(engine, stop, errors, seen[i])) for i in range(2)]
        for reader in readers:
            reader.start()
        try:
            for number in range(RUNS[engine_name]):
                sources.apply(("insert", [(number % 3, "paid", number, 1)]))
                sources.apply(("update", [(number % 3, "open", 10 + number)]))
                sources.write(engine)
                engine.run(project, only_stale=True)
                for model in MODELS:
                    published[model].append(normalised(engine.live(model)))
        finally:
            stop.set()
            for reader in readers:
                reader.join(timeout=120)
        assert errors == []
        for answers in seen:
            assert sum(len(reads) for reads in answers.values()) > 0
            for model, reads in answers.items():
                for read in reads:
                    assert read in published[model], model  # a published state, whole
