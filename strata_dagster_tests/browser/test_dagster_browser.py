"""The Dagster UI in headless Chromium, as a newcomer meets it: `dagster dev` on 127.0.0.1 over the
example (31 days of small data), one webserver for the module, four journeys in order:

1. a backfill launched without a reason is refused: its run ends Canceled with the E085 message on
   the run page, the partitions are not shown failed, and the backfill's *Runs* tab shows that run
   Canceled (the backfill itself ends Failed: no public API cancels it);
2. the first *Materialize all*, with `strata/reason` added in the launch dialog's *Add tags*,
   succeeds and every partition shows materialized, the partitions companion's too (none
   "Missing"), and the overview's row count is the table's;
3. a source change makes exactly the changed days of `daily_revenue` stale, and the partition
   view shows it on those days and on no other; with the sensor off, the `strata_stale_partitions`
   check shows the two days, and executed alone it does not pass (the false pass);
4. `strata run` from the command line, then the sources observed from the UI: nothing stale,
   nothing "Never observed", the check passes (the CLI-then-UI path).

Screenshots of every step (and of the page at a failure, named in the failure message) go to
$STRATA_BROWSER_ARTIFACTS, else a temporary folder. Needs Debian's `chromium` and
`chromium-driver` and `selenium`: without them these tests are skipped with one line saying how to
install them, and fail instead under STRATA_REQUIRE_BROWSER=1 (`.ci/run` sets it);
STRATA_SKIP_BROWSER=1 skips them explicitly."""

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from strata_dagster_tests.orchestration.test_dagster_staleness import paid_order
from strata_dagster_tests.support.browser_support import (
    DIALOG,
    Page,
    chromium,
    fresh_profile,
    require_browser,
)
from strata_dagster_tests.support.dagster_support import (
    DONE,
    change_order,
    dagster_dev,
    example_workspace,
    finished,
    order_day,
    wait_for,
    warehouse_digest,
)
from strata_dagster_tests.support.engine_support import execute

# The journeys run in order against one webserver: one worker runs them all.
pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("browser")]

DAYS = 31  # January: the daily and monthly partitions end together (see the report on 40 days)
REASON = "strata/reason"
WHY = "first load"
STALE_CHECK = "strata_stale_partitions"


class Journey:
    """The UI at `base`, the page, and where screenshots go."""

    def __init__(
        self, page: Page, base: str, shots: Path, graphql, log: Path, warehouse: Path, home: Path
    ) -> None:
        self.page, self.base, self.shots = page, base, shots
        self.graphql, self.log, self.warehouse, self.home = graphql, log, warehouse, home

    def open(self, path: str) -> None:
        self.page.open(self.base + path)

    def shot(self, name: str) -> Path:
        return self.page.screenshot(self.shots / f"{name}.png")

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        """A step of a journey: its screenshot on success, and on failure the page's screenshot
        named in the failure message."""
        try:
            yield
        except BaseException as error:
            path = self.shot(f"FAILED-{name}")
            raise AssertionError(
                f"browser journey step `{name}` failed; screenshot: {path}\n{error}"
            ) from error
        self.shot(name)


@pytest.fixture(scope="module")
def ui(request, tmp_path_factory) -> Iterator[Journey]:
    require_browser()
    # Under xdist the journeys share this worker's webserver only when loadgroup grouped them.
    journeys = [item for item in request.session.items if item.path == request.node.path]
    assert not os.environ.get("PYTEST_XDIST_WORKER") or all(
        item.nodeid.endswith("@browser") for item in journeys
    ), "pytest-xdist did not group the browser journeys on one worker (see pyproject's pytest pin)"
    root = tmp_path_factory.mktemp("browser")
    shots = Path(os.environ.get("STRATA_BROWSER_ARTIFACTS") or root / "screenshots")
    _, warehouse, home = example_workspace(root, days=DAYS)
    with dagster_dev(root, home) as (graphql, log):
        graphql("mutation { setNuxSeen }")  # the community newsletter pop-up, seen once per instance
        with chromium(fresh_profile()) as page:
            base = graphql.url.removesuffix("/graphql")
            yield Journey(page, base, shots, graphql, log, warehouse, home)


