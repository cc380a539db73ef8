"""Is a current schema compatible with its released snapshot? A deliberately simple walk.

The rule: every record the new producer emits must validate against the released
schema (old consumers keep working), and every record already on a topic, made by
the released producer, must validate against the current one (a consumer on the new
schema replays old records). So an existing property keeps its name, type and
constraints exactly; the required set stays the same; only *optional* properties may
be added. Annotations (title, description, examples, $comment) may change freely.
Anything else is a breaking change: a v2 under a new kind (docs/dispatcher.md).
"""

from __future__ import annotations

from typing import Any

ANNOTATIONS = frozenset({"title", "description", "examples", "$comment", "default", "deprecated"})


def breaking_changes(released: dict[str, Any], current: dict[str, Any], path: str = "$") -> list[str]:
    """Every incompatibility of ``current`` with ``released``, as ``path: what``."""
    problems: list[str] = []
    for keyword in sorted((set(released) | set(current)) - ANNOTATIONS - {"properties", "required"}):
        if _norm(keyword, released.get(keyword)) != _norm(keyword, current.get(keyword)):
            problems.append(f"{path}: {keyword} changed from {released.get(keyword)!r} "
                            f"to {current.get(keyword)!r}")
    old_required, new_required = set(released.get("required", ())), set(current.get("required", ()))
    for name in sorted(old_required - new_required):
        problems.append(f"{path}.{name}: no longer required (old consumers rely on it)")
    for name in sorted(new_required - old_required):
        problems.append(f"{path}.{name}: newly required (records already on the topic lack it)")
    old_props: dict[str, Any] = released.get("properties", {})
    new_props: dict[str, Any] = current.get("properties", {})
    for name in sorted(old_props):
        if name not in new_props:
            problems.append(f"{path}.{name}: removed or renamed")
        else:
            problems.extend(breaking_changes(old_props[name], new_props[name], f"{path}.{name}"))
    return problems


def _norm(keyword: str, value: Any) -> Any:
    """Order is no meaning in ``type`` and ``enum`` lists."""
    if keyword in ("type", "enum") and isinstance(value, list):
        return sorted(value, key=repr)
    return value
