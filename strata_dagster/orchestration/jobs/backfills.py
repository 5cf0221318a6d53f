"""Which Dagster runs are strata backfills, and the engine run their steps make.

A run is a backfill when it
- belongs to a Dagster backfill (tag `dagster/backfill`: the UI's partition dialogs, the GraphQL
  `launchPartitionBackfill`), unless declarative automation launched it: automation rebuilds what
  is stale, it corrects nothing;
- is a run of a project's `strata_backfill` job (`strata_backfill` for the unpartitioned models,
  `strata_backfill_<asset>_partitions` for each partitioning; `strata_<name>_backfill...` for a
  project given a name, orchestration.naming);
- or carries a correction: `strata/backfill_of` (the strata run it corrects),
  `strata/source/<source>` = `<table>` (read the source from that table, like `--source`), or
  `strata/full_refresh` = `true` (rebuild the models from all their input, like
  `strata backfill --full-refresh`).

A backfill needs `strata/reason`. The engine records it with kind `backfill`, the corrected run
and the overrides, as `strata backfill` does. Any other run builds as an ordinary strata run (a
`strata/reason` on it is recorded too).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import dagster as dg

from strata_dagster.engine.commands.backfill import backfill_request
from strata_dagster.engine.run import RunRequest
from strata_dagster.errors import E_BACKFILL, StrataError
from strata_dagster.language import load_project
from strata_dagster.orchestration import constants as c
from strata_dagster.orchestration.naming import ProjectNames
from strata_dagster.orchestration.resources.strata import StrataResource

BACKFILL_TAG = "dagster/backfill"
# Declarative automation launches its partitioned requests as backfills, with these tags.
AUTOMATION_TAGS = ("dagster/from_automation_condition", "dagster/auto_materialize")

ADD_REASON = (
    f"add the run tag `{c.REASON_TAG}` saying why, e.g. `corrected upstream extract`: in the UI's "
    "backfill dialog under 'Add tags to backfill runs' (Materialize's partition dialog: 'Tags', "
    "'Add tags'; a job's Launchpad: 'Edit tags'), or in the tags of launchPartitionBackfill; "
    "nothing was run or written"
)


def backfill_tags_help(names: ProjectNames) -> str:
    """What the descriptions of partitioned models and of the backfill jobs say, so that the tags
    are found where a user looks before launching: Dagster's launch dialogs cannot require a tag."""
    return (
        f"Backfills (a partition dialog's Materialize or Launch backfill, the `{names.backfill_job}` "
        f"jobs) need the run tag `{c.REASON_TAG}` saying why (under 'Add tags to backfill runs'); "
        "without it the run is refused before any step (E085, canceled) and nothing is written. "
        f"Optional tags: `{c.BACKFILL_OF_TAG}` = the strata run id it corrects, "
        f"`{c.SOURCE_TAG_PREFIX}<source>` = `<schema.table>` to read a corrected table, "
        f"`{c.FULL_REFRESH_TAG}` = `true` to rebuild from all input."
    )


def fast_paths_help(names: ProjectNames) -> str:
    """The fast ways, named where the slow ones are: a Dagster backfill waits for the backfill
    daemon's iterations (orchestration.jobs.one_run says why)."""
    return (
        f"Fast paths: the first load of everything is the job `{names.materialize_all_job}` (Jobs, "
        "Launch run: one run; 'Materialize all' launches a Dagster backfill each of whose levels waits "
        f"for {c.BACKFILL_DAEMON_WAIT}). A backfill of a range of partitions in one run is the "
        f"job `{names.backfill_range_job}` (Launchpad config `assets`, `first`, `last`, and the tag "
        f"`{c.REASON_TAG}`)."
    )


@dataclass(frozen=True)
class StrataBackfill:
    """What a backfill run asks of the engine, read from its tags."""

    cause: str  # what makes the run a backfill, for messages
    reason: str | None
    backfill_of: str | None
    sources: Mapping[str, str] = field(default_factory=dict)
    full_refresh: str | None = None  # the tag's text, checked by `engine_request`


def read_backfill(job_name: str, tags: Mapping[str, str], names: ProjectNames) -> StrataBackfill | None:
    """The backfill this run (of a job of the project `names` names) is, or None for an ordinary run."""
    sources = {
        key.removeprefix(c.SOURCE_TAG_PREFIX): value
        for key, value in tags.items()
        if key.startswith(c.SOURCE_TAG_PREFIX)
    }
    backfill_of = tags.get(c.BACKFILL_OF_TAG)
    if names.is_backfill_job(job_name):
        cause = f"it runs job `{job_name}`"
    elif BACKFILL_TAG in tags and not any(tag in tags for tag in AUTOMATION_TAGS):
        cause = f"it belongs to Dagster backfill `{tags[BACKFILL_TAG]}`"
    elif backfill_of is not None or sources or c.FULL_REFRESH_TAG in tags:
        cause = "it carries a correction tag"
    else:
        return None
    return StrataBackfill(cause, tags.get(c.REASON_TAG), backfill_of, sources, tags.get(c.FULL_REFRESH_TAG))


