"""The Spark engine's edges: a project of `path:` sources runs unchanged on both engines; what
Spark cannot do is refused with a code before anything is written (E070 for a construct, E072
for a feature, E071 for an engine setting); the CLI reaches Spark with `--engine spark`."""

import datetime as dt
import json
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from strata_dagster.backends.choice import backend_choice, current_backend, using_backend
from strata_dagster.backends.duckdb.sample_data import write_sample_data
from strata_dagster.engine.commands.gc import gc
from strata_dagster.engine.reads.readers import reader_statement_for
from strata_dagster.errors import StrataError
from strata_dagster_tests.support.engine_support import ADVANCE_UPDATED_AT, SHOP
from strata_dagster_tests.support.engines_support import engine_under_test, normalised, spark_params
from strata_dagster_tests.support.paths import REPO

FILES_MODULE = """
source events {
  path: 'files/events/*.parquet'
}

source customers {
  path: 'files/customers.csv'
}

source tags {
  path: 'files/tags.json'
}

model joined {
  from events
  join left customers on events.cust = customers.cust
  filter events.v > 0
  select events.id, events.v, customers.region
}

model tagged {
  from events
  join tags on events.id = tags.id
  select events.id, tags.tag
}

model regions {
  from joined
  group region
  aggregate n = count(*), total = sum(v)
}
"""


def files_project(root: Path) -> Path:
    project = root / "files_project"
    (project / "files" / "events").mkdir(parents=True)
    (project / "models.strata").write_text(FILES_MODULE)
    for part, ids in enumerate(((1, 2, 3), (4, 5))):
        table = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "cust": pa.array([i % 3 for i in ids], pa.int64()),
                "v": pa.array([i * 2 - 3 for i in ids], pa.int64()),
            }
        )
        pq.write_table(table, project / "files" / "events" / f"part-{part}.parquet")
    (project / "files" / "customers.csv").write_text("cust,region\n0,north\n1,south\n")
    (project / "files" / "tags.json").write_text(
        "\n".join(json.dumps({"id": i, "tag": tag}) for i, tag in ((1, "a"), (1, "b"), (4, "c"))) + "\n"
    )
    return project


@pytest.mark.spark
def test_a_project_of_file_sources_gives_the_same_rows_on_both_engines(tmp_path):
    project = files_project(tmp_path)
    rows = {}
    for name in ("duckdb", "spark"):
        with engine_under_test(name, tmp_path / name) as engine:
            (tmp_path / name).mkdir(exist_ok=True)
            result = engine.run(project)
            assert {outcome.path for outcome in result.outcomes} == {"full"}
            rows[name] = {model: normalised(engine.live(model)) for model in ("joined", "tagged", "regions")}
            assert engine.run(project, only_stale=True).is_noop  # unchanged files: nothing to do
    assert rows["duckdb"] == rows["spark"]
    assert sum(rows["spark"]["tagged"].values()) == 3


@pytest.mark.parametrize("engine_name", spark_params())
def test_what_spark_cannot_do_is_refused_before_anything_is_written(engine_name, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "m.strata").write_text(
        "source other {\n  table: raw.t\n  database: 'other.duckdb'\n}\nmodel copy {\n  from other\n}\n"
    )
    con = duckdb.connect(str(project / "other.duckdb"))
    con.execute("CREATE SCHEMA raw; CREATE TABLE raw.t AS SELECT 1 AS a")
    con.close()
    with engine_under_test(engine_name, tmp_path) as engine:
        if engine_name == "duckdb":
            assert engine.run(project).outcome("copy").rows == 1  # DuckDB attaches the file
            return
        with pytest.raises(StrataError) as attached:
            engine.run(project)
        assert attached.value.code == "E072" and "database" in attached.value.message
        # A construct Spark would compute differently, refused at its place.
        (project / "m.strata").write_text(
            "source t {\n  table: raw.t\n}\nmodel h {\n  from t\n  derive x = hash(a)\n}\n"
        )
        engine.write_table("raw.t", (("a", "INTEGER"),), [(1,)])
        with pytest.raises(StrataError) as construct:
            engine.run(project)
        assert construct.value.code == "E070" and construct.value.location.line == 6
        with engine.chosen():
            with pytest.raises(StrataError) as compacting:
                gc(engine.warehouse, keep=1, compact_file=True)
            assert compacting.value.code == "E072"
            with pytest.raises(StrataError) as reading:
                reader_statement_for(engine.warehouse)
            assert reading.value.code == "E072"
        # Neither refusal wrote a snapshot or a history.
        databases = {row[0] for row in engine.spark.sql("SHOW DATABASES").collect()}
        assert not databases & {"strata_snapshots", "strata", "main"}, databases


