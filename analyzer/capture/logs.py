"""Quiet TensorFlow's own per-step C++ log lines while the capture hook traces on CPU.

A FULL_TRACE run on CPU makes TensorFlow 2.x log five lines per traced step to stderr
(four "Profiler session ..." infos and "GPU trace was not collected." from
xplane_to_step_stats.cc), none of them about the user's program. TensorFlow logs through
absl, whose minimum level is process-wide and has no Python API, so it is raised to
ERROR (via ctypes, on the exported `absl::SetMinLogLevel` of libtensorflow_framework) for
the traced session.run only, and put back after it. Errors are still printed. Anything
unexpected (another platform, a TensorFlow without these symbols) means nothing is
quieted: it never costs the training anything.
"""

from __future__ import annotations

import ctypes
import os
import re
from collections.abc import Callable
from typing import Any

_ERROR = 2  # absl::LogSeverityAtLeast::kError
_SYMBOL = re.compile(rb"_ZN4absl12lts_(\d+)14SetMinLogLevelENS0_18LogSeverityAtLeastE")
_LIBRARY = "libtensorflow_framework.so.2"
_CHUNK = 8 << 20


def _absl_version(path: str) -> str | None:
    """The absl LTS namespace the library was built with (its mangled names carry it)."""
    with open(path, "rb") as f:
        tail = b""
        while chunk := f.read(_CHUNK):
            m = _SYMBOL.search(tail + chunk)
            if m:
                return m.group(1).decode()
            tail = chunk[-128:]
    return None


def _absl_level_functions(tf: Any) -> tuple[Callable[[], int], Callable[[int], None]] | None:
    path = os.path.join(os.path.dirname(tf.__file__), _LIBRARY)
    if not os.path.isfile(path):
        return None
    version = _absl_version(path)
    if version is None:
        return None
    lib = ctypes.CDLL(path)  # already loaded by TensorFlow: the same handle
    get = getattr(lib, f"_ZN4absl12lts_{version}11MinLogLevelEv")
    set_ = getattr(lib, f"_ZN4absl12lts_{version}14SetMinLogLevelENS0_18LogSeverityAtLeastE")
    get.restype, get.argtypes = ctypes.c_int, []
    set_.restype, set_.argtypes = None, [ctypes.c_int]
    return get, set_


class TfLogQuieter:
    """quiet() before a traced run, restore() after it; no-ops where they cannot work."""

    def __init__(self, tf: Any) -> None:
        self._tf = tf
        self._functions: tuple[Callable[[], int], Callable[[int], None]] | None = None
        self._looked = False
        self._saved: int | None = None

    def _usable(self) -> bool:
        if not self._looked:
            self._looked = True
            try:
                on_cpu = not self._tf.config.list_physical_devices("GPU")
                self._functions = _absl_level_functions(self._tf) if on_cpu else None
            except Exception:  # noqa: BLE001 (never fail the training for quiet logs)
                self._functions = None
        return self._functions is not None

    def quiet(self) -> None:
        if self._saved is not None or not self._usable():
            return
        assert self._functions is not None
        get, set_ = self._functions
        level = get()
        if level < _ERROR:
            self._saved = level
            set_(_ERROR)

    def restore(self) -> None:
        if self._saved is not None and self._functions is not None:
            self._functions[1](self._saved)
        self._saved = None
