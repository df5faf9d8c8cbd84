"""Every store keeps the contract of harness/store/contract.py: each method the Protocol names,
with its parameters (names, kinds, defaults, types) and a return type within the Protocol's.
isinstance() with a runtime-checkable Protocol sees only that the names exist; this compares
the signatures, so a store that lacks a method or takes other arguments fails here."""
from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Protocol

import pytest

from harness.store.contract import RecordReader, RecordStore, RecordWriter, RunStore
from harness.store.directory import Store
from harness.store.postgres import PostgresStore
from harness.store.targets import FallbackStore

URL = "postgresql://dtbench@localhost:5432/dtbench"


def members(protocol: type) -> dict[str, Any]:
    """The methods and attributes a Protocol declares, its bases' included."""
    found: dict[str, Any] = {}
    for klass in reversed(protocol.__mro__):
        if klass is Protocol or not getattr(klass, "_is_protocol", False):
            continue
        found.update({name: value for name, value in vars(klass).items()
                      if not name.startswith("_") and callable(value)})
        found.update({name: None for name in getattr(klass, "__annotations__", {})})
    return found


def _returns_within(theirs: str, ours: str) -> bool:
    """A return type the same as the Protocol's, or one member of its union."""
    return theirs == ours or theirs in {part.strip() for part in ours.split("|")}


def breaches(store: type, protocol: type) -> list[str]:
    """How `store` departs from `protocol`: a missing member, other parameters, a wider
    return type (annotations compared as written, `from __future__ import annotations`)."""
    found = []
    for name, declared in members(protocol).items():
        annotated = any(name in vars(klass).get("__annotations__", {}) for klass in store.__mro__)
        if not (hasattr(store, name) or annotated):
            found.append(f"{store.__name__} lacks {name}")
            continue
        if declared is None:  # an attribute: a property, or declared and set on the instance
            continue
        if not callable(getattr(store, name)):
            found.append(f"{store.__name__}.{name} is not a method")
            continue
        ours, theirs = inspect.signature(declared), inspect.signature(getattr(store, name))
        wanted = [(p.name, p.kind, p.default, p.annotation) for p in ours.parameters.values()]
        given = [(p.name, p.kind, p.default, p.annotation) for p in theirs.parameters.values()]
        if given != wanted:
            found.append(f"{store.__name__}.{name}{theirs} differs from {name}{ours}")
        elif not _returns_within(str(theirs.return_annotation), str(ours.return_annotation)):
            found.append(f"{store.__name__}.{name} returns {theirs.return_annotation}, not "
                         f"{ours.return_annotation}")
    return found


@pytest.mark.parametrize(("store", "protocol"), [
    (Store, RecordStore), (PostgresStore, RecordStore), (Store, RunStore),
    (FallbackStore, RunStore)], ids=lambda value: value.__name__)
def test_each_store_keeps_the_signatures_of_its_protocol(store: type, protocol: type) -> None:
    assert breaches(store, protocol) == []


def test_the_protocols_name_what_runs_and_readers_use() -> None:
    assert set(members(RecordReader)) == {"records", "summary_rows", "load_rows"}
    assert set(members(RecordWriter)) == {"ensure_writable", "add", "reconcile_index",
                                          "find_baseline", "count_success"}
    assert set(members(RecordStore)) == set(members(RecordReader)) | set(members(RecordWriter))
    assert set(members(RunStore)) == set(members(RecordWriter)) | {"root"}


def test_instances_are_their_protocols(tmp_path: Path) -> None:
    directory, server = Store(tmp_path), PostgresStore(URL)
    fallback = FallbackStore(URL, tmp_path / "pending")
    assert isinstance(directory, RecordStore) and isinstance(directory, RunStore)
    assert isinstance(server, RecordStore) and not isinstance(server, RunStore)  # no folder
    assert isinstance(fallback, RunStore) and fallback.root == tmp_path / "pending"


def test_a_store_that_departs_from_the_contract_is_named() -> None:
    class Lacking(Store):
        count_success = None  # type: ignore[assignment]

    class OtherArguments(Store):
        def find_baseline(self, spec: Any, newest: bool = True) -> dict[str, Any] | None:
            return None

    class WiderReturn(Store):
        def count_success(self, spec_key: str) -> int | None:
            return None

    assert breaches(Lacking, RecordStore) == ["Lacking.count_success is not a method"]
    assert any("find_baseline" in line for line in breaches(OtherArguments, RecordStore))
    assert breaches(WiderReturn, RecordStore) == [
        "WiderReturn.count_success returns int | None, not int"]

    class Missing:
        pass

    assert set(breaches(Missing, RecordStore)) == {
        f"Missing lacks {name}" for name in members(RecordStore)}
