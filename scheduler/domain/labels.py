"""A schedule's labels (`{team: data, tier: gold}`: for people and for selecting schedules), their limits,
and label selectors as Kubernetes writes them: `team=data,tier!=bronze,critical,!deprecated`: every term
must hold (`k=v` or `k==v`: the label is v; `k!=v`: it is not v, or absent; `k`: it is set; `!k`: it is
not). Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from scheduler.domain.basics import InvalidSchedule

MAX_LABELS = 32
MAX_LABEL_CHARS = 63
#: a label key, and a non-empty value: 1-63 of [A-Za-z0-9._-], beginning and ending alphanumeric
LABEL_PATTERN = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?"
_LABEL = re.compile(LABEL_PATTERN, re.ASCII)
MAX_DESCRIPTION = 1_000
MAX_SELECTOR_TERMS = 16


def validate_labels(labels: Mapping[str, str], field: str = "labels") -> None:
    """At most MAX_LABELS; each key, and each value unless empty, as LABEL_PATTERN."""
    if len(labels) > MAX_LABELS:
        raise InvalidSchedule(field, f"more than {MAX_LABELS} labels")
    for key, value in labels.items():
        if not _LABEL.fullmatch(key):
            raise InvalidSchedule(f"{field}.{key[:80]}", _WHAT.format("a key"))
        if value and not _LABEL.fullmatch(value):
            raise InvalidSchedule(f"{field}.{key}", _WHAT.format("a value (or empty)"))


def validate_description(description: str | None) -> None:
    if description is not None and len(description) > MAX_DESCRIPTION:
        raise InvalidSchedule("description", f"longer than {MAX_DESCRIPTION} characters")


_WHAT = "{} is 1-63 characters of [A-Za-z0-9._-], beginning and ending with a letter or a digit"


@dataclass(frozen=True, slots=True)
class Term:
    key: str
    op: str  # "=", "!=", "exists", "!exists"
    value: str = ""

    def holds(self, labels: Mapping[str, str]) -> bool:
        if self.op == "=":
            return labels.get(self.key) == self.value
        if self.op == "!=":
            return labels.get(self.key) != self.value
        return (self.key in labels) == (self.op == "exists")


@dataclass(frozen=True, slots=True)
class Selector:
    terms: tuple[Term, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(t.holds(labels) for t in self.terms)


def parse_selector(text: str) -> Selector:
    """`team=data,tier!=bronze,critical,!deprecated` (ValueError saying what is wrong)."""
    terms = []
    for raw in text.split(","):
        term = raw.strip()
        if not term:
            raise ValueError("an empty term (two commas, or a comma at an end)")
        if "!=" in term:
            key, _, value = term.partition("!=")
            op = "!="
        elif "=" in term:
            key, _, value = term.partition("==" if "==" in term else "=")
            op = "="
        elif term.startswith("!"):
            key, value, op = term[1:], "", "!exists"
        else:
            key, value, op = term, "", "exists"
        key, value = key.strip(), value.strip()
        if not _LABEL.fullmatch(key):
            raise ValueError(f"{key[:80]!r}: {_WHAT.format('a key')}")
        if value and not _LABEL.fullmatch(value):
            raise ValueError(f"{value[:80]!r}: {_WHAT.format('a value')}")
        terms.append(Term(key, op, value))
    if len(terms) > MAX_SELECTOR_TERMS:
        raise ValueError(f"more than {MAX_SELECTOR_TERMS} terms")
    return Selector(tuple(terms))
