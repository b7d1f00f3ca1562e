"""Reading Gateway API objects that may not have the shape the CRDs promise.

The API server validates against the CRD schemas, but the file source
(``--source``) and older or hand-edited objects do not: any field may hold
any JSON value. The translation reads fields through these helpers, so a
wrong type reads as "absent" and the object is then judged on what is left
(usually ending in a condition that names the problem), never as an
exception that would stop every other object from being served.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["integer", "items", "mapping", "string", "strings"]

_EMPTY: Mapping = {}


def mapping(value) -> Mapping:
    """``value`` if it is an object, else an empty one."""
    return value if isinstance(value, Mapping) else _EMPTY


def items(value) -> list[Mapping]:
    """The objects in ``value`` if it is a list (other entries dropped), else []."""
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def strings(value) -> list[str]:
    """The strings in ``value`` if it is a list, else []."""
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def string(value, default: str = "") -> str:
    return value if isinstance(value, str) else default


def integer(value, default: int = 0) -> int:
    """``value`` if it is an int (not a bool), else ``default``."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default
