"""The FUSE connection tuning the seed documents, applied identically to every FUSE peer.

The kernel defaults (max_background=12, congestion_threshold=9) cap how many reads a FUSE
filesystem has in flight, whatever the daemon asks for; the seed's user guide raises them after
every mount (the connection id changes each time). Doing it for every peer keeps the comparison
about the filesystems, not about who negotiated which kernel limit.
"""

from __future__ import annotations

import os
from pathlib import Path

from .shell import log, run

CONNECTIONS = Path("/sys/fs/fuse/connections")
MAX_BACKGROUND = 144
CONGESTION_THRESHOLD = 108


def _fusectl_mounted() -> bool:
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[1] == str(CONNECTIONS) and fields[2] == "fusectl":
            return True
    return False


class FuseControl:
    def __init__(self) -> None:
        self.mounted_by_us = False

    def ensure(self) -> None:
        """The connections directory is empty until fusectl is mounted on it."""
        if not _fusectl_mounted():
            run(["mount", "-t", "fusectl", "none", str(CONNECTIONS)])
            self.mounted_by_us = True
            log(f"mounted fusectl on {CONNECTIONS}")

    def release(self) -> None:
        if self.mounted_by_us:
            run(["umount", str(CONNECTIONS)], check=False)
            self.mounted_by_us = False

    @staticmethod
    def connection_of(mountpoint: Path) -> Path:
        """The control directory is named after the kernel's dev_t of the mount (MAJOR << 20 | MINOR),
        which differs from stat's userspace encoding once the minor exceeds 255."""
        st = os.stat(mountpoint)
        return CONNECTIONS / str((os.major(st.st_dev) << 20) | os.minor(st.st_dev))

    def tune(self, mountpoint: Path) -> dict[str, int]:
        """Applies the tuning to `mountpoint`'s connection; returns the values read back."""
        conn = self.connection_of(mountpoint)
        if not conn.is_dir():
            raise RuntimeError(f"no FUSE connection {conn} for {mountpoint}")
        (conn / "max_background").write_text(f"{MAX_BACKGROUND}\n")
        (conn / "congestion_threshold").write_text(f"{CONGESTION_THRESHOLD}\n")
        return {
            "connection": int(conn.name),
            "max_background": int((conn / "max_background").read_text()),
            "congestion_threshold": int((conn / "congestion_threshold").read_text()),
        }
