"""The python sandbox: output, the last expression, timeouts (wall clock and CPU), the memory limit, the
output cap, exception text, no network, no processes, an empty environment, a fresh folder per call."""

from __future__ import annotations

import pytest
from trinity_plugin_tools import (
    SandboxError,
    SandboxLimits,
    SandboxTimeout,
    make_python_tool,
    python,
    run_python,
)
from trinity_plugin_tools.sandbox import namespace_available
from trinity_plugin_tools.toolbox import load_tool

QUICK = SandboxLimits(timeout_s=2, cpu_s=1, memory_mb=256, max_output_chars=100)


def test_it_returns_what_the_program_prints_and_the_last_expression() -> None:
    assert run_python("print(123 * 4567)\nx = 2\nx ** 10") == "561741\n1024\n"
    assert run_python("import sys\nprint('err', file=sys.stderr)\nprint('out')") == "err\nout\n"
    assert run_python("None") == ""


def test_the_exception_text_reaches_the_model() -> None:
    code = "def f(x):\n    return 1 / x\n\nf(0)"
    with pytest.raises(SandboxError) as info:
        run_python(code)
    message = str(info.value)
    assert message.startswith("the program failed (exit status 1):\nTraceback (most recent call last):")
    assert 'File "<code>", line 4, in <module>' in message
    assert message.endswith("ZeroDivisionError: division by zero\n")
    with pytest.raises(SandboxError) as info:
        run_python(code, QUICK)  # 100 characters: the end of the traceback is kept, with the exception
    assert str(info.value).startswith("the program failed (exit status 1):\n[... 38 characters cut ...]\n")
    assert str(info.value).endswith("line 2, in f\nZeroDivisionError: division by zero\n")


def test_a_program_past_the_wall_clock_is_stopped() -> None:
    with pytest.raises(
        SandboxTimeout, match=r"ran past the 2 s wall-clock limit and was stopped; output so far:\nstart"
    ):
        run_python("import time\nprint('start', flush=True)\ntime.sleep(60)", QUICK)


def test_a_program_past_its_cpu_time_is_stopped() -> None:
    """A busy loop with a wall clock far away: the CPU-time limit (RLIMIT_CPU) stops it."""
    with pytest.raises(SandboxTimeout, match="used more than 1 s of CPU time"):
        run_python("while True: pass", SandboxLimits(timeout_s=120, cpu_s=1))


def test_an_allocation_past_the_memory_limit_is_a_memory_error() -> None:
    with pytest.raises(SandboxError, match="MemoryError"):
        run_python("block = bytearray(512 * 2**20)", QUICK)
    assert run_python("block = bytearray(64 * 2**20)\nprint(len(block))", QUICK) == f"{64 * 2**20}\n"


def test_output_past_the_cap_stops_the_program_and_shows_its_head() -> None:
    with pytest.raises(SandboxError) as info:
        run_python("while True: print('y' * 50)", QUICK)
    message = str(info.value)
    assert message.startswith("the program printed more than 100 characters and was stopped; its output:\n")
    head = message.split("its output:\n", 1)[1].split("\n... [", 1)[0]
    assert head == "y" * 50 + "\n" + "y" * 49  # the first 100 characters
    assert "more characters cut]" in message
    assert run_python("print('z' * 99)", QUICK) == "z" * 99 + "\n"  # 100 characters with the newline


def test_sockets_and_processes_are_refused() -> None:
    for code in (
        "import socket\nsocket.socket()",
        "import socket\nsocket.getaddrinfo('example.com', 80)",
        "import subprocess\nsubprocess.run(['true'])",
        "import os\nos.system('true')",
    ):
        with pytest.raises(SandboxError, match="is not allowed in the sandbox"):
            run_python(code, SandboxLimits(network="audit"))


@pytest.mark.skipif(not namespace_available(), reason="no unprivileged user namespaces on this machine")
def test_in_the_namespace_there_is_no_network_interface_but_loopback() -> None:
    """Below the audit hook: the process's network namespace has the loopback device alone (down), so a
    native extension that opens a socket could not reach anything either."""
    code = "print([line.split(':')[0].strip() for line in open('/proc/net/dev').readlines()[2:]])"
    assert run_python(code, SandboxLimits(network="namespace")) == "['lo']\n"
    with pytest.raises(SandboxError, match=r"socket\.__new__ is not allowed"):
        run_python("import _socket\n_socket.socket()", SandboxLimits(network="namespace"))


def test_the_environment_is_empty_and_each_call_has_a_fresh_folder() -> None:
    keys = run_python("import os\nprint(sorted(os.environ))")
    assert (
        keys
        == "['LC_ALL', 'MKL_NUM_THREADS', 'OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS', 'PYTHONIOENCODING']\n"
    )
    run_python("open('note.txt', 'w').write('kept?')")
    assert run_python("import os\nprint(os.listdir('.'))") == "[]\n"


def test_the_tool_follows_trls_convention() -> None:
    tool = load_tool("trinity_plugin_tools.python")
    assert tool.name == "python"
    assert tool.schema["function"]["parameters"]["required"] == ["code"]
    assert python("print(6 * 7)") == "42\n"
    quick = make_python_tool(timeout_s=1)
    assert quick.__name__ == "python"
    with pytest.raises(SandboxTimeout):
        quick("import time\ntime.sleep(5)")


def test_a_namespace_that_cannot_be_had_is_refused_up_front(monkeypatch: pytest.MonkeyPatch) -> None:
    import trinity_plugin_tools.sandbox as sandbox

    monkeypatch.setattr(sandbox, "namespace_available", lambda: False)
    with pytest.raises(ValueError, match="network='namespace' needs unshare"):
        make_python_tool(network="namespace")
    with pytest.raises(SandboxError, match="does not work on this machine"):
        run_python("1", SandboxLimits(network="namespace"))
