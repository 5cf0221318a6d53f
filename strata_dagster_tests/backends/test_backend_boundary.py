"""The backend boundary: both engines implement one interface, share their SQL on purpose through
SqlSession, and never inherit each other's behaviour; their capabilities are known before a
session opens and are what its session class says."""

from __future__ import annotations

import inspect

import pytest

from strata_dagster.backends.base import Session
from strata_dagster.backends.choice import BACKEND_NAMES, BackendChoice, Capabilities
from strata_dagster.backends.duckdb.session import DuckDBSession
from strata_dagster.backends.sql.session import SqlSession


def _spark_session_class() -> type[Session]:
    pytest.importorskip("pyspark")
    from strata_dagster.backends.spark.session import SparkWarehouseSession

    return SparkWarehouseSession


def _interface() -> set[str]:
    return {name for name, value in vars(Session).items() if getattr(value, "__isabstractmethod__", False)}


def test_both_engines_implement_the_whole_interface_over_the_shared_sql_base():
    spark = _spark_session_class()
    for backend in (DuckDBSession, spark):
        assert issubclass(backend, SqlSession)
        assert not inspect.isabstract(backend), sorted(backend.__abstractmethods__)
    assert len(_interface()) >= 50  # the interface is the whole of what the engine asks


def test_no_engine_inherits_the_other_engines_behaviour():
    spark = _spark_session_class()
    assert not issubclass(spark, DuckDBSession)
    assert not issubclass(DuckDBSession, spark)
    for name in _interface():
        # Every interface method either engine answers comes from its own class, the shared SQL
        # base, or the interface's documented neutral default: never from the other engine.
        for backend, other in ((spark, DuckDBSession), (DuckDBSession, spark)):
            owner = next(klass for klass in backend.__mro__ if name in vars(klass))
            assert owner in (backend, SqlSession, Session), (backend.__name__, name, owner.__name__)
            assert owner is not other


def test_capabilities_are_known_before_a_session_opens_and_match_the_session_class():
    spark = _spark_session_class()
    classes = {"duckdb": DuckDBSession, "spark": spark}
    assert set(BACKEND_NAMES) == set(classes)
    for name, backend in classes.items():
        capabilities = BackendChoice(name).capabilities
        assert isinstance(capabilities, Capabilities)
        assert backend.capabilities is capabilities
        assert backend.backend == name
    assert BackendChoice("duckdb").default_warehouse_name == "warehouse.duckdb"
    assert BackendChoice("spark").default_warehouse_name == "spark-warehouse"
