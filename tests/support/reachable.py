"""What an object holds in memory, as a heap dump would show it: the values of one type (`bytes`,
`str`) reachable from it.

Tests of what a product object keeps (never a password, only its own keys, nothing of files long
gone) read this instead of its private attributes. The walk follows instances, containers and their
items, and stops at classes, modules and functions (their code and globals are not the object's)."""

from __future__ import annotations

import gc
import types
from collections.abc import Hashable
from typing import Any, TypeVar

_NOT_HELD = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.CodeType)

T = TypeVar("T", bound=Hashable)


def reachable(obj: Any, kind: type[T]) -> set[T]:
    """Every value of type `kind` reachable from `obj` through the objects it refers to."""
    seen: set[int] = set()
    todo = [obj]
    found: set[T] = set()
    while todo:
        item = todo.pop()
        if id(item) in seen or isinstance(item, _NOT_HELD):
            continue
        seen.add(id(item))
        if isinstance(item, kind):
            found.add(item)
        if not isinstance(item, str | bytes):
            todo.extend(gc.get_referents(item))
    return found
