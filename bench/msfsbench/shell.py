"""Running commands and touching the kernel: the only module that calls subprocess directly."""

from __future__ import annotations

import os
import queue
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

VERBOSE = False


def log(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def debug(message: str) -> None:
    if VERBOSE:
        log(message)


class CommandError(RuntimeError):
    pass


def run(
    cmd: Sequence[str | os.PathLike[str]],
    *,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    timeout: float | None = None,
    cwd: Path | None = None,
    quiet: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Runs `cmd` to completion with captured output; on failure raises with its stderr tail."""
    args = [str(c) for c in cmd]
    debug("$ " + shlex.join(args))
    proc = subprocess.run(
        args,
        env=dict(env) if env is not None else None,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    if check and proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise CommandError(f"{shlex.join(args)} exited {proc.returncode}:\n{tail}")
    if not quiet and proc.returncode != 0:
        debug(f"exit {proc.returncode}: {proc.stderr.strip()[-500:]}")
    return proc


class CommandTimeout(CommandError):
    pass


def run_killable(cmd: Sequence[str | os.PathLike[str]], *, timeout: float, cwd: Path | None = None) -> str:
    """Runs `cmd` and returns its stdout; past `timeout` kills it and raises without waiting for it
    to exit: a process blocked in a FUSE flush does not die until the daemon answers (the caller
    recovers by remounting, which ends that wait)."""
    args = [str(c) for c in cmd]
    debug("$ " + shlex.join(args))
    proc = subprocess.Popen(args, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise _abandoned(proc, args, timeout) from None
    if proc.returncode != 0:
        raise _failed(args, f"exited {proc.returncode}", err)
    return out


_ABANDONED: list[subprocess.Popen[str]] = []


def _abandoned(proc: subprocess.Popen[str], args: list[str], timeout: float) -> CommandTimeout:
    """Kills `proc` without waiting for it (reaped when the interpreter exits) and says so."""
    proc.kill()
    _ABANDONED.append(proc)
    return CommandTimeout(f"{shlex.join(args[:4])} ... still running after {timeout:.0f} s; killed")


def _failed(args: list[str], what: str, stderr: str) -> CommandError:
    tail = "\n".join(stderr.strip().splitlines()[-15:])
    return CommandError(f"{shlex.join(args)} {what}:\n{tail}")


def run_paused(
    cmd: Sequence[str | os.PathLike[str]],
    *,
    timeout: float,
    at_pause: Callable[[str], None],
    cwd: Path | None = None,
) -> str:
    """Runs `cmd`, a child that prints one line when it reaches its pause and then waits for a
    line on its stdin: calls `at_pause` with that line while the child waits, lets it go on, and
    returns the rest of its stdout. Past `timeout` (for the whole run) kills it as
    `run_killable` does; a child that exits without pausing is an error."""
    args = [str(c) for c in cmd]
    debug("$ " + shlex.join(args))
    proc = subprocess.Popen(args, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    # Threads drain both pipes, so a full stderr cannot block the child and a silent one cannot
    # block the harness past the deadline.
    lines: queue.Queue[str | None] = queue.Queue()
    stderr: list[str] = []

    def pump_stdout() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    def pump_stderr() -> None:
        assert proc.stderr is not None
        stderr.extend(proc.stderr)

    pumps = [threading.Thread(target=pump, daemon=True) for pump in (pump_stdout, pump_stderr)]
    for pump in pumps:
        pump.start()
    deadline = time.monotonic() + timeout

    def next_line() -> str | None:
        try:
            return lines.get(timeout=max(deadline - time.monotonic(), 0.01))
        except queue.Empty:
            raise _abandoned(proc, args, timeout) from None

    def exited() -> int:
        try:
            return proc.wait(timeout=max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            raise _abandoned(proc, args, timeout) from None

    def failed(what: str) -> CommandError:
        pumps[1].join(timeout=1.0)  # the last of its stderr
        return _failed(args, what, "".join(stderr))

    pause = next_line()
    if pause is None:
        raise failed(f"exited {exited()} before its pause")
    try:
        at_pause(pause)
    except BaseException:
        _abandoned(proc, args, timeout)  # it would wait on its stdin for ever
        raise
    assert proc.stdin is not None
    try:
        proc.stdin.write("\n")
        proc.stdin.close()
    except BrokenPipeError:
        pass  # it is gone: its exit status says why, below
    rest = []
    while (line := next_line()) is not None:
        rest.append(line)
    if exited() != 0:
        raise failed(f"exited {proc.returncode}")
    return "".join(rest)


def run_streaming(cmd: Sequence[str | os.PathLike[str]], *, cwd: Path | None = None) -> None:
    """Runs a long command (a build, an install) with its output going to the terminal."""
    args = [str(c) for c in cmd]
    log("$ " + shlex.join(args))
    proc = subprocess.run(args, cwd=cwd, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise CommandError(f"{shlex.join(args)} exited {proc.returncode}")


def timed(cmd: Sequence[str | os.PathLike[str]], *, timeout: float | None = None) -> float:
    """Wall-clock seconds of one command, output discarded (how `ls`/`find` are measured)."""
    args = [str(c) for c in cmd]
    start = time.perf_counter()
    proc = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=timeout)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise CommandError(f"{shlex.join(args)} exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    return elapsed


@dataclass(frozen=True)
class Measured:
    """One finished process: wall-clock seconds and what the kernel counted for it."""

    seconds: float
    max_rss_bytes: int  # peak resident set (getrusage ru_maxrss: the same as VmHWM at exit)
    user_seconds: float
    system_seconds: float


def run_measured(
    cmd: Sequence[str | os.PathLike[str]], *, log: Path, timeout: float, env: Mapping[str, str] | None = None
) -> Measured:
    """Runs `cmd` with its output into `log`, timing it and reading its resource usage as it is
    reaped (wait4); past `timeout`, or on Ctrl-C, kills it. Fails with the log's tail when it fails."""
    args = [str(c) for c in cmd]
    debug("$ " + shlex.join(args))
    with open(log, "wb") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(args, env=dict(env) if env is not None else None, stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = start + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                raise CommandTimeout(f"{shlex.join(args[:4])} ... still running after {timeout:.0f} s; killed")
            time.sleep(0.01)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    elapsed = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").strip().splitlines()[-15:])
        raise CommandError(f"{shlex.join(args)} exited {proc.returncode}:\n{tail}")
    return Measured(elapsed, usage.ru_maxrss * 1024, usage.ru_utime, usage.ru_stime)


def vm_hwm_bytes(pid: int) -> int:
    """Peak resident set of a running process so far (VmHWM in /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmHWM for pid {pid}")


def drop_caches() -> None:
    """Empties the page, dentry and inode caches, so a cold run starts from the disk and the server."""
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def version_of(cmd: Sequence[str]) -> str:
    """First line a tool prints about its version, or "not installed"."""
    try:
        proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return "not installed"
    text = (proc.stdout or proc.stderr).strip()
    return text.splitlines()[0] if text else "unknown"


def pid_alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists() and "zombie" not in _proc_state(pid)


def _proc_state(pid: int) -> str:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("State:"):
                return line.lower()
    except OSError:
        pass
    return ""


def wait_pid_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return not pid_alive(pid)
