"""Segments benchmark: what a run costs against the number of segments its states hold.

    PYTHONPATH=.:bench .venv/bin/python bench/bench_segments.py [--rows 2000000] [--runs 12]
        [--changed 1000 | --percent 1] [--trace 8] [--base DIR]

The shop example at N orders, one first build, then `--runs` incremental runs, each after the same
size of change: `--changed` orders spread over the whole table move on and 100 new orders arrive
(bench_shop's `change_orders`), or, with `--percent`, that share of the orders (every 100th id per
percent, a different residue each run) gets a new amount, stamped an hour after the last change
(past the shop's 10-minute `lateness`; `--seconds`: one second after, as bench_serving does, so
that every run re-reads every earlier change). `BENCH_MAX_SEGMENTS=N` (environment): an experiment
with compaction at another count. Per run: the
wall and CPU seconds, the seconds of each model that did not reuse its state (as history records
them), how many segments `stg_orders` and the models following it hold, and the load average.

`--trace N`: the N slowest statements of each run, each with its model and kind (the statement's
first words): what grows; `--dump DIR`: every statement of each run, timed, to DIR/SIDE/run-NN.sql. Statements are timed where the warehouse runs its sqlglot trees
(`backends.sql.runner.run` as imported by each module); the few `con.execute` text statements
are not.

`--gc-keep K`: after the runs, what the warehouse holds on disk (the DuckDB file, the snapshot files,
the serving copy) before and after `strata gc --keep K`, then after `--compact` too, each against
what it held after the first build (`STRATA_SERVING_GRACE=0`: no reader holds a retired serving
catalog, so gc frees what they read at once); and the last runs against the first (median of five each).

`--base DIR`: a second project state to alternate with, e.g. main exported to /tmp/strata-main:
each run then goes first on one side and second on the other, every other round, each side on its
own warehouse (the same changes), in one process per side (`--side` is the internal flag).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


# -- one side: a shop warehouse and its runs, driven over stdin/stdout -------------------------------
class Tracer:
    def __init__(self) -> None:
        self.statements: list[tuple[float, str]] = []
        self.active = False

    def install(self) -> None:
        try:
            from strata_dagster.backends.sql.runner import run as original
            from strata_dagster.sql.render import render
        except ImportError:  # a tree from before the backends package (`--base`)
            from strata_dagster.backends.duckdb.sql import run as original
            from strata_dagster.sql.render import render

        def run(con, statement, params=None, **options):  # type: ignore[no-untyped-def]  # stands in for run's own signature
            if not self.active:
                return original(con, statement, params, **options)
            text = render(statement)
            started = time.perf_counter()
            try:
                return original(con, statement, params, **options)
            finally:
                self.statements.append((time.perf_counter() - started, text))

        for module in list(sys.modules.values()):
            name = getattr(module, "__name__", "")
            if name.startswith("strata_dagster.") and getattr(module, "run", None) is original:
                module.run = run  # type: ignore[attr-defined]  # a module that imported run


MODEL_OF = re.compile(r'"?snap_[0-9a-f]+_([a-z_]+?)(?:__[a-z_]+)?"?(?:\W|$)')


def describe_statement(text: str) -> tuple[str, str]:
    models = MODEL_OF.findall(text)
    model = max(set(models), key=models.count) if models else "-"
    kind = " ".join(text.split()[:3])[:40]
    return model, kind


def storage(warehouse: Path) -> dict[str, int]:
    """Bytes on disk: the DuckDB file (sources included) and each folder the engine keeps beside it."""
    parts = {"file": warehouse.stat().st_size}
    for suffix in ("snapshots", "serving"):
        folder = warehouse.with_name(f"{warehouse.name}.{suffix}")
        parts[suffix] = sum(item.stat().st_size for item in folder.rglob("*") if item.is_file())
    return parts


def side(rows: int, folder: Path, trace: int, dump: Path | None) -> None:
    """Serve commands from the parent: `build`, `change <spec>`, `run`, `quit`."""
    import duckdb
    from bench_shop import change_orders

    from strata_dagster.compile.relations import DEFAULT_BRANCH
    from strata_dagster.engine.run import run_project
    from strata_dagster.state.history import HistoryReader
    from strata_dagster_tests.support.engine_support import ADVANCE_UPDATED_AT, execute, make_shop

    if os.environ.get("BENCH_MAX_SEGMENTS"):  # an experiment: compaction at another count
        import strata_dagster.engine.builds.incremental as incremental

        try:
            from strata_dagster.engine.builds import segment_compaction as rule
        except ImportError:  # an engine before the rule had its module
            rule = incremental
        rule.MAX_SEGMENTS = int(os.environ["BENCH_MAX_SEGMENTS"])
    tracer = Tracer()
    project, warehouse = make_shop(folder, rows=rows)
    tracer.install()
    for line in sys.stdin:
        command, *args = line.split()
        reply: dict = {}
        if command == "build":
            started = time.perf_counter()
            run_project(project, warehouse)
            reply = {"wall": time.perf_counter() - started}
        elif command == "change":
            kind, size, round_ = args[0], int(args[1]), int(args[2])
            if kind == "orders":
                change_orders(warehouse, size, 100)
            else:
                residues = ", ".join(str((round_ * size + offset) % 100) for offset in range(size))
                # Stamped an hour after the last change: past the shop's `lateness` (10 minutes), so
                # the window holds this change alone. (bench_serving stamps each change one second
                # after the last: every run re-reads every earlier change, a delta growing by 1% a run.)
                stamp = (
                    ADVANCE_UPDATED_AT if kind == "seconds" else ADVANCE_UPDATED_AT.replace("SECOND", "HOUR")
                )
                execute(
                    warehouse,
                    f"UPDATE raw.orders SET amount = amount + 1, {stamp} WHERE order_id % 100 IN ({residues})",
                )
        elif command == "run":
            tracer.statements.clear()
            tracer.active = trace > 0 or dump is not None
            started, cpu = time.perf_counter(), time.process_time()
            result = run_project(project, warehouse, only_stale=True)
            wall, cpu = time.perf_counter() - started, time.process_time() - cpu
            tracer.active = False
            con = duckdb.connect(str(warehouse), read_only=True)
            try:
                pointers = HistoryReader(con).pointers(DEFAULT_BRANCH)
            finally:
                con.close()
            models = {
                o.model: [o.path, o.duration_ms / 1000, len(pointers.get(o.model) or ())]
                for o in result.outcomes
                if o.path != "reused"
            }
            slowest = sorted(tracer.statements, reverse=True)[:trace]
            if dump is not None:
                runs = len(list(dump.glob("run-*.sql"))) + 1
                with open(dump / f"run-{runs:02}.sql", "w") as out:
                    for seconds, text in tracer.statements:
                        out.write(f"-- {seconds * 1000:.1f} ms\n{text};\n")
            reply = {
                "wall": wall,
                "cpu": cpu,
                "models": models,
                "statements": [[seconds, *describe_statement(text)] for seconds, text in slowest],
                "traced": sum(seconds for seconds, _ in tracer.statements),
            }
        elif command == "storage":
            reply = storage(warehouse)
        elif command == "gc":
            from strata_dagster.engine.commands.gc import gc

            # No reader holds a retired serving catalog here: no grace keeps their files.
            os.environ["STRATA_SERVING_GRACE"] = "0"
            result = gc(warehouse, keep=int(args[0]), compact_file=args[1] == "compact")
            reply = {"dropped": len(result.dropped)}
        elif command == "quit":
            return
        print(json.dumps(reply), flush=True)


# -- the parent: one or two sides, alternated ----------------------------------------------------
class Side:
    def __init__(self, label: str, path: Path, options: argparse.Namespace, folder: Path) -> None:
        self.label = label
        env = {**os.environ, "PYTHONPATH": f"{path}:{path / 'bench'}:{ROOT / 'bench'}"}
        folder.mkdir()
        if options.dump:
            (options.dump / label).mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "bench" / "bench_segments.py"),
                "--side",
                "--rows",
                str(options.rows),
                "--trace",
                str(options.trace),
                "--dir",
                str(folder),
                *(["--dump", str(options.dump / label)] if options.dump else []),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=path,
        )

    def ask(self, command: str) -> dict:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.label}: the side process ended")
        return json.loads(line)

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("quit\n")
        self.process.stdin.close()
        self.process.wait()


FOLLOWERS = ("stg_orders", "orders_enriched", "order_tags", "daily_revenue", "first_seen_orders")


def report(label: str, number: int, reply: dict) -> None:
    models = reply["models"]
    parts = []
    for name in FOLLOWERS:
        if name in models:
            path, seconds, segments = models[name]
            parts.append(f"{name} {seconds:.2f}" + (f" [{segments}]" if segments else ""))
    print(
        f"{label:>6} run {number:2}: {reply['wall']:6.2f} s wall, {reply['cpu']:5.2f} CPU"
        + (f" ({reply['traced']:.2f} in traced statements); " if reply["statements"] else "; ")
        + ", ".join(parts)
        + f"; load {load()}",
        flush=True,
    )
    for seconds, model, kind in reply["statements"]:
        print(f"{'':14}{seconds * 1000:7.1f} ms  {model:18} {kind}")


def report_storage(side: Side, keep: int, fresh: dict[str, int]) -> None:
    def line(when: str, parts: dict[str, int]) -> None:
        total, base = sum(parts.values()), sum(fresh.values())
        detail = ", ".join(f"{name} {size / 1e6:.1f}" for name, size in parts.items())
        print(
            f"{side.label:>6} {when}: {total / 1e6:.1f} MB ({detail}); {total / base:.2f}x the first build's"
        )

    line("after the first build", fresh)
    line("after the runs", side.ask("storage"))
    dropped = side.ask(f"gc {keep} plain")["dropped"]
    line(f"after gc --keep {keep} ({dropped} snapshots dropped)", side.ask("storage"))
    side.ask(f"gc {keep} compact")
    line(f"after gc --keep {keep} --compact", side.ask("storage"))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--changed", type=int, default=1000)
    parser.add_argument("--percent", type=int, default=None)
    parser.add_argument(
        "--seconds",
        action="store_true",
        help="with --percent: stamp each change 1 s after the last (bench_serving)",
    )
    parser.add_argument("--trace", type=int, default=0)
    parser.add_argument("--base", type=Path, default=None, help="a second engine to alternate with")
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument(
        "--dump", type=Path, default=None, help="write each run's statements to DIR/run-NN.sql"
    )
    parser.add_argument("--gc-keep", type=int, default=None, help="storage before/after gc --keep K")
    parser.add_argument("--side", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.side:
        side(options.rows, options.dir, options.trace, options.dump)
        return 0
    unit = "seconds" if options.seconds else "percent"
    change = f"{unit} {options.percent}" if options.percent else f"orders {options.changed}"
    print(f"{options.rows:,} orders, {options.runs} runs, change: {change}; load {load()}", flush=True)
    with tempfile.TemporaryDirectory(dir=options.dir) as temp:
        folder = Path(temp)
        sides = [Side("branch", ROOT, options, folder / "branch")]
        if options.base is not None:
            sides.insert(0, Side("base", options.base, options, folder / "base"))
        walls: dict[str, list[float]] = {s.label: [] for s in sides}
        cpus: dict[str, list[float]] = {s.label: [] for s in sides}
        fresh: dict[str, dict[str, int]] = {}
        try:
            for each in sides:
                print(
                    f"{each.label:>6} first build {each.ask('build')['wall']:.2f} s; load {load()}",
                    flush=True,
                )
                fresh[each.label] = each.ask("storage")
            for number in range(1, options.runs + 1):
                order = sides if number % 2 else sides[::-1]
                for each in order:
                    each.ask(f"change {change} {number}")
                for each in order:
                    reply = each.ask("run")
                    walls[each.label].append(reply["wall"])
                    cpus[each.label].append(reply["cpu"])
                    report(each.label, number, reply)
            if options.gc_keep is not None:
                for each in sides:
                    report_storage(each, options.gc_keep, fresh[each.label])
        finally:
            for each in sides:
                each.close()
            shutil.rmtree(folder, ignore_errors=True)
    for label, values in walls.items():
        print(
            f"{label}: runs {' '.join(f'{v:.2f}' for v in values)}; median {statistics.median(values):.2f} s, "
            f"first {values[0]:.2f}, max {max(values):.2f}"
        )
        if len(values) >= 10:
            for kind, seconds in (("wall", values), ("cpu", cpus[label])):
                first, last = statistics.median(seconds[:5]), statistics.median(seconds[-5:])
                print(
                    f"{label}: {kind}, last five / first five (medians) {last:.2f} / {first:.2f} = {last / first:.2f}x"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
