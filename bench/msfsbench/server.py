"""The S3 server every peer reads from: garage on 127.0.0.1, started by scripts/local-s3.sh.

The harness never re-implements the server setup; it only picks free ports, starts the script in
its own temp dir, reads the credentials the script writes, and stops it by its PID.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
from pathlib import Path

from .install import REPO
from .shell import log, pid_alive, run, version_of, wait_pid_gone

SCRIPT = REPO / "scripts" / "local-s3.sh"
HOST = "127.0.0.1"  # the only address the harness ever talks to


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port_triple() -> int:
    """A port P with P, P+1, P+2 free: local-s3.sh puts S3 on P, RPC on P+1, admin on P+2."""
    for _ in range(200):
        port = random.randrange(20000, 60000)
        if all(_port_free(port + i) for i in range(3)):
            return port
    raise RuntimeError("no three consecutive free ports on 127.0.0.1")


class S3Server:
    def __init__(self, state_dir: Path, bucket: str):
        self.state_dir = state_dir
        self.bucket = bucket
        self.port = 0
        self.env: dict[str, str] = {}
        self.pid: int | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> None:
        self.port = free_port_triple()
        env = {**os.environ, "MSFS_S3_PORT": str(self.port)}
        pid_file = self.state_dir / "garage.pid"
        try:
            run(["bash", str(SCRIPT), "start", str(self.state_dir), self.bucket], env=env, timeout=120)
        finally:
            # Known even when the script failed half-way, so stop() can still end the server.
            if pid_file.exists():
                self.pid = int(pid_file.read_text().strip())
        self.env = self._read_env(self.state_dir / "env")
        if self.env.get("AWS_ENDPOINT") != self.endpoint:
            raise RuntimeError(f"local-s3.sh reports {self.env.get('AWS_ENDPOINT')}, expected {self.endpoint}")
        log(f"S3 server (garage) on {self.endpoint}, pid {self.pid}")

    @staticmethod
    def _read_env(path: Path) -> dict[str, str]:
        out = {}
        for line in path.read_text().splitlines():
            if line.startswith("export ") and "=" in line:
                key, value = line[len("export "):].split("=", 1)
                out[key] = value
        return out

    def stop(self) -> None:
        if self.pid is None:
            return
        run(["bash", str(SCRIPT), "stop", str(self.state_dir)], check=False, timeout=30)
        if pid_alive(self.pid):  # the script gives up after 5 s; make sure
            os.kill(self.pid, signal.SIGKILL)
            wait_pid_gone(self.pid, 5)
        log(f"S3 server stopped (pid {self.pid})")
        self.pid = None

    @staticmethod
    def version() -> str:
        """The same binary local-s3.sh picks: $GARAGE_BIN, garage on PATH, or cargo's bin dir."""
        cargo_garage = Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo")) / "bin" / "garage"
        binary = os.environ.get("GARAGE_BIN") or shutil.which("garage") or str(cargo_garage)
        return version_of([binary, "--version"])