def engine_request(
    strata: StrataResource,
    names: ProjectNames,
    job_name: str,
    tags: Mapping[str, str],
    models: Sequence[str] = (),
    partitions: Sequence[str] = (),
) -> RunRequest:
    """The engine run that builds `models` in a run of `job_name` with `tags`: a checked backfill
    for backfill runs (E085 for a missing reason or a bad correction), else an ordinary run.

    A backfill of `partitions` (`--partitions` items) rebuilds exactly those, as `strata backfill
    --partitions` does; an ordinary run of partitions builds what is stale."""
    backfill = read_backfill(job_name, tags, names)
    if backfill is None:
        return RunRequest(
            project_dir=strata.project_path,
            warehouse=strata.warehouse_path,
            models=tuple(models),
            branch=strata.branch,
            only_stale=True,
            reason=tags.get(c.REASON_TAG),
        )
    if backfill.reason is None or not backfill.reason.strip():
        raise StrataError(
            E_BACKFILL,
            f"this run is a backfill ({backfill.cause}) and has no `{c.REASON_TAG}` tag: a backfill must say why it runs",
            hint=ADD_REASON,
        )
    _check_tags(strata, backfill)
    try:
        return backfill_request(
            strata.project_path,
            strata.warehouse_path,
            backfill.reason,
            run_id=backfill.backfill_of,
            sources=dict(backfill.sources),
            models=models,
            branch=strata.branch,
            full_refresh=_full_refresh(backfill.full_refresh),
            partitions=partitions,
        )
    except StrataError as error:  # E085 already, its cause's code in the message
        raise StrataError(
            E_BACKFILL,
            f"{error.message} (from the run's {c.BACKFILL_OF_TAG} / {c.SOURCE_TAG_PREFIX}* tags)",
            error.location,
            hint=(error.hint + "; " if error.hint else "") + "fix the tags and launch again",
            subject=error.subject,
        ) from None


def _full_refresh(text: str | None) -> bool:
    return text is not None and c.FULL_REFRESH_VALUES[text.strip().lower()]


def _check_tags(strata: StrataResource, backfill: StrataBackfill) -> None:
    """Tag mistakes, named as tags: an empty run id, a source the project does not have, a
    full-refresh flag that is neither true nor false."""
    if (
        backfill.full_refresh is not None
        and backfill.full_refresh.strip().lower() not in c.FULL_REFRESH_VALUES
    ):
        raise StrataError(
            E_BACKFILL,
            f"tag `{c.FULL_REFRESH_TAG}` is `{backfill.full_refresh}`",
            hint=f"set `{c.FULL_REFRESH_TAG}` to `true` (rebuild the models from all their input) or `false`",
        )
    if backfill.backfill_of is not None and not backfill.backfill_of.strip():
        raise StrataError(
            E_BACKFILL,
            f"tag `{c.BACKFILL_OF_TAG}` is empty",
            hint="set it to the strata run id the backfill corrects (`strata history` lists them), or drop it",
        )
    known = load_project(strata.project_path).sources
    for name, table in backfill.sources.items():
        if name not in known:
            raise StrataError(
                E_BACKFILL,
                f"tag `{c.SOURCE_TAG_PREFIX}{name}` = `{table}` names no source of the project",
                hint=f"write `{c.SOURCE_TAG_PREFIX}<source>` = `<schema.table>`; sources: "
                + ", ".join(sorted(known)),
            )


def build_backfill_jobs(
    assets: Sequence[dg.AssetsDefinition | dg.SourceAsset],
    model_keys: Sequence[dg.AssetKey],
    names: ProjectNames,
    executor: dg.ExecutorDefinition,
) -> tuple[list[dg.UnresolvedAssetJobDefinition], dict[dg.AssetKey, str]]:
    """One backfill job per partitions definition of the strata models (a run cannot mix them),
    and the backfill job of every model."""
    wanted = set(model_keys)
    groups: dict[str, list[dg.AssetKey]] = {}
    job_names: dict[str, str] = {}
    for item in assets:
        if isinstance(item, dg.SourceAsset):
            continue
        identity = "" if item.partitions_def is None else repr(item.partitions_def)
        for key in (spec.key for spec in item.specs):  # in the order the models build
            if key not in wanted:
                continue
            groups.setdefault(identity, []).append(key)
            job_names.setdefault(
                identity,
                names.backfill_partitions_job(key.path[-1]) if identity else names.backfill_job,
            )
    jobs = [
        dg.define_asset_job(
            job_names[identity],
            selection=dg.AssetSelection.assets(*keys),
            description=f"Backfill of strata models. {backfill_tags_help(names)}",
            executor_def=executor,
        )
        for identity, keys in groups.items()
    ]
    return jobs, {key: job_names[identity] for identity, keys in groups.items() for key in keys}
