"""The build engine: decide, build, publish (no dagster, no click here; docs/architecture.md, section 4).

Its folders, top to bottom (each imports only from the ones below it; `lint-imports` checks it):

    run.py  plan.py  commands/   `strata run` (execute + publish), `strata plan` (explain),
                                 the other writing commands (backfill, replay, rollback and
                                 branches, gc, verify, frames, doctor, model unit tests)
    publish.py                   repoint the views and write the history, in one commit
    reads/                       read-only answers for the CLI and Dagster: catalog, columns,
                                 explain, show, partition status and staleness, arrivals
    decisions/                   what a run decides for each model, never writing: scope,
                                 decider, the decision values, the strategy it dispatches to
    builds/                      the build strategies: write a snapshot or segment, never publish
    sources/                     business-driven sources and what a run reads of its sources
    context.py  partition_keys.py  paths.py  damaged_files.py
                                 the base every engine module may import
"""