@pytest.mark.spark
def test_a_view_model_over_csv_files_is_refused_on_spark_and_over_parquet_reads_them(tmp_path):
    project = files_project(tmp_path)
    (project / "models.strata").write_text(
        FILES_MODULE
        + "model v_events {\n  from events\n  materialize: view\n}\n"
        + "model v_customers {\n  from customers\n  materialize: view\n}\n"
    )
    with engine_under_test("spark", tmp_path) as engine:
        with pytest.raises(StrataError) as refused:
            engine.run(project, models=["v_customers"])
        assert refused.value.code == "E072"
        engine.run(project, models=["v_events"])
        assert sum(normalised(engine.live("v_events")).values()) == 5


def test_engine_settings_that_cannot_be_used_are_e071(monkeypatch):
    for name, remote in (("bogus", None), ("spark", "http://host:1")):
        with pytest.raises(StrataError) as error:
            backend_choice(name, remote)
        assert error.value.code == "E071"
    monkeypatch.setenv("STRATA_ENGINE", "nope")
    result = subprocess.run(
        [str(Path(sys.executable).parent / "strata"), "check", "examples/shop"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1 and "error[E071]" in result.stderr and "Traceback" not in result.stderr
    with using_backend(backend_choice("spark")):
        assert current_backend().name == "spark"  # a chosen engine wins over the environment


EVENTS = REPO / "examples" / "events"
EVENT_MODELS = ("events_log", "daily_kinds", "kinds_last_week")
SHOP_MODELS = (
    "first_seen_orders",
    "order_status_log",
    "stg_customers",
    "stg_orders",
    "daily_revenue",
    "order_tags",
    "order_timeline",
    "orders_enriched",
    "monthly_revenue",
)


@pytest.mark.spark
def test_the_shop_example_gives_the_same_rows_on_both_engines_before_and_after_a_change(tmp_path):
    project = tmp_path / "shop"
    shutil.copytree(SHOP, project, ignore=shutil.ignore_patterns("*.duckdb*", "*.py", "*.md", "__pycache__"))
    rows: dict[str, list] = {}
    for name in ("duckdb", "spark"):
        folder = tmp_path / name
        folder.mkdir()
        raw = folder / "sample.duckdb"  # the same deterministic sample data for both engines
        write_sample_data(raw, 1500)
        with engine_under_test(name, folder) as engine:
            _copy_shop_sources(raw, engine)
            engine.run(project)
            states = [{model: normalised(engine.live(model)) for model in SHOP_MODELS}]
            # Some orders change (shipped, amounts), stamped as the cdc contract says.
            con = duckdb.connect(str(raw))
            con.execute(
                f"UPDATE raw.orders SET status = 'shipped', amount = amount + 1, {ADVANCE_UPDATED_AT} "
                "WHERE order_id % 97 = 0"
            )
            con.close()
            _copy_shop_sources(raw, engine)
            assert engine.run(project, only_stale=True).outcome("stg_orders").path == "delta", name
            states.append({model: normalised(engine.live(model)) for model in SHOP_MODELS})
            rows[name] = states
    assert rows["duckdb"] == rows["spark"]


def _copy_shop_sources(raw: Path, engine) -> None:
    """The sample data's tables into the engine: the warehouse file itself on DuckDB (the shop
    reads `raw.*` there), tables of the catalog on Spark."""
    if engine.name == "duckdb":
        if not engine.warehouse.exists():
            shutil.copy(raw, engine.warehouse)
            return
        con = duckdb.connect(str(engine.warehouse))
        con.execute("ATTACH ? AS fresh (READ_ONLY)", [str(raw)])
        for table in ("orders", "customers"):
            con.execute(f"CREATE OR REPLACE TABLE raw.{table} AS SELECT * FROM fresh.raw.{table}")
        con.close()
        return
    con = duckdb.connect(str(raw), read_only=True)
    engine.spark.sql("CREATE DATABASE IF NOT EXISTS raw")
    for table in ("orders", "customers"):
        frame = engine.spark.createDataFrame(con.sql(f"SELECT * FROM raw.{table}").to_arrow_table())
        frame.write.mode("overwrite").format("parquet").saveAsTable(f"raw.{table}")
    con.close()


@pytest.mark.spark
def test_separate_cli_processes_share_one_catalog_through_spark_connect(tmp_path):
    """`--spark-remote`: every command is a client of one Spark Connect server, so processes that
    a local embedded catalog would shut out of each other (Dagster steps, readers) share it."""
    from strata_dagster_tests.support.spark_support import spark_connect_server

    project = tmp_path / "project"
    project.mkdir()
    (project / "m.strata").write_text(
        "source orders {\n  table: raw.orders\n  versioning: cdc(updated_at)\n}\n"
        "model totals {\n  from orders\n  group status\n  aggregate n = count(*)\n}\n"
    )
    with spark_connect_server(tmp_path / "connect") as url:
        # The source, written by a client process of its own (this process runs a local Spark,
        # and one process holds one kind of session).
        load = (
            "import sys; from pyspark.sql import SparkSession; "
            "s = SparkSession.builder.remote(sys.argv[1]).getOrCreate(); "
            "s.sql('CREATE DATABASE IF NOT EXISTS raw'); "
            's.sql("CREATE TABLE raw.orders USING parquet AS SELECT id AS order_id, '
            "IF(id % 3 = 0, 'paid', 'open') AS status, TIMESTAMP_NTZ'2025-01-01 00:00:00' + "
            'make_interval(0, 0, 0, 0, 0, 0, id) AS updated_at FROM range(30)")'
        )
        loaded = subprocess.run(
            [sys.executable, "-c", load, url], capture_output=True, text=True, timeout=600
        )
        assert loaded.returncode == 0, loaded.stderr[-2000:]
        strata = [str(Path(sys.executable).parent / "strata")]
        common = ["--engine", "spark", "--spark-remote", url, "--warehouse", str(tmp_path / "unused")]
        built = subprocess.run(
            [*strata, "run", str(project), *common], capture_output=True, text=True, timeout=600
        )
        assert built.returncode == 0, built.stderr
        again = subprocess.run(
            [*strata, "run", str(project), *common, "--only-stale"],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert "nothing to do" in again.stdout, again.stdout + again.stderr
        shown = subprocess.run(
            [*strata, "show", str(project), "totals", *common, "--output", str(tmp_path / "t.csv")],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert shown.returncode == 0, shown.stderr
        assert sorted((tmp_path / "t.csv").read_text().splitlines()[1:]) == ['"open",20', '"paid",10']


@pytest.mark.spark
def test_the_events_example_of_daily_drops_gives_the_same_rows_on_both_engines(tmp_path):
    """Business-versioned Parquet drops (the ledger, new partitions only, a sliding window) on Spark
    read the same folders as on DuckDB and give the same rows, after the first build and after the
    next day's drop arrives."""
    from strata_dagster.backends.duckdb.sample_events import write_sample_events

    project = tmp_path / "events_project"
    shutil.copytree(EVENTS, project, ignore=shutil.ignore_patterns("events", "*.duckdb*", "*.md"))
    drops = project / "events"

    def write_days(days: int) -> None:
        write_sample_events(drops, "dt", days=days, rows_per_day=40, start=dt.date(2026, 1, 1), seed=7)

    rows: dict[str, list] = {}
    for name in ("duckdb", "spark"):
        shutil.rmtree(drops, ignore_errors=True)
        write_days(4)
        folder = tmp_path / name
        folder.mkdir()
        with engine_under_test(name, folder) as engine:
            engine.run(project)
            states = [{model: normalised(engine.live(model)) for model in EVENT_MODELS}]
            write_days(5)  # the next day's folder, with its _SUCCESS marker
            result = engine.run(project, only_stale=True)
            assert result.outcome("events_log").path == "delta", name
            assert result.outcome("daily_kinds").path == "partitions", name
            states.append({model: normalised(engine.live(model)) for model in EVENT_MODELS})
            rows[name] = states
    assert rows["duckdb"] == rows["spark"]
