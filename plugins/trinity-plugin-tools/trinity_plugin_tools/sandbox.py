"""The ``python`` tool: a program run in a separate, limited process; what it prints comes back.

Each call starts ``python -I`` (isolated mode: no ``PYTHON*`` variables, no user site, the script's
folder not on ``sys.path``) in a fresh temporary folder, with an environment holding only locale and
thread-count variables (no ``PATH``, ``HOME`` or proxy settings), the program on stdin. Before the
program runs, the child process limits itself with ``resource.setrlimit`` (set in the child rather than
in a ``preexec_fn``, which is unsafe in a process with threads, as the explorer is):

* ``RLIMIT_AS`` (``memory_mb``): an allocation past it raises ``MemoryError`` in the program;
* ``RLIMIT_CPU`` (``cpu_s``): the kernel stops the process after that much CPU time;
* ``RLIMIT_FSIZE`` (16 MiB) and ``RLIMIT_CORE`` (0): no large files, no core dumps.

The parent stops the process group after ``timeout_s`` of wall-clock time, and after
``max_output_chars`` characters of output (stdout and stderr together). At most one sandbox per CPU core
runs at a time (the explorer's episodes call tools concurrently); the others wait for a slot.

**Network.** With ``network="auto"`` (the default) the process runs in a new, empty network namespace
(``unshare --net --map-root-user``) when the machine allows unprivileged user namespaces: it has no
interface but a down loopback, so no connection can be made, whatever the code does. Always, an audit
hook (``sys.addaudithook``) refuses socket creation, connections and name lookups, starting processes
(``subprocess``, ``os.system``, ``os.exec*``, ``os.fork``) and loading native libraries through
``ctypes``. Without the namespace the audit hook is the only barrier, and it is not a security boundary
(Python's documentation says so: a native extension module can still open a socket); it stops programs
that try by accident, not an adversary. ``network="namespace"`` refuses to run without the namespace.
Nothing isolates the file system beyond the temporary working folder: the program can read what the
user running the explorer can read.

A failure is an exception whose message is what the model sees: :class:`SandboxTimeout` (wall clock or
CPU time, a ``TimeoutError``) and :class:`SandboxError` (an exception in the program with its
traceback, a crash, too much output); the ``tools`` workflow turns both into tool error messages.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

__all__ = [
    "SandboxError",
    "SandboxLimits",
    "SandboxTimeout",
    "make_python_tool",
    "namespace_available",
    "python",
    "run_python",
]

_FILE_SIZE_LIMIT = 16 * 2**20
_SLOTS = threading.BoundedSemaphore(os.cpu_count() or 1)
"""Sandboxes running at once: one per core."""

_BOOT = r"""
import ast, resource, sys, traceback
memory, cpu, fsize = (int(v) for v in sys.argv[1:4])
del sys.argv[1:]
source = sys.stdin.read()
resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
BLOCKED = frozenset({
    "socket.__new__", "socket.connect", "socket.bind", "socket.getaddrinfo", "socket.gethostbyname",
    "socket.gethostbyaddr", "socket.sendto", "socket.sendmsg", "subprocess.Popen", "os.system",
    "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "pty.spawn", "ctypes.dlopen",
})
def refuse(event, args):
    if event in BLOCKED:
        raise PermissionError(f"{event} is not allowed in the sandbox (no network, no processes)")
sys.addaudithook(refuse)
namespace = {"__name__": "__main__"}
try:
    tree = ast.parse(source, "<code>")
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, "<code>", "exec"), namespace)
    if last is not None:
        value = eval(compile(ast.Expression(last.value), "<code>", "eval"), namespace)
        if value is not None:
            print(repr(value))
except SystemExit:
    raise
except BaseException as exc:
    frames = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
    traceback.print_exception(type(exc), exc, frames)
    sys.exit(1)
"""
"""What the child runs: read the program, limit itself, install the audit hook, run the program
(printing the value of a last expression, as a notebook cell does) and print a traceback without
this script's own frame."""

