"""Asset checks on a business-versioned source's asset.

`strata_source_ledger`: the deep check (`strata verify --sources`). It re-hashes every consumed
partition, so it runs in the `strata_verify` job (and its schedule) or alone, never with
materializations.

`strata_partition_assumptions`: the check every run makes, from the listing and the ledger (no
row read): no consumed partition changed or disappeared (E052), no new partition arrived at or
before the last consumed one (E053). The stale sensor reports it in its tick whenever its result
changes, and launches nothing from a source that fails it under `on_violation: error`."""

from collections.abc import Iterator, Mapping
from typing import Final

import dagster as dg

from strata_dagster.engine.reads.arrivals import SourceArrivals, peek_arrivals
from strata_dagster.engine.sources.source_verify import verify_sources
from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.failures import fails_cleanly
from strata_dagster.orchestration.naming import ProjectNames
from strata_dagster.orchestration.resources.strata import StrataResource

LEDGER_CHECK: Final = "strata_source_ledger"
ASSUMPTIONS_CHECK: Final = "strata_partition_assumptions"
ASSUMPTIONS_DESCRIPTION = (
    "No consumed partition changed or disappeared (E052) and no partition arrived at or before the "
    "last consumed one (E053), from the listing and the ledger."
)


def assumption_result(arrivals: SourceArrivals) -> dict[str, object]:
    """passed, severity, description and metadata of a source's `strata_partition_assumptions`."""
    metadata: dict[str, object] = {
        c.SOURCE_KEY: arrivals.source,
        "last_partition": arrivals.last_partition or "",
        "new_partitions": list(arrivals.new),
        "waiting_partitions": list(arrivals.deferred),
    }
    if not arrivals.violations:
        return {
            "passed": True,
            "severity": dg.AssetCheckSeverity.ERROR,
            "description": f"assumptions hold: {arrivals.describe()}",
            "metadata": metadata,
        }
    first = arrivals.violations[0]
    metadata["code"] = first.code
    metadata["partitions"] = [violation.partition for violation in arrivals.violations]
    outcome = (
        "runs fail with it until it is fixed or rebuilt with `--full-refresh`"
        if arrivals.is_blocked
        else "the next run rebuilds (`on_violation: rebuild`)"
    )
    return {
        "passed": False,
        "severity": dg.AssetCheckSeverity.ERROR,
        "description": f"{first.code}: {first.what} ({len(arrivals.violations)} violation(s); {outcome})",
        "metadata": metadata,
    }


def assumption_evaluation(key: dg.AssetKey, arrivals: SourceArrivals) -> dg.AssetCheckEvaluation:
    """The check's evaluation, as the stale sensor reports it (no run)."""
    fields = assumption_result(arrivals)
    return dg.AssetCheckEvaluation(asset_key=key, check_name=ASSUMPTIONS_CHECK, **fields)  # type: ignore[arg-type]  # the result's fields, as a dict


def source_assumption_checks(
    sources: Mapping[dg.AssetKey, str], names: ProjectNames
) -> dg.AssetChecksDefinition:
    """`strata_partition_assumptions` of each business-versioned source (asset key -> source), in
    one op, read-only."""
    specs = [
        dg.AssetCheckSpec(
            ASSUMPTIONS_CHECK, asset=key, description=ASSUMPTIONS_DESCRIPTION, metadata={c.SOURCE_KEY: name}
        )
        for key, name in sources.items()
    ]

    @dg.multi_asset_check(
        name=names.assumptions_op,
        specs=specs,
        can_subset=True,
        required_resource_keys={names.resource_key},
        pool=c.DUCKDB_POOL,
        description="Business-versioned sources' listings against their partition ledgers (no row read).",
    )
    @fails_cleanly
    def _assumptions(context: dg.AssetCheckExecutionContext) -> Iterator[dg.AssetCheckResult]:
        strata: StrataResource = getattr(context.resources, names.resource_key)
        selected = sorted(context.selected_asset_check_keys, key=lambda key: key.to_user_string())
        wanted = [sources[key.asset_key] for key in selected]
        found = peek_arrivals(strata.project_path, strata.warehouse_path, wanted, branch=strata.branch)
        for key in selected:
            fields = assumption_result(found[sources[key.asset_key]])
            yield dg.AssetCheckResult(asset_key=key.asset_key, check_name=key.name, **fields)  # type: ignore[arg-type]  # the result's fields, as a dict

    return _assumptions


def source_ledger_checks(sources: Mapping[dg.AssetKey, str], names: ProjectNames) -> dg.AssetChecksDefinition:
    """One check per business-versioned source (asset key -> source name), in one op."""
    specs = [
        dg.AssetCheckSpec(
            LEDGER_CHECK,
            asset=key,
            description="Every consumed partition still hashes as the ledger recorded when it was consumed.",
            metadata={c.SOURCE_KEY: name},
        )
        for key, name in sources.items()
    ]

    @dg.multi_asset_check(
        name=names.ledgers_op,
        specs=specs,
        can_subset=True,
        required_resource_keys={names.resource_key},
        pool=c.DUCKDB_POOL,
        description="Business-versioned sources re-hashed against their partition ledgers.",
    )
    @fails_cleanly
    def _ledgers(context: dg.AssetCheckExecutionContext) -> Iterator[dg.AssetCheckResult]:
        strata: StrataResource = getattr(context.resources, names.resource_key)
        selected = sorted(context.selected_asset_check_keys, key=lambda key: key.to_user_string())
        wanted = [sources[key.asset_key] for key in selected]
        found = {
            check.source: check
            for check in verify_sources(strata.project_path, strata.warehouse_path, wanted)
        }
        for key in selected:
            check = found.get(sources[key.asset_key])
            if check is None or not check.partitions:
                yield dg.AssetCheckResult(
                    asset_key=key.asset_key,
                    check_name=key.name,
                    passed=True,
                    description="no partition consumed yet",
                )
                continue
            bad = check.mismatched
            yield dg.AssetCheckResult(
                asset_key=key.asset_key,
                check_name=key.name,
                passed=not bad,
                description=(
                    f"{len(check.partitions):,} consumed partition(s) equal to the ledger"
                    if not bad
                    else f"{len(bad)} consumed partition(s) differ from the ledger (E054): "
                    + ", ".join(part.partition for part in bad[:10])
                ),
                metadata={"partitions": len(check.partitions), "differing": [part.partition for part in bad]},
            )

    return _ledgers
