"""The least and the greatest merge key of an upsert's state, recorded beside it on backends whose
scan of a state cannot skip rows by a join's keys (Spark reads every file of the state to find the
rows a delta's keys replace). A delta whose keys all lie outside the bounds (new orders, numbered
after every earlier one) replaces no row of the state: its scan for the replaced rows is not run.

The bounds only widen: a state's new segment adds its keys table's bounds, and a row deleted leaves
them as they were, so every live key lies within them. Only key types whose text orders like the
values are kept (as the engine reports them with `typeof`); for any other the bounds are None and
every delta scans, as before."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

_INTEGERS = frozenset({"tinyint", "smallint", "int", "bigint"})
_DECIMAL = re.compile(r"^decimal\(\d+,\d+\)$")
# A binary string's text orders by code point, as UTF-8 bytes do.
_STRINGS = frozenset({"string"})
_TEMPORAL = {"date": date.fromisoformat, "timestamp_ntz": datetime.fromisoformat}


@dataclass(frozen=True)
class KeyBounds:
    low: str
    high: str
    type_name: str  # the engine's `typeof` of the key, lower case

    @classmethod
    def of(cls, low: str | None, high: str | None, type_name: str) -> KeyBounds | None:
        """Bounds from a min and max read as text, or None when they cannot be compared."""
        if low is None or high is None:
            return None
        bounds = cls(str(low), str(high), type_name.lower())
        try:
            is_ordered = bounds._value(bounds.low) <= bounds._value(bounds.high)
        except (ValueError, InvalidOperation, TypeError):
            return None
        return bounds if is_ordered else None

    @classmethod
    def from_detail(cls, recorded: Any) -> KeyBounds | None:
        if not isinstance(recorded, list) or len(recorded) != 3:
            return None
        return cls.of(*recorded)

    def as_detail(self) -> list[str]:
        return [self.low, self.high, self.type_name]

    def _value(self, text: str) -> Any:
        if self.type_name in _INTEGERS:
            return int(text)
        if _DECIMAL.match(self.type_name):
            return Decimal(text)
        if self.type_name in _STRINGS:
            return text
        parse = _TEMPORAL.get(self.type_name)
        if parse is not None:
            return parse(text)
        raise ValueError(f"key text {text!r} of type {self.type_name} has no known order")

    def is_apart_from(self, other: KeyBounds) -> bool:
        """No key within `other` lies within these bounds (False when that cannot be told)."""
        if other.type_name != self.type_name:
            return False
        return self._value(other.high) < self._value(self.low) or self._value(other.low) > self._value(
            self.high
        )

    def widened(self, other: KeyBounds) -> KeyBounds | None:
        """Bounds holding both (None when the types differ: nothing is recorded then)."""
        if other.type_name != self.type_name:
            return None
        low = min(self.low, other.low, key=self._value)
        high = max(self.high, other.high, key=self._value)
        return KeyBounds(low, high, self.type_name)