def wait_runs(journey: Journey, run_ids: list[str], what: str) -> dict[str, str]:
    return wait_for(lambda: finished(journey.graphql, run_ids), 240, what, journey.log, interval=1)


def test_1_a_backfill_without_a_reason_is_refused_visibly_and_marks_no_partition_failed(ui):
    page = ui.page
    run = ui.graphql.launch(["orders", "customers"])  # observe the sources first, as the walk-through says
    assert set(wait_runs(ui, [run], "the observation").values()) == {"SUCCESS"}
    before = warehouse_digest(ui.warehouse)
    with ui.step("1a-asset-page-names-the-reason-tag"):
        ui.open("/assets/daily_revenue")
        page.see(f"//*[contains(normalize-space(), 'need the run tag {REASON}')]")
    with ui.step("1b-partition-dialog-three-days-no-tags"):
        page.click("//button[starts-with(normalize-space(), 'Materialize')]")
        # Nothing upstream is materialized yet: the UI asks first.
        page.click_button("Confirm", within=DIALOG)
        page.type_into(
            f"{DIALOG}//input[starts-with(@placeholder, 'ex:')]", "[2025-01-01...2025-01-03]", leave=True
        )
        page.see_text("3 partitions", within=DIALOG)
        page.see_text("0 tags", within=DIALOG)
    with ui.step("1c-backfill-launched"):
        page.click_button("Launch backfill", within=DIALOG)
        backfill = _created_backfill(page)
    runs = wait_for(lambda: _settled(ui, backfill), 240, "the refused backfill's run", ui.log, interval=1)
    (refused,) = runs
    with ui.step("1d-run-page-canceled-with-E085"):
        ui.open(f"/runs/{refused['runId']}")
        page.see_text("Canceled")
        page.see_text("RUN_CANCELED")
        page.see("//*[starts-with(normalize-space(), 'error[E085]: this run is a backfill')]")
        text = page.body_text()
        assert "has no `strata/reason` tag" in text and "Add tags to backfill runs" in text
        assert "Traceback" not in text and "STEP_FAILURE" not in text
    with ui.step("1e-partitions-none-failed"):
        ui.open("/assets/daily_revenue?view=partitions")
        page.see_text("Failed (0)")
        page.see_text(f"Missing ({DAYS})")
        page.see_text("Materialized (0)")
    with ui.step("1f-backfill-runs-tab-shows-its-run-canceled"):
        # No public API cancels a backfill from its refused run: the backfill ends Failed
        # (Dagster counts a canceled run's partitions as failed), and its Runs tab shows the run
        # Canceled, whose page says why (docs/dagster.md, Backfills).
        ui.open(f"/runs/b/{backfill}?tab=runs")
        page.until(lambda p: "Failed" in p.body_text(), "the backfill to end", timeout=120)
        page.see_text("Canceled")
        page.see(f"//a[contains(@href, '{refused['runId'][:8]}')]")
    assert ui.graphql.backfill(backfill)["status"] == "COMPLETED_FAILED"
    assert warehouse_digest(ui.warehouse) == before


def _created_backfill(page: Page) -> str:
    """The id in the UI's "Created backfill <id>" toast."""
    # The id may follow a non-breaking or zero-width space, or sit in an element of its own. The
    # XPath matches on the DOM's text while the toast may still be fading in, and a fading toast's
    # words are missing from the visible text: read it again until it shows the id.
    toast = "//*[starts-with(normalize-space(), 'Created backfill')]"

    def backfill_id(page: Page) -> str | None:
        found = re.search(r"Created backfill\W+(\w+)", page.see(toast).text)
        return found.group(1) if found else None

    return page.until(backfill_id, "the backfill id in the `Created backfill` toast")


def _settled(ui: Journey, backfill_id: str) -> list[dict] | None:
    runs = ui.graphql.backfill(backfill_id)["runs"]
    return runs if runs and all(run["status"] in DONE for run in runs) else None