_ENV = {
    "LC_ALL": "C.UTF-8",
    "PYTHONIOENCODING": "utf-8",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


class SandboxTimeout(TimeoutError):
    """The program ran past its wall-clock or CPU-time limit and was stopped."""


class SandboxError(RuntimeError):
    """The program failed: an exception (its traceback in the message), a crash, or too much output."""


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one run of the ``python`` tool.

    Attributes:
        timeout_s: wall-clock seconds before the process is stopped.
        cpu_s: CPU seconds (``RLIMIT_CPU``).
        memory_mb: address space in MiB (``RLIMIT_AS``); Python itself needs about 30.
        max_output_chars: characters of output kept; more stops the program and is an error.
        network: ``auto`` (a network namespace when possible, else the audit hook alone),
            ``namespace`` (refuse to run without one) or ``audit`` (the audit hook alone).
    """

    timeout_s: float = 5.0
    cpu_s: int = 5
    memory_mb: int = 512
    max_output_chars: int = 2000
    network: Literal["auto", "namespace", "audit"] = "auto"


@functools.cache
def namespace_available() -> bool:
    """Whether ``unshare --net --map-root-user`` works here (unprivileged user namespaces allowed)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    try:
        done = subprocess.run(
            [unshare, "--net", "--map-root-user", sys.executable, "-I", "-c", "pass"],
            capture_output=True,
            timeout=30,
            env=_ENV,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _command(limits: SandboxLimits) -> list[str]:
    child = [
        sys.executable,
        "-I",
        "-c",
        _BOOT,
        str(limits.memory_mb * 2**20),
        str(limits.cpu_s),
        str(_FILE_SIZE_LIMIT),
    ]
    if limits.network == "audit":
        return child
    if namespace_available():
        return [str(shutil.which("unshare")), "--net", "--map-root-user", *child]
    if limits.network == "namespace":
        raise SandboxError(
            "the python sandbox is set to network='namespace', but unshare --net --map-root-user does not "
            "work on this machine (no unprivileged user namespaces); use network='auto' or 'audit'"
        )
    return child


class _Reader(threading.Thread):
    """Reads the process's output until EOF, keeping at most ``limit`` characters' worth of bytes; past
    that it stops the process (a program printing forever must not fill the explorer's memory)."""

    def __init__(self, process: subprocess.Popen[bytes], limit: int) -> None:
        super().__init__(name="sandbox-output", daemon=True)
        self.process, self.limit = process, limit
        self.data = bytearray()
        self.overflow = False

    def run(self) -> None:
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        while chunk := os.read(fd, 65536):
            self.data += chunk
            # A character is at most 4 bytes of UTF-8; the exact count is taken after decoding.
            if len(self.data) > 4 * self.limit + 4:
                self.overflow = True
                _stop(self.process)
                break

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def _stop(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # it has ended already
        os.killpg(process.pid, signal.SIGKILL)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def run_python(code: str, limits: SandboxLimits | None = None) -> str:
    """Run ``code`` in the sandbox; return what it printed (stdout and stderr in order).

    Raises:
        SandboxTimeout: it ran past ``timeout_s`` or ``cpu_s``.
        SandboxError: it raised (the traceback is in the message), crashed, or printed more than
            ``max_output_chars`` characters.
    """
    limits = limits or SandboxLimits()
    with _SLOTS, tempfile.TemporaryDirectory(prefix="trinity-sandbox-") as folder:
        process = subprocess.Popen(
            _command(limits),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=folder,
            env=_ENV,
            start_new_session=True,  # its own process group, stopped as a whole
            close_fds=True,
        )
        reader = _Reader(process, limits.max_output_chars)
        reader.start()
        assert process.stdin is not None
        try:
            process.stdin.write(code.encode("utf-8", errors="replace"))
            process.stdin.close()
        except BrokenPipeError:
            pass  # it ended before reading the program; its exit status says why
        timed_out = False
        try:
            process.wait(timeout=limits.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _stop(process)
            process.wait()
        reader.join()
    return _result(reader, process.returncode, timed_out, limits)


def _head(text: str, cap: int) -> str:
    return text if len(text) <= cap else f"{text[:cap]}\n... [{len(text) - cap} more characters cut]"


def _tail(text: str, cap: int) -> str:
    # A failing program's last lines (the exception) matter most: keep the end.
    return text if len(text) <= cap else f"[... {len(text) - cap} characters cut ...]\n{text[-cap:]}"


def _result(reader: _Reader, status: int, timed_out: bool, limits: SandboxLimits) -> str:
    output, cap = reader.text(), limits.max_output_chars
    if timed_out:
        raise SandboxTimeout(
            f"the program ran past the {limits.timeout_s:g} s wall-clock limit and was stopped; output so "
            f"far:\n{_head(output, cap)}"
        )
    if status == -signal.SIGXCPU:
        raise SandboxTimeout(f"the program used more than {limits.cpu_s} s of CPU time and was stopped")
    if reader.overflow:
        raise SandboxError(
            f"the program printed more than {cap} characters and was stopped; its output:\n"
            f"{_head(output, cap)}"
        )
    if status < 0:
        raise SandboxError(
            f"the program was killed by {_signal_name(-status)}; output:\n{_tail(output, cap)}"
        )
    if status != 0:
        raise SandboxError(f"the program failed (exit status {status}):\n{_tail(output, cap)}")
    if len(output) > cap:
        raise SandboxError(
            f"the program printed more than {cap} characters; its output:\n{_head(output, cap)}"
        )
    return output


def make_python_tool(limits: SandboxLimits | None = None, **overrides: object) -> Callable[[str], str]:
    """A ``python`` tool with other limits: ``make_python_tool(timeout_s=2, memory_mb=256)``; put it in a
    module of yours and name it in ``workflow_args.tools`` (``my_tools.python``)."""
    chosen = replace(limits or SandboxLimits(), **overrides)  # type: ignore[arg-type]
    if chosen.network == "namespace" and not namespace_available():
        raise ValueError(
            "network='namespace' needs unshare --net --map-root-user, which does not work on this machine; "
            "use network='auto' or 'audit'"
        )

    def python(code: str) -> str:
        """Run a Python program in a sandbox and return what it prints.

        The value of a last line that is an expression is printed too, as in a notebook. There is no
        network, and nothing is kept between calls.

        Args:
            code: The program, e.g. print(123 * 4567).
        """
        return run_python(code, chosen)

    return python


python = make_python_tool()
"""The ``python`` tool with the default :class:`SandboxLimits`."""
