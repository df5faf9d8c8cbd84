"""Named registries for workloads, backends, launchers and collectors."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from harness.core.errors import UnknownNameError, unknown_name

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to entries; an unknown name raises an error that lists the known ones."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def decorate(entry: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = entry
            return entry

        return decorate

    def get(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownNameError(unknown_name(self.kind, name, self.names())) from None

    def names(self) -> list[str]:
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)
