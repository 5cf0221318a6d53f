"""A component's `translation` (Dagster's templated asset attributes) as a strata translator: the
default spec of each source and model, then the template's attributes over it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import dagster as dg
from dagster.components.utils.translation import TranslationFn

from strata_dagster.orchestration.translator import StrataAssetProps, StrataDagsterTranslator


class TemplatedTranslator(StrataDagsterTranslator):
    """The default translator, with `translation` applied to each node's spec: its key (companions
    follow it), group, description, tags, metadata, owners and kinds; code versions, partitions
    and dependencies stay strata's."""

    def __init__(
        self, translation: TranslationFn[StrataAssetProps], *, is_open_ended_partitions: bool
    ) -> None:
        super().__init__(is_open_ended_partitions=is_open_ended_partitions)
        self.translation = translation
        self._specs: dict[tuple[str, str], dg.AssetSpec] = {}

    def spec(self, props: StrataAssetProps) -> dg.AssetSpec:
        cached = self._specs.get((props.kind, props.name))
        if cached is None:
            base = dg.AssetSpec(
                key=super().get_asset_key(props),
                group_name=super().get_group_name(props),
                description=super().get_description(props),
                tags=super().get_tags(props),
                metadata=super().get_metadata(props),
                owners=list(super().get_owners(props)),
                kinds=super().get_kinds(props),
            )
            cached = self._specs[(props.kind, props.name)] = self.translation(base, props)
        return cached

    def get_asset_key(self, props: StrataAssetProps) -> dg.AssetKey:
        return self.spec(props).key

    def get_whole_asset_key(self, props: StrataAssetProps) -> dg.AssetKey:
        return _suffixed(self.get_asset_key(props), "__whole")

    def get_partition_companion_key(self, props: StrataAssetProps, reader: StrataAssetProps) -> dg.AssetKey:
        assert reader.partitioned_by is not None
        return _suffixed(self.get_asset_key(props), f"__by_{reader.partitioned_by.grain}")

    def get_group_name(self, props: StrataAssetProps) -> str | None:
        return self.spec(props).group_name

    def get_description(self, props: StrataAssetProps) -> str | None:
        return self.spec(props).description

    def get_tags(self, props: StrataAssetProps) -> Mapping[str, str]:
        return {
            key: value for key, value in self.spec(props).tags.items() if not key.startswith("dagster/kind/")
        }

    def get_metadata(self, props: StrataAssetProps) -> Mapping[str, Any]:
        return self.spec(props).metadata

    def get_owners(self, props: StrataAssetProps) -> Sequence[str]:
        return self.spec(props).owners

    def get_kinds(self, props: StrataAssetProps) -> set[str]:
        return set(self.spec(props).kinds)


def _suffixed(key: dg.AssetKey, suffix: str) -> dg.AssetKey:
    return dg.AssetKey([*key.path[:-1], f"{key.path[-1]}{suffix}"])
