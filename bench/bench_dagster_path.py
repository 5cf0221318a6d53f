"""The Dagster path against the CLI, under `dagster dev` (webserver and daemon on 127.0.0.1, the
repository's dagster.yaml), driven through GraphQL as the UI does it, each path on a fresh instance
and a fresh copy of the same warehouse:

- `strata run` (the CLI, process included): the floor;
- Dagster's fixed launch cost: a run of one trivial asset in another code location, launch to
  success, measured on the instance's second run (its first, printed beside it, also pays the
  instance's first start); on Dagster's default executor, which runs each step in a process
  of its own, and on the example's in-process executor (a third code location);
- the first load as `strata_materialize_all` (one run; its waves run inside it), launch to every
  run finished, then every asset and partition checked fresh;
- a backfill of 3 daily partitions as `strata_backfill_range` (one run);
- the same 3 days from the partition dialog (a Dagster backfill): launch to its run's end (the
  partitions fresh) and to the backfill's end, and when the daemon created the run;
- the first load as *Materialize all* in the asset graph (a Dagster backfill of every asset and
  partition, after an observation of the sources), with the daemon's wait before each level;
- the same click's fixed cost: *Materialize all* of do-nothing assets of the example's shape (one
  unpartitioned, one daily over as many days with a single-run backfill policy, one monthly over
  it; in-process), on the same instance: the three runs Dagster makes of it, their starts and
  its per-partition events, with no work in them.

Prints each figure, the ratios to the targets (first load <= 2 x strata run + fixed cost, with each
of the fixed costs above; 3-day backfill < 15 s) and the load average.

    PYTHONPATH=. .venv/bin/python bench/bench_dagster_path.py [--rows 100000] [--days 365] [--repeat 1] [--mirror]

`--repeat N` runs the last two (the do-nothing click, then the example's *Materialize all*) N times,
each on a fresh instance and warehouse, and prints their ratios' median: one round moves by as
much as the daemons' timing (when the backfill daemon's iterations fall); `--repeat 0` skips
them. `--mirror` adds, before the example's, *Materialize all* of the example's whole graph with
nothing to do (`mirror_module`: a do-nothing twin of each asset and check op, and the companion's
per-day observations): what Dagster itself takes for that click on that graph.

See bench/README.md and docs/dagster.md ("What a run costs").
"""

from __future__ import annotations

import argparse
import functools
import os
import runpy
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dagster as dg

from strata_dagster.backends.duckdb.sample_data import write_sample_data
from strata_dagster_tests.support.dagster_support import DONE, REPO, SHOP, GraphQL, dagster_dev, wait_for

print = functools.partial(print, flush=True)  # noqa: A001 (progress shows while it runs)
FINAL = ("COMPLETED", "COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED", "CANCELED")
REASON = {"strata/reason": "first load (bench)"}
TRIVIAL = """
import dagster as dg


@dg.asset
def trivial() -> None:
    return None


defs = dg.Definitions(assets=[trivial])
"""
# The example's shape with nothing to do, on the example's executor (in-process): what Dagster itself
# costs for the same *Materialize all* (its runs, their starts, its per-partition events).
SHAPE = """
import datetime as dt

import dagster as dg

START = dt.date(2025, 1, 1)
LAST = START + dt.timedelta(days={days} - 1)
DAILY = dg.DailyPartitionsDefinition(
    start_date=START.isoformat(), end_date=(LAST + dt.timedelta(days=1)).isoformat()
)
MONTHLY = dg.MonthlyPartitionsDefinition(
    start_date=START.isoformat(),
    end_date=dt.date(LAST.year + LAST.month // 12, LAST.month % 12 + 1, 1).isoformat(),
)
SINGLE_RUN = dg.BackfillPolicy.single_run()
DAYS_OF_MONTH = dg.TimeWindowPartitionMapping(allow_nonexistent_upstream_partitions=True)


@dg.asset
def shape_unpartitioned() -> None:
    return None


@dg.asset(deps=[shape_unpartitioned], partitions_def=DAILY, backfill_policy=SINGLE_RUN)
def shape_daily() -> None:
    return None


@dg.asset(
    deps=[dg.AssetDep(shape_daily, partition_mapping=DAYS_OF_MONTH)],
    partitions_def=MONTHLY,
    backfill_policy=SINGLE_RUN,
)
def shape_monthly() -> None:
    return None


defs = dg.Definitions(
    assets=[shape_unpartitioned, shape_daily, shape_monthly], executor=dg.in_process_executor
)
"""

