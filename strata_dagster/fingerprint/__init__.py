"""Content identities: of sources (computed in the warehouse), of models (pure), of builds."""

from strata_dagster.fingerprint.identity import (
    HASH_VERSION,
    BuildKey,
    ModelFingerprint,
    build_key,
    digest,
    model_fingerprint,
    short_id,
    view_identity,
)

__all__ = [
    "HASH_VERSION",
    "BuildKey",
    "ModelFingerprint",
    "build_key",
    "digest",
    "model_fingerprint",
    "short_id",
    "view_identity",
]
