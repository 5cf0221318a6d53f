"""Business-versioned file sources listed while the warehouse opens (engine.listing_prefetch): an
unchanged run lists its source once, in the listing thread, and a listing made before another run
consumed partitions decides nothing."""

import threading
from concurrent.futures import Future

from strata_dagster.backends.duckdb import partition_evidence
from strata_dagster.backends.opening import open_session
from strata_dagster.engine.context import load_context
from strata_dagster.engine.listing_prefetch import Listings, listing_request
from strata_dagster.engine.plan import plan_project
from strata_dagster.engine.run import run_project
from strata_dagster.engine.sources import business
from strata_dagster.language import load_project
from strata_dagster_tests.support.business_support import day, make_file_project, write_file_partition


def _project_of_days(tmp_path, days: int):
    project, warehouse = make_file_project(tmp_path)
    for index in range(days):
        write_file_partition(project, index, 10)
    run_project(project, warehouse)
    return project, warehouse


def test_an_unchanged_run_lists_its_file_source_once_while_the_warehouse_opens(tmp_path, monkeypatch):
    project, warehouse = _project_of_days(tmp_path, 3)
    listed_in: list[str] = []
    real = partition_evidence.file_listing

    def recorded(*request):
        listed_in.append(threading.current_thread().name)
        return real(*request)

    monkeypatch.setattr(partition_evidence, "file_listing", recorded)
    assert run_project(project, warehouse, only_stale=True).is_noop
    assert len(listed_in) == 1 and listed_in[0].startswith("strata-listing"), listed_in
    listed_in.clear()
    assert not plan_project(project, warehouse, only_stale=True).would_run
    assert len(listed_in) == 1 and listed_in[0].startswith("strata-listing"), listed_in

    # A new folder: the listing made while opening is not trusted with it, the run lists again.
    listed_in.clear()
    write_file_partition(project, 3, 10)
    result = run_project(project, warehouse, only_stale=True)
    assert result.outcome("events_log").is_published
    assert len(listed_in) == 2 and listed_in[1] == threading.current_thread().name, listed_in

    # A full refresh reads every partition: listed once, under the lock.
    listed_in.clear()
    run_project(project, warehouse, full_refresh=True)
    assert listed_in == [threading.current_thread().name]


def test_a_listing_made_before_another_run_consumed_partitions_decides_nothing(tmp_path):
    project, warehouse = _project_of_days(tmp_path, 3)
    loaded = load_project(project)
    request = listing_request(loaded.sources["events"], loaded, str(warehouse))
    early = Future()
    early.set_result(partition_evidence.file_listing(*request))  # listed as this run started...
    write_file_partition(project, 3, 10)
    other = run_project(project, warehouse, only_stale=True)  # ...and another run consumed day 3
    assert other.outcome("events_log").is_published
    with open_session(warehouse) as session:
        context = load_context(
            session, project, {}, project=loaded, listings=Listings({request.key(): early})
        )
        # Trusted, the early listing would lack a consumed partition: E052, "day 3 is gone".
        reading = business.read_business_source(session, context, "events", is_full_refresh=False)
    assert reading.last_partition == day(3).isoformat()
    assert reading.new == () and reading.partition_count == 4