# The example's whole graph with nothing to do (`--mirror`), written out by `mirror_module` from the
# example's definitions: a twin of every asset with the same deps, partitions, partition mappings,
# backfill policy, pool and executor; a twin of each check op with the same checks (each passes at
# once); the companion's per-day observations logged by the twin of `stg_orders`, as strata's
# models' step logs them. No strata in it: what Dagster itself takes for this click on this graph (its
# runs, steps, per-partition events and check results).
MIRROR_HEAD = """
import dagster as dg


def observed(context, key, days):
    for day in days:
        context.log_event(dg.AssetObservation(asset_key=key, partition=day))


def passing(context):
    for key in context.selected_asset_check_keys:
        yield dg.AssetCheckResult(asset_key=key.asset_key, check_name=key.name, passed=True)
"""


def mirror_module(
    project: Path, *, prefix: str = "mirror_", head: str = MIRROR_HEAD, observable_sources: bool = False
) -> str:
    """The source of a code location mirroring the example's graph with do-nothing twins, each
    named `prefix` + the example's name; `head` defines `observed` and `passing`. With
    `observable_sources`, the example's unpartitioned observable sources are observable twins
    (a constant data version), else external assets."""
    # The example's own definitions.py (its Python model too), over the copy's warehouse.
    graph = runpy.run_path(str(project / "definitions.py"))["defs"].resolve_asset_graph()

    def twin(key: dg.AssetKey) -> str:
        return prefix + "_".join(key.path)

    def partitions(definition: dg.PartitionsDefinition | None) -> str:
        if definition is None:
            return "None"
        kind = type(definition).__name__
        assert kind in ("DailyPartitionsDefinition", "MonthlyPartitionsDefinition"), kind
        end = "None" if definition.end is None else repr(definition.end.strftime("%Y-%m-%d"))
        return f"dg.{kind}(start_date={definition.start.strftime('%Y-%m-%d')!r}, end_date={end})"

    def dep(key: dg.AssetKey, parent: dg.AssetKey) -> str:
        found = graph.get_partition_mapping(key, parent)
        if not isinstance(found, dg.TimeWindowPartitionMapping):
            return f"dg.AssetDep({twin(parent)!r})"  # Dagster's default mapping, as the example's
        allowed = found.allow_nonexistent_upstream_partitions
        return (
            f"dg.AssetDep({twin(parent)!r}, partition_mapping="
            f"dg.TimeWindowPartitionMapping(allow_nonexistent_upstream_partitions={allowed}))"
        )

    companions = {
        parent: key
        for key in graph.get_all_asset_keys()
        if graph.get(key).is_observable and graph.get(key).partitions_def is not None
        for parent in graph.get(key).parent_keys
    }
    lines = [head]
    names = []
    for key in sorted(graph.get_all_asset_keys(), key=str):
        node = graph.get(key)
        if observable_sources and node.is_observable and node.partitions_def is None:
            lines.append(
                f"@dg.observable_source_asset(name={twin(key)!r}, pool='duckdb')\n"
                f"def {twin(key)}() -> dg.DataVersion:\n    return dg.DataVersion('unchanged')\n"
            )
            names.append(twin(key))
            continue
        if not node.is_materializable:
            lines.append(
                f"{twin(key)} = dg.AssetSpec({twin(key)!r}, partitions_def={partitions(node.partitions_def)})"
            )
            names.append(twin(key))
            continue
        deps = ", ".join(dep(key, parent) for parent in node.parent_keys)
        policy = "dg.BackfillPolicy.single_run()" if node.backfill_policy is not None else "None"
        companion = companions.get(key)
        body = "return None"
        if companion is not None:
            days = graph.get(companion).partitions_def.get_partition_keys()
            body = f"observed(context, dg.AssetKey({twin(companion)!r}), {days!r})"
        lines.append(
            f"@dg.asset(key={twin(key)!r}, deps=[{deps}], partitions_def={partitions(node.partitions_def)}, "
            f"backfill_policy={policy}, pool='duckdb')\ndef {twin(key)}(context) -> None:\n    {body}\n"
        )
        names.append(twin(key))
    checks = []
    for assets_def in graph.assets_defs:
        if assets_def.keys or not list(assets_def.check_specs):
            continue
        specs = ", ".join(
            f"dg.AssetCheckSpec({spec.name!r}, asset={twin(spec.asset_key)!r})"
            for spec in assets_def.check_specs
        )
        name = prefix + assets_def.node_def.name
        lines.append(
            f"@dg.multi_asset_check(name={name!r}, specs=[{specs}], can_subset=True, pool='duckdb')\n"
            f"def {name}(context):\n    yield from passing(context)\n"
        )
        checks.append(name)
    lines.append(
        f"defs = dg.Definitions(assets=[{', '.join(names)}], asset_checks=[{', '.join(checks)}], "
        "executor=dg.in_process_executor)"
    )
    return "\n".join(lines) + "\n"


