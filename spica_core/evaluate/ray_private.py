"""The one private Ray name Spica uses, in one module (tested with ray 2.60.0, the ``ray`` extra's pin).

Ray's public calls start a local Ray instance in this process when it is not connected (say, once the
connection to the cluster is lost), and that must never happen in a sweep. ``RAY_ENABLE_AUTO_CONNECT=0``
turns it off, but Ray reads it once, when ``ray._private.auto_init_hook`` is imported; :func:`no_auto_init`
sets the flag that variable sets. :func:`missing` says, with the pinned version, when the flag is gone.
"""
from __future__ import annotations

PINNED = "ray 2.60.0"
_FLAG = "enable_auto_connect"


def no_auto_init() -> None:
    """Stop Ray's public calls from starting a local instance in this process (no-op without Ray)."""
    try:
        from ray._private import auto_init_hook
    except ImportError:
        return
    setattr(auto_init_hook, _FLAG, False)


def missing() -> list[str]:
    """The private names above that the installed Ray lacks ([] when Ray is not installed)."""
    try:
        from ray._private import auto_init_hook
    except ImportError as exc:
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            return []
        return [f"ray._private.auto_init_hook is gone from the installed Ray ({exc}; Spica is tested with {PINNED})"]
    if not isinstance(getattr(auto_init_hook, _FLAG, None), bool):
        return [f"ray._private.auto_init_hook.{_FLAG} is gone from the installed Ray (Spica is tested with {PINNED})"]
    return []


__all__ = ["PINNED", "missing", "no_auto_init"]