def test_2_the_first_materialize_all_with_the_reason_added_in_the_dialog_succeeds(ui):
    page = ui.page
    with ui.step("2a-materialize-all-dialog"):
        ui.open("/asset-groups")
        page.click("//button[contains(normalize-space(), 'Materialize all')]")
        page.see_text("0 tags", within=DIALOG)
    with ui.step("2b-reason-added-in-add-tags"):
        page.click(f"{DIALOG}//*[normalize-space(text())='Tags']")
        page.click_button("Add tags", within=DIALOG)
        page.type_into("//input[@placeholder='Tag Key']", REASON)
        page.type_into("//input[@placeholder='Tag Value']", WHY)
        page.click_button("Apply")
        page.see_text(f"{REASON}: {WHY}", within=DIALOG)
    with ui.step("2c-backfill-launched"):
        page.click_button("Launch backfill", within=DIALOG)
        backfill = _created_backfill(page)
    with ui.step("2d-backfill-completed"):
        ui.open(f"/runs/b/{backfill}")
        page.until(lambda p: "Status\nSucceeded" in p.body_text(), "the backfill to succeed", timeout=400)
    runs = ui.graphql.backfill(backfill)["runs"]
    assert runs and {run["status"] for run in runs} == {"SUCCESS"}
    assert {run["tags"][REASON] for run in runs} == {WHY}
    with ui.step("2e-partitions-all-materialized"):
        ui.open("/assets/daily_revenue?view=partitions")
        page.see_text(f"Materialized ({DAYS})")
        page.see_text("Failed (0)")
        page.see_text("Missing (0)")
    with ui.step("2f-companion-every-day-recorded-none-missing"):
        # The partitions companion reads as what it is: every day recorded, none "Missing".
        ui.open("/assets/stg_orders__by_day?view=partitions")
        page.see_text(f"Materialized ({DAYS})")
        page.see_text("Missing (0)")
    with ui.step("2g-overview-row-count-is-the-tables"):
        ui.open("/assets/daily_revenue")
        page.see_text("Row count")
        shown = page.see("//*[normalize-space()='Row count']/following::*[1]").text
        (whole,) = execute(ui.warehouse, "SELECT count(*) FROM main.v_daily_revenue")[0]
        assert f"{whole:,}" in shown or str(whole) in shown, shown


def test_3_a_source_change_makes_exactly_the_changed_days_visibly_stale(ui):
    page = ui.page
    orders = [paid_order(ui.warehouse, offset) for offset in (10, 200)]
    for order in orders:
        change_order(ui.warehouse, order)
    days = sorted({order_day(ui.warehouse, order) for order in orders})
    assert len(days) == 2, days
    # Observe the source, then rebuild what *Materialize unsynced* would: the unpartitioned models.
    run = ui.graphql.launch(["orders"])
    assert set(wait_runs(ui, [run], "the observation").values()) == {"SUCCESS"}
    run = ui.graphql.launch(
        ["stg_orders", "order_status_log", "first_seen_orders"], job="strata_unpartitioned"
    )
    assert set(wait_runs(ui, [run], "the unpartitioned rebuild").values()) == {"SUCCESS"}
    stale_days = {name for name in ui.graphql.stale() if name.startswith("daily_revenue[")}
    assert stale_days == {f"daily_revenue[{day}]" for day in days}
    with ui.step("3a-partitions-view"):
        ui.open("/assets/daily_revenue?view=partitions")
        page.see_text(f"Materialized ({DAYS})")
    for day in days:
        with ui.step(f"3b-changed-day-{day}-unsynced"):
            # The list is virtualised (days off screen are not in the page): open the partition's
            # link, the address the UI itself shows when a partition is selected.
            ui.open(f"/assets/daily_revenue?view=partitions&partition={day}")
            page.see(f"{_partition_heading(day)}[.//*[starts-with(normalize-space(), 'Unsynced')]]")
    other = next(day for day in ("2025-01-20", "2025-01-21") if day not in days)
    with ui.step(f"3c-unchanged-day-{other}-fresh"):
        ui.open(f"/assets/daily_revenue?view=partitions&partition={other}")
        heading = page.see(f"{_partition_heading(other)}[.//*[normalize-space()='Materialized']]")
        # The partition's details have loaded: the first load's ranged run wrote two events for it
        # (the output's, then strata's with the day's content version; docs/dagster.md).
        page.see_text("View all historical events (2)")
        assert "Unsynced" not in heading.text and "Unsynced" not in page.body_text()
    said = f"2 stale partition(s) of daily_revenue (stg_orders has new rows in them): {days[0]}, {days[1]}"
    with ui.step("3d-stale-days-shown-without-the-sensor"):
        # The sensor is off: the observation and the rebuild re-evaluated the check users see.
        ui.open("/assets/daily_revenue?view=checks")
        page.see(f"//*[normalize-space()='{STALE_CHECK}']/following::*[normalize-space()='Failed'][1]")
        page.click(f"//*[normalize-space()='{STALE_CHECK}']")
        page.until(lambda p: said in p.body_text(), f"the check to say `{said}`")
    with ui.step("3e-the-check-executed-alone-does-not-pass"):
        # The false pass: executed on its own, it still says what `strata plan --only-stale` says.
        before = {run["runId"] for run in ui.graphql.runs()}
        page.click_button("Execute")
        run = wait_for(lambda: _new_run(ui, before), 120, "the check's run", ui.log, interval=1)
        assert set(wait_runs(ui, [run], "the check's run").values()) == {"SUCCESS"}
        ui.open("/assets/daily_revenue?view=checks")
        page.click(f"//*[normalize-space()='{STALE_CHECK}']")
        page.until(lambda p: said in p.body_text(), f"the check to say `{said}`")
        assert "no stale partition" not in page.body_text()