def load() -> str:
    return "load average " + " ".join(f"{value:.2f}" for value in os.getloadavg())


def workspace(root: Path, warehouse: Path, days: int) -> Path:
    """The example over a copy of `warehouse`, a trivial code location beside it, and a
    DAGSTER_HOME with the repository's dagster.yaml; returns the home."""
    project = root / "shop"
    shutil.copytree(SHOP, project, ignore=shutil.ignore_patterns("*.duckdb*", "__pycache__"))
    shutil.copy(warehouse, project / "warehouse.duckdb")
    (root / "trivial.py").write_text(TRIVIAL)
    (root / "shape.py").write_text(SHAPE.replace("{days}", str(days)))
    (root / "mirror.py").write_text(mirror_module(project))
    (root / "workspace.yaml").write_text(
        "load_from:\n"
        "  - python_file:\n      relative_path: shop/definitions.py\n      location_name: shop\n"
        "  - python_file:\n      relative_path: trivial.py\n      location_name: trivial\n"
        "  - python_file:\n      relative_path: shape.py\n      location_name: shape\n"
        "  - python_file:\n      relative_path: mirror.py\n      location_name: mirror\n"
    )
    home = root / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    return home


def strata_run(project: Path, warehouse: Path) -> float:
    """Wall time of the CLI's `strata run` on a copy of the warehouse (process start included)."""
    copy = warehouse.with_name("cli.duckdb")
    shutil.copy(warehouse, copy)
    strata = Path(sys.executable).parent / "strata"
    begin = time.perf_counter()
    subprocess.run(
        [str(strata), "run", str(project), "--warehouse", str(copy)], check=True, capture_output=True
    )
    return time.perf_counter() - begin


def trivial_run(graphql: GraphQL, log: Path, name: str = "trivial", location: str = "trivial") -> float:
    begin = time.perf_counter()
    until_runs_done(graphql, log, [graphql.launch([name], location=location)])
    return time.perf_counter() - begin


def until_runs_done(graphql: GraphQL, log: Path, run_ids: list[str] | None = None) -> float:
    """Seconds until the runs (every run of the instance when None) have finished, all successful."""
    begin = time.perf_counter()

    def done() -> bool:
        runs = graphql.runs()
        wanted = [run for run in runs if run_ids is None or run["runId"] in run_ids]
        return bool(wanted) and all(run["status"] in DONE for run in wanted)

    wait_for(done, 1800, "the runs to finish", log, interval=0.25)
    failed = [run for run in graphql.runs() if run["status"] != "SUCCESS"]
    assert not failed, failed
    return time.perf_counter() - begin


def backfill_all(graphql: GraphQL, tags: dict[str, str], *, twins: str = "") -> str:
    """*Materialize all* with partitioned assets in the selection: a backfill of every partition,
    of the example's assets, or of the do-nothing twins whose names start with `twins` (`shape_`:
    the example's shape; `mirror_`: its whole graph)."""
    nodes = graphql("{ assetNodes { assetKey { path } isObservable isExecutable } }")["assetNodes"]

    def is_wanted(name: str) -> bool:
        is_twin = name.startswith(("shape_", "mirror_"))
        return name.startswith(twins) if twins else not is_twin and name != "trivial"

    keys = [
        node["assetKey"]
        for node in nodes
        if node["isExecutable"] and not node["isObservable"] and is_wanted(node["assetKey"]["path"][0])
    ]
    data = graphql(
        "mutation($p: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $p) { "
        "__typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }",
        p={
            "assetSelection": keys,
            "allPartitions": True,
            "tags": [{"key": key, "value": value} for key, value in tags.items()],
        },
    )["launchPartitionBackfill"]
    assert data["__typename"] == "LaunchBackfillSuccess", data
    return data["backfillId"]


