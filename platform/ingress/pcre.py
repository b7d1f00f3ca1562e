"""The data plane's own regular expression engines, asked directly.

A user regex reaches two engines, and neither is Python's ``re``:

* **nginx** compiles ``location ~`` regexes with the PCRE2 library it is
  linked against (Debian's nginx 1.22: ``libpcre2-8.so.0``), with no options
  for ``~`` and ``PCRE2_CASELESS`` for ``~*``;
* **Lua** (``ngx.re.find(subject, pattern, "jo")`` in the balancer, the
  router and ``configuration.lua``'s schema check) compiles with the PCRE
  library the Lua module is linked against: Debian's
  ``libnginx-mod-http-lua`` 0.10.23 links the *old* PCRE (``libpcre.so.3``,
  8.39), with no compile options for ``"jo"``.

Python's ``re`` accepts patterns both refuse (``(?a)x``: the ASCII flag; a
group name of 40 characters) and refuses some both accept (possessive
quantifiers before 3.11, ``\\Q..\\E``), so a translation that checked with
``re`` handed Lua a pattern it answered 400 for, failing the whole backends
section for every tenant. Asking the engines themselves through ``ctypes``
costs ~10 µs a pattern per engine (a compile, then free; 20 µs for both,
measured over 5,000 patterns) and is the only check that is
right by construction; results are cached per pattern (bounded LRU).

``compile_error(engine, pattern)`` is None when the engine compiles the
pattern, else its own error message; ``group_names(engine, pattern)`` lists
the named groups the engine found (nginx turns each into a variable).
When a library cannot be loaded (a machine without nginx), ``EngineMissing``
is raised: callers refuse the value rather than guess.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import threading

__all__ = ["LUA", "NGINX", "EngineMissing", "compile_error", "group_names"]

NGINX = "nginx"  # PCRE2, as nginx compiles location regexes
LUA = "lua"      # PCRE 8.x, as ngx.re compiles (lua-nginx-module on Debian 12)

_PCRE2_INFO_NAMECOUNT = 17
_PCRE2_INFO_NAMEENTRYSIZE = 18
_PCRE2_INFO_NAMETABLE = 19
_PCRE_INFO_NAMEENTRYSIZE = 7
_PCRE_INFO_NAMECOUNT = 8
_PCRE_INFO_NAMETABLE = 9


class EngineMissing(RuntimeError):
    """The regex library of the data plane cannot be loaded here."""


class _Pcre2:
    def __init__(self) -> None:
        lib = _load("pcre2-8", "libpcre2-8.so.0")
        self.compile = lib.pcre2_compile_8
        self.compile.restype = ctypes.c_void_p
        self.compile.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint32,
                                 ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_size_t), ctypes.c_void_p]
        self.free = lib.pcre2_code_free_8
        self.free.argtypes = [ctypes.c_void_p]
        self.info = lib.pcre2_pattern_info_8
        self.info.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p]
        self.message = lib.pcre2_get_error_message_8
        self.message.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]

    def check(self, pattern: bytes) -> tuple[str | None, tuple[str, ...]]:
        code_out, offset = ctypes.c_int(), ctypes.c_size_t()
        code = self.compile(pattern, len(pattern), 0, ctypes.byref(code_out), ctypes.byref(offset), None)
        if not code:
            buffer = ctypes.create_string_buffer(256)
            self.message(code_out.value, buffer, len(buffer))
            return f"{buffer.value.decode(errors='replace')} at offset {offset.value}", ()
        try:
            count, size, table = ctypes.c_uint32(), ctypes.c_uint32(), ctypes.c_void_p()
            self.info(code, _PCRE2_INFO_NAMECOUNT, ctypes.byref(count))
            self.info(code, _PCRE2_INFO_NAMEENTRYSIZE, ctypes.byref(size))
            self.info(code, _PCRE2_INFO_NAMETABLE, ctypes.byref(table))
            return None, _names(table.value, count.value, size.value)
        finally:
            self.free(code)


class _Pcre1:
    def __init__(self) -> None:
        lib = _load("pcre", "libpcre.so.3")
        self.compile = lib.pcre_compile
        self.compile.restype = ctypes.c_void_p
        self.compile.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p),
                                 ctypes.POINTER(ctypes.c_int), ctypes.c_void_p]
        self.info = lib.pcre_fullinfo
        self.info.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
        # pcre_free is a function pointer variable, not a function.
        self.free = ctypes.CFUNCTYPE(None, ctypes.c_void_p).in_dll(lib, "pcre_free")

    def check(self, pattern: bytes) -> tuple[str | None, tuple[str, ...]]:
        error, offset = ctypes.c_char_p(), ctypes.c_int()
        code = self.compile(pattern, 0, ctypes.byref(error), ctypes.byref(offset), None)
        if not code:
            return f"{(error.value or b'?').decode(errors='replace')} at offset {offset.value}", ()
        try:
            count, size, table = ctypes.c_int(), ctypes.c_int(), ctypes.c_void_p()
            self.info(code, None, _PCRE_INFO_NAMECOUNT, ctypes.byref(count))
            self.info(code, None, _PCRE_INFO_NAMEENTRYSIZE, ctypes.byref(size))
            self.info(code, None, _PCRE_INFO_NAMETABLE, ctypes.byref(table))
            return None, _names(table.value, count.value, size.value)
        finally:
            self.free(code)


def _names(table: int | None, count: int, size: int) -> tuple[str, ...]:
    """Group names from a PCRE name table (each entry: 2-byte number, NUL-terminated name)."""
    if not table or not count:
        return ()
    raw = ctypes.string_at(table, count * size)
    return tuple(raw[i * size + 2:(i + 1) * size].split(b"\0", 1)[0].decode() for i in range(count))


def _load(name: str, soname: str) -> ctypes.CDLL:
    for candidate in (soname, ctypes.util.find_library(name)):
        if candidate:
            try:
                return ctypes.CDLL(candidate)
            except OSError:
                continue
    raise EngineMissing(f"the regex library {soname} of the data plane is not installed")


_engines: dict[str, object] = {}
_engines_lock = threading.Lock()
_FACTORIES = {NGINX: _Pcre2, LUA: _Pcre1}


def _engine(name: str):
    with _engines_lock:
        engine = _engines.get(name)
        if engine is None:
            engine = _engines[name] = _FACTORIES[name]()
        return engine


@functools.lru_cache(maxsize=8192)
def _check(name: str, pattern: str) -> tuple[str | None, tuple[str, ...]]:
    # A Python str may hold a NUL that C would cut the pattern at; callers
    # refuse control characters first, but say so here too.
    if "\0" in pattern:
        return "contains a NUL character", ()
    return _engine(name).check(pattern.encode("utf-8"))


def compile_error(engine: str, pattern: str) -> str | None:
    """None when ``engine`` compiles ``pattern``; else the engine's own message."""
    return _check(engine, pattern)[0]


def group_names(engine: str, pattern: str) -> tuple[str, ...]:
    """Named groups of a pattern ``engine`` compiles (empty if it does not)."""
    return _check(engine, pattern)[1]
