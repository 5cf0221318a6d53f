"""Model fingerprints and build keys: explicit, versioned lists of what decides a model's rows.

A model fingerprint covers the compiled SQL (with relations named by role, not by table, so a
branch or an override never changes it), the properties that change its output, the fingerprints
of the models it reads, and the engine and hash versions. A build key adds the identities of the
inputs actually read (source content, upstream snapshot content), the partition and the merge
state: equal build keys mean equal rows, so a snapshot with that key is reused, never rebuilt.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from strata_dagster.compile.compiler import CompiledModel
from strata_dagster.language.definition import Model
from strata_dagster.language.render_memo import rendered

# Bump when anything below changes how a fingerprint is computed: every model then rebuilds once.
HASH_VERSION = "strata-fp-2"
# Properties that change a model's rows. `unique`, `contract`, `description` and `tags` do not:
# they are checks and labels, and changing them must not rebuild anything.
OUTPUT_PROPERTIES = ("merge_strategy", "merge_keys", "cdc_column", "lateness", "partitioned_by", "order_by")


def digest(*parts: object) -> str:
    """sha256 over a canonical JSON rendering of the parts."""
    payload = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


def short_id(full: str, length: int = 12) -> str:
    return full[:length]


@dataclass(frozen=True)
class ModelFingerprint:
    model: str
    value: str
    canonical_sql: str


def model_fingerprint(
    model: Model,
    compiled: CompiledModel,
    upstream: Mapping[str, str],
    backend_version: str,
) -> ModelFingerprint:
    """The fingerprint of a model's definition; `upstream` maps each model it reads to its fingerprint."""
    # Relations by role: branches and overrides do not change it; comments are not code.
    canonical = rendered(compiled.statement, "duckdb", comments=False)
    props = model.properties
    output_properties = {name: _plain(getattr(props, name)) for name in OUTPUT_PROPERTIES}
    if props.is_view:
        # Only views say so: a table model's fingerprint stays what it was before views existed.
        output_properties["materialize"] = props.materialize
    if props.check_columns is not None:
        # Only history models checking columns say so: other fingerprints stay what they were.
        output_properties["check_columns"] = list(props.check_columns)
    if props.deleted_flag is not None:
        output_properties["deleted_flag"] = props.deleted_flag
    value = digest(
        HASH_VERSION,
        backend_version,
        canonical,
        output_properties,
        sorted((name, upstream[name]) for name in model.references if name in upstream),
    )
    return ModelFingerprint(model.name, value, canonical)


def _plain(value: object) -> object:
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    if hasattr(value, "grain") and hasattr(value, "column"):
        return {"grain": value.grain, "column": value.column}  # PartitionSpec, without its location
    return str(value)


def view_identity(key: str) -> str:
    """The content identity of a view model's build: derived from its build key (definition and
    input identities), never from its rows, so a view costs nothing to build and equal inputs keep
    it, and everything downstream of it, as it was."""
    return digest("view", key)


@dataclass(frozen=True)
class BuildKey:
    model: str
    value: str


def build_key(
    fingerprint: ModelFingerprint,
    inputs: Sequence[tuple[str, str]],
    *,
    partition: str | None = None,
    merge_state: str | None = None,
    period: str | None = None,
) -> BuildKey:
    """Identity of one build: same fingerprint, same input contents, same partition and merge state,
    and for a model with `refresh: hourly | daily` the same period (see fingerprint.refresh)."""
    parts: tuple[object, ...] = (fingerprint.value, sorted(inputs), partition, merge_state)
    # Only a refreshed model's key has a period: every other build key stays as it was.
    return BuildKey(fingerprint.model, digest(*parts) if period is None else digest(*parts, period))
