"""jax and Vizier for a CPU sweep, set up once per process: x64 on, their logs quiet, compiled code kept in a
persistent cache on disk, and compiled executables dropped with the freed heap handed back (``malloc_trim``).
Also the process's one model-ask lock: jax's caches and the BLAS thread limit are process-wide.

Nothing here is imported before it is first needed (``_runtime``): importing the study stays cheap.
"""
from __future__ import annotations

import ctypes
import gc
import importlib.util
import logging
import os
import sys
import threading
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Final

from spica_core.search.vizier_private import designer_classes

JAX_CACHE_DIR: Final = Path.home() / ".cache" / "spica" / "jax"


_RUNTIME: SimpleNamespace | None = None


def _runtime() -> SimpleNamespace:
    """Import jax and Vizier once, configured for a CPU sweep: x64 on, warnings and absl quiet."""
    global _RUNTIME
    if _RUNTIME is not None:
        return _RUNTIME
    if "JAX_PLATFORMS" not in os.environ and importlib.util.find_spec("jax_cuda12_plugin") is None:
        os.environ["JAX_PLATFORMS"] = "cpu"
    for name in ("absl", "jax", "jax._src.xla_bridge", "vizier", "equinox", "jaxopt"):
        logging.getLogger(name).setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from absl import logging as absl_logging

        absl_logging.set_verbosity(absl_logging.ERROR)
        # absl's handler keeps the stream that was sys.stderr when absl was imported, and closes it when logging
        # is reconfigured (Prefect's dictConfig closes every handler) unless it is sys.stderr by then: a
        # redirected stderr (pytest's capture file, a caller's redirect_stderr) would be closed under its owner.
        absl_logging.get_absl_handler().python_handler.stream = sys.__stderr__
        import jax

        jax.config.update("jax_enable_x64", True)
        # Compiled GP code is kept on disk, so a later sweep on this machine skips the compiles: all of it. A study's
        # first ask compiles ~127 executables in 3 s, most of them small; from a warm folder it took 5.3 s with all
        # kept, 6.4 s with those over 20 ms, about 7 s with those over 0.2 s (measured when this was added: see its commit). A
        # steady ask adds about four small entries (~20 KB); the folder can be deleted at any time.
        jax.config.update("jax_compilation_cache_dir", os.environ.get("SPICA_JAX_CACHE_DIR", str(JAX_CACHE_DIR)))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        from vizier import algorithms as vza
        from vizier import pyvizier as vz
        from vizier.pyvizier import converters
        from vizier.jax import optimizers
        from vizier.pyvizier.converters import padding
    _RUNTIME = SimpleNamespace(jax=jax, vz=vz, vza=vza, QuasiRandomDesigner=designer_classes()[2],
                               converters=converters, padding=padding, optimizers=optimizers)
    return _RUNTIME


def _release_compiled(jax: Any) -> None:
    """Drop jax's compiled executables and hand the freed heap back to the system: glibc keeps what it freed
    (about 1 MB per small executable, measured when this was added), so without ``malloc_trim`` the clear only
    made room for the next trace instead of shrinking the process."""
    jax.clear_caches()
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: its allocator returns memory its own way
        pass


# One model ask at a time in a process: jax's caches and the BLAS thread limit are process-wide, and two asks
# would only share one GIL (each would end later than it does alone). Re-entrant: the tracing holds it around an ask.
MODEL_ASK: Final = threading.RLock()


__all__ = ["MODEL_ASK"]