def until_backfill_done(graphql: GraphQL, backfill_id: str, log: Path, launched: float) -> float:
    """Seconds from `launched` (epoch) to the backfill's end; prints when each of its runs was
    created (the daemon's iteration), started and ended, and when the last run ended (fresh)."""

    def done() -> bool:
        found = graphql.backfill(backfill_id)
        return found["status"] in FINAL and all(run["status"] in DONE for run in found["runs"])

    wait_for(done, 1800, "the backfill to finish", log, interval=0.25)
    ended = time.time() - launched
    found = graphql.backfill(backfill_id)
    if found["status"] != "COMPLETED_SUCCESS":
        for run in found["runs"]:
            if run["status"] != "SUCCESS":
                messages = [event.get("message") for event in graphql.run_events(run["runId"])]
                print(run["runId"], run["status"], run["tags"], *messages[-8:], sep="\n  ")
        raise SystemExit(f"the backfill ended {found['status']}")
    times = graphql.run_times()
    runs = sorted((times[run["runId"]] for run in found["runs"]), key=lambda run: run["creationTime"])
    for run in runs:
        print(
            f"    run {run['jobName']:<36} created +{run['creationTime'] - launched:5.1f}s  "
            f"started +{run['startTime'] - launched:5.1f}s  ended +{run['endTime'] - launched:5.1f}s"
        )
    fresh = max(run["endTime"] for run in runs) - launched
    print(f"    last run ended (everything fresh) +{fresh:.1f}s; backfill marked done +{ended:.1f}s")
    return fresh


def job_run(graphql: GraphQL, log: Path, job: str, tags: dict[str, str], config: dict | None = None) -> float:
    """Seconds from launching `job` to its run and every run it launched being done."""
    begin = time.perf_counter()
    run_id = graphql.launch_job(job, tags, config)
    until_runs_done(graphql, log, [run_id])
    seconds = time.perf_counter() - begin
    inner = [run for run in graphql.run_times().values() if run["tags"].get("strata/launched_by") == run_id]
    assert all(run["status"] == "SUCCESS" for run in inner), inner
    for run in sorted(inner, key=lambda run: run["startTime"]):
        print(f"    wave {run['jobName']:<36} {run['endTime'] - run['startTime']:5.1f}s")
    return seconds


