"""`strata_source_ledger`: the deep check of a business-versioned source (`strata verify
--sources`) as a Dagster asset check on the source's asset. It re-hashes every consumed partition,
so it runs in the `strata_verify` job (and its schedule) or alone, never with materializations."""

from collections.abc import Iterator, Mapping
from typing import Final

import dagster as dg

from strata_dagster.engine.source_verify import verify_sources
from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.resources import StrataResource

LEDGER_CHECK: Final = "strata_source_ledger"


def source_ledger_checks(sources: Mapping[dg.AssetKey, str]) -> dg.AssetChecksDefinition:
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
        name="strata_source_ledgers",
        specs=specs,
        can_subset=True,
        required_resource_keys={c.STRATA_RESOURCE_KEY},
        pool=c.DUCKDB_POOL,
        description="Business-versioned sources re-hashed against their partition ledgers.",
    )
    def _ledgers(context: dg.AssetCheckExecutionContext) -> Iterator[dg.AssetCheckResult]:
        strata: StrataResource = getattr(context.resources, c.STRATA_RESOURCE_KEY)
        selected = sorted(context.selected_asset_check_keys, key=lambda key: key.to_user_string())
        names = [sources[key.asset_key] for key in selected]
        found = {
            check.source: check for check in verify_sources(strata.project_path, strata.warehouse_path, names)
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