def test_4_the_command_line_then_the_ui_shows_what_the_plan_says(ui):
    """`strata run` from the command line (DAGSTER_HOME is the UI's instance), then the sources
    observed: nothing is stale, as `strata plan --only-stale` says (but the Python model, which
    only Dagster builds), and the stale partitions' check passes; no source reads "Never
    observed"."""
    page = ui.page
    project = ui.warehouse.parent
    env = {**os.environ, "DAGSTER_HOME": str(ui.home), "DAGSTER_DISABLE_TELEMETRY": "1"}
    strata = Path(sys.executable).with_name("strata")
    done = subprocess.run(
        [str(strata), "run", str(project), "--warehouse", str(ui.warehouse)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0 and "reported to Dagster" in done.stdout, done.stdout + done.stderr
    plan = subprocess.run(
        [str(strata), "plan", str(project), "--warehouse", str(ui.warehouse), "--only-stale", "--json"],
        env=env,
        capture_output=True,
        text=True,
    )
    planned = json.loads(plan.stdout)["models"]
    assert [m["model"] for m in planned if m["path"] != "reused" or m["publishes_again"]] == [], plan.stdout
    # The Python model is Dagster's to build (the command line builds SQL models only), and it
    # reads a model the command line rebuilt.
    assert ui.graphql.stale() == {"region_summary"}
    run = ui.graphql.launch(["region_summary"])
    assert set(wait_runs(ui, [run], "the Python model").values()) == {"SUCCESS"}
    assert ui.graphql.stale() == set()
    run = ui.graphql.launch(["orders", "customers"])  # the first Observe after the command line
    assert set(wait_runs(ui, [run], "the observation").values()) == {"SUCCESS"}
    assert ui.graphql.stale() == set()
    with ui.step("4a-catalog-nothing-unsynced"):
        ui.open("/assets")
        page.see_text("stg_orders")
        text = page.body_text()
        assert "Never observed" not in text and "Upstream data" not in text and "Unsynced" not in text
    with ui.step("4b-stale-check-passes"):
        ui.open("/assets/daily_revenue?view=checks")
        page.see(f"//*[normalize-space()='{STALE_CHECK}']/following::*[normalize-space()='Succeeded'][1]")


def _new_run(ui: Journey, before: set[str]) -> str | None:
    return next((run["runId"] for run in ui.graphql.runs() if run["runId"] not in before), None)


def _partition_heading(day: str) -> str:
    """The selected partition's heading in the partitions view: its key, status and staleness tags."""
    return f"//div[@data-tooltip='{day}']"
