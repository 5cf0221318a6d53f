"""Model selectors, as dbt users write them for `--models`.

A selection is a union of selectors separated by commas (or spaces). Each selector is a model
name, a glob over model names (`stg_*`) or `tag:name`, optionally with `+` before it (and the
models it reads, transitively; `2+` for two levels) and/or after it (and the models that read it;
`+1` for one level). Commas are a union, not dbt's intersection: `a,b` selects both.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from strata_dagster.errors import E_UNKNOWN_MODEL, StrataError, raise_collected
from strata_dagster.language.definition import Project

SelectorMethod = Literal["name", "glob", "tag"]

TAG_PREFIX = "tag:"
_SEPARATORS = re.compile(r"[,\s]+")
_GRAPH = re.compile(
    r"(?:(?P<up_levels>[0-9]*)(?P<up>\+))?(?P<body>[^+]+)(?:(?P<down>\+)(?P<down_levels>[0-9]*))?"
)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_GLOB = re.compile(r"[A-Za-z0-9_*?\[\]!-]+")
_FORMS = "name, stg_* (glob), tag:name, +name (with upstream), name+ (with downstream), 2+name, name+1"


@dataclass(frozen=True)
class Selector:
    """One selector of a selection. `upstream` / `downstream`: how many levels of models that it
    reads / that read it to add; 0 for none, None for all of them."""

    text: str
    method: SelectorMethod
    value: str
    upstream: int | None = 0
    downstream: int | None = 0


def split_selection(text: str) -> tuple[str, ...]:
    """`a, +b c` -> ("a", "+b", "c"): selectors separated by commas or spaces."""
    return tuple(part for part in _SEPARATORS.split(text) if part)


def parse_selector(text: str) -> Selector:
    """A selector from its text; E025 when it is not one of the forms."""
    match = _GRAPH.fullmatch(text)
    body = match.group("body") if match else ""
    if body.startswith(TAG_PREFIX):
        # The parser's property checks are imported for a tag selector alone (a run parses nothing).
        from strata_dagster.language.properties import TAG_PATTERN

        method: SelectorMethod = "tag"
        value = body[len(TAG_PREFIX) :]
        is_valid = bool(TAG_PATTERN.fullmatch(value))
    elif _NAME.fullmatch(body):
        method, value, is_valid = "name", body, True
    else:
        method, value = "glob", body
        is_valid = bool(_GLOB.fullmatch(body)) and any(char in body for char in "*?[")
    if match is None or not is_valid:
        raise StrataError(
            E_UNKNOWN_MODEL,
            f"`{text}` is not a model selector",
            hint=f"write one of: {_FORMS}; separate several with commas",
        )
    return Selector(
        text,
        method,
        value,
        upstream=_levels(match.group("up"), match.group("up_levels")),
        downstream=_levels(match.group("down"), match.group("down_levels")),
    )


def _levels(plus: str | None, digits: str | None) -> int | None:
    if plus is None:
        return 0
    return int(digits) if digits else None


def select(project: Project, selection: Iterable[str] | None) -> tuple[str, ...]:
    """The models a selection names, in dependency order; every model when it is empty (E025
    when it has items that hold no selector).

    Each item of `selection` may hold several selectors (`"stg_*,+daily_revenue"`). Selectors
    that are malformed or match no model are E025, all of them reported together, each with a
    did-you-mean where a close name or tag exists.
    """
    items = tuple(selection or ())
    texts = [part for item in items for part in split_selection(item)]
    if not texts:
        if items:  # `--models ''` or `--models ','` is a slip, never a way to say "all"
            raise StrataError(
                E_UNKNOWN_MODEL,
                f"the model selection {', '.join(repr(item) for item in items)} names no model",
                hint=f"write one of: {_FORMS}; or select nothing to get every model",
            )
        return project.order
    downstream = _downstream_map(project)
    chosen: set[str] = set()
    errors: list[StrataError] = []
    for text in texts:
        try:
            selector = parse_selector(text)
        except StrataError as error:
            errors.append(error)
            continue
        matched = _matches(project, selector)
        if not matched:
            errors.append(_unmatched(project, selector))
            continue
        chosen |= matched
        chosen |= _walk(matched, project.upstream_models, selector.upstream)
        chosen |= _walk(matched, downstream.__getitem__, selector.downstream)
    raise_collected(errors)
    return tuple(name for name in project.order if name in chosen)


def _matches(project: Project, selector: Selector) -> set[str]:
    if selector.method == "name":
        return {selector.value} if selector.value in project.models else set()
    if selector.method == "glob":
        return {name for name in project.models if fnmatch.fnmatchcase(name, selector.value)}
    return {name for name, model in project.models.items() if selector.value in model.properties.tags}


def _downstream_map(project: Project) -> Mapping[str, tuple[str, ...]]:
    readers: dict[str, list[str]] = {name: [] for name in project.models}
    for name in project.order:
        for upstream in project.upstream_models(name):
            readers[upstream].append(name)
    return {name: tuple(names) for name, names in readers.items()}


def _walk(start: set[str], neighbours: Callable[[str], Iterable[str]], levels: int | None) -> set[str]:
    """Models reachable from `start` in at most `levels` steps (any number when None)."""
    reached: set[str] = set()
    frontier = set(start)
    depth = 0
    while frontier and (levels is None or depth < levels):
        frontier = {next_ for name in frontier for next_ in neighbours(name)} - reached - start
        reached |= frontier
        depth += 1
    return reached


def _unmatched(project: Project, selector: Selector) -> StrataError:
    models = list(project.order)
    if selector.method == "tag":
        tags = sorted({tag for model in project.models.values() for tag in model.properties.tags})
        close = difflib.get_close_matches(selector.value, tags, n=1)
        known = f"tags in the project: {', '.join(tags)}" if tags else "no model declares `tags: [...]`"
        return StrataError(
            E_UNKNOWN_MODEL,
            f"no model has tag `{selector.value}` (selector `{selector.text}`)",
            hint=(f"did you mean `{TAG_PREFIX}{close[0]}`? " if close else "") + known,
        )
    if selector.method == "glob":
        return StrataError(
            E_UNKNOWN_MODEL,
            f"no model matches `{selector.value}` (selector `{selector.text}`)",
            hint="models: " + ", ".join(models),
        )
    close = difflib.get_close_matches(selector.value, models, n=1)
    is_source = selector.value in project.sources
    return StrataError(
        E_UNKNOWN_MODEL,
        f"no model named `{selector.value}`"
        + (f" (`{selector.value}` is a source)" if is_source else "")
        + (f" (selector `{selector.text}`)" if selector.text != selector.value else ""),
        hint=(f"did you mean `{close[0]}`? " if close else "") + "models: " + ", ".join(models),
    )