def day_keys(graphql: GraphQL, count: int) -> list[str]:
    nodes = graphql(
        '{ assetNodes(assetKeys: [{path: ["daily_revenue"]}]) { partitionKeysByDimension { partitionKeys } } }'
    )
    return nodes["assetNodes"][0]["partitionKeysByDimension"][0]["partitionKeys"][:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument(
        "--repeat", type=int, default=1, help="rounds of the two Materialize all, each on a fresh instance"
    )
    parser.add_argument(
        "--mirror",
        action="store_true",
        help="also Materialize all of the example's whole graph with nothing to do, before the example's",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        sample = root / "sample.duckdb"
        write_sample_data(sample, args.rows, days=args.days)
        print(load())
        cli = strata_run(SHOP, sample)
        print(f"strata run (CLI, process included): {cli:.1f}s")

        one = root / "one_run"
        one.mkdir()
        with dagster_dev(one, workspace(one, sample, args.days)) as (graphql, log):
            # The instance's first run pays its first start: the second one is the fixed cost.
            fixed_first, fixed = (trivial_run(graphql, log) for _ in range(2))
            print(
                f"fixed cost, a run of one trivial asset (launch to success): {fixed:.1f}s "
                f"(the instance's first run: {fixed_first:.1f}s); {load()}"
            )
            in_process = trivial_run(graphql, log, "shape_unpartitioned", "shape")
            print(f"  the same on the example's executor (in-process, no step subprocess): {in_process:.1f}s")
            target = 2 * cli + fixed
            first = job_run(graphql, log, "strata_materialize_all", {})
            print(
                f"first load, strata_materialize_all (launch to every run done): {first:.1f}s; "
                f"ratio to the target 2 x strata run + fixed cost ({target:.1f}s): {first / target:.2f}; "
                f"with the in-process run's fixed cost ({2 * cli + in_process:.1f}s): "
                f"{first / (2 * cli + in_process):.2f}; {load()}"
            )
            stale = graphql.stale()
            assert not stale, f"stale after strata_materialize_all: {sorted(stale)[:10]}"
            print("  every asset and partition fresh")
            days = day_keys(graphql, 3)
            config = {
                "ops": {
                    "backfill_range": {
                        "config": {"assets": ["daily_revenue"], "first": days[0], "last": days[-1]}
                    }
                }
            }
            seconds = job_run(
                graphql, log, "strata_backfill_range", {"strata/reason": "bench: 3 days"}, config
            )
            print(
                f"backfill of 3 daily partitions, strata_backfill_range: {seconds:.1f}s (target 15 s); {load()}"
            )
            launched = time.time()
            dialog = graphql.launch_backfill(
                "daily_revenue", days, {"strata/reason": "bench: 3 days, dialog"}
            )
            fresh = until_backfill_done(graphql, dialog, log, launched)
            print(
                f"backfill of 3 daily partitions, partition dialog: {fresh:.1f}s to fresh (target 15 s); {load()}"
            )

        ratios = []
        for round_ in range(1, args.repeat + 1):
            ratios.append(
                materialize_all_round(root, sample, args.days, cli, target, round_, mirror=args.mirror)
            )
        if args.repeat > 1:
            print(
                f"Materialize all against 2 x strata run + the same click's fixed cost, {args.repeat} "
                f"rounds: {', '.join(f'{ratio:.2f}' for ratio in ratios)} (median "
                f"{statistics.median(ratios):.2f}; met in {sum(ratio <= 1 for ratio in ratios)})"
            )


def materialize_all_round(
    root: Path, sample: Path, days: int, cli: float, target: float, round_: int, *, mirror: bool = False
) -> float:
    """The same click on do-nothing assets, then *Materialize all* of the example, on a fresh
    instance and warehouse; prints both and returns the example's ratio to 2 x `strata run` + the
    do-nothing click."""
    backfill = root / f"backfill_{round_}"
    backfill.mkdir()
    with dagster_dev(backfill, workspace(backfill, sample, days)) as (graphql, log):
        trivial_run(graphql, log)  # the instance's first run, as in the one-run instance
        launched = time.time()
        shaped = until_backfill_done(graphql, backfill_all(graphql, {}, twins="shape_"), log, launched)
        shaped_target = 2 * cli + shaped
        print(
            f"fixed cost of the same click: Materialize all of trivial assets of the example's shape "
            f"(unpartitioned, {days} days, their months; in-process): {shaped:.1f}s to fresh; {load()}"
        )
        mirrored = None
        if mirror:
            launched = time.time()
            twins = backfill_all(graphql, {}, twins="mirror_")
            mirrored = until_backfill_done(graphql, twins, log, launched)
            print(
                f"the same click on the example's whole graph with nothing to do (its assets, checks and "
                f"per-partition events): {mirrored:.1f}s to fresh; {load()}"
            )
        begin = time.perf_counter()
        until_runs_done(
            graphql,
            log,
            [graphql.launch(["orders", "customers"], "strata_observe_sources", location="shop")],
        )
        print(f"observe sources: {time.perf_counter() - begin:.1f}s")
        launched = time.time()
        fresh = until_backfill_done(graphql, backfill_all(graphql, REASON), log, launched)
        print(
            f"first load, Materialize all (a Dagster backfill): {fresh:.1f}s to fresh; ratio to the "
            f"target ({target:.1f}s): {fresh / target:.2f}; to 2 x strata run + the same click's fixed "
            f"cost ({shaped_target:.1f}s): {fresh / shaped_target:.2f}; {load()}"
        )
        if mirrored is not None:
            print(
                f"  to 2 x strata run + the whole graph's do-nothing click ({2 * cli + mirrored:.1f}s): "
                f"{fresh / (2 * cli + mirrored):.2f}"
            )
    return fresh / shaped_target


if __name__ == "__main__":
    main()
