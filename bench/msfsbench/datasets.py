"""The data every peer reads: seeded once into the bucket, identical for all.

Objects hold pseudo-random bytes (incompressible, so the server cannot shortcut them). Keys are
laid out so that each data set is one directory of the mount.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .rawclient import RawClient
from .scale import KiB, Scale, human_bytes
from .shell import log


@dataclass(frozen=True)
class Dataset:
    name: str
    prefix: str  # key prefix = directory under the mount root; ends with "/"
    keys: tuple[str, ...]
    size: int  # bytes per object

    @property
    def total_bytes(self) -> int:
        return self.size * len(self.keys)

    @property
    def first_key(self) -> str:
        return self.keys[0]

    def paths(self, root: Path) -> list[Path]:
        return [root / key for key in self.keys]

    def describe(self) -> str:
        return f"{len(self.keys)} x {human_bytes(self.size)} under {self.prefix}"


@dataclass(frozen=True)
class Datasets:
    large: Dataset  # one big object: sequential, random, time to first byte
    small: Dataset  # 1,024 x 1 MiB: small-file reads
    many: Dataset  # 1,000 x 64 KiB: warm whole-file reads and the `ls` directory
    tree: Dataset  # 9x9x9 directories with one file each: `find`

    def all(self) -> list[Dataset]:
        return [self.large, self.small, self.many, self.tree]

    def by_name(self, name: str) -> Dataset:
        return {d.name: d for d in self.all()}[name]


def numbered(prefix: str, count: int) -> tuple[str, ...]:
    return tuple(f"{prefix}f{i:05d}" for i in range(count))


def tree_keys(fanout: int) -> tuple[str, ...]:
    r = range(1, fanout + 1)
    return tuple(f"tree/d{a}/d{b}/d{c}/file" for a in r for b in r for c in r)


def for_scale(scale: Scale) -> Datasets:
    return Datasets(
        large=Dataset("large", "large/", ("large/object",), scale.large_size),
        small=Dataset("small", "small/", numbered("small/", scale.small_count), scale.small_size),
        many=Dataset("many", "many/", numbered("many/", scale.many_count), scale.many_size),
        tree=Dataset("tree", "tree/", tree_keys(scale.tree_fanout), 1 * KiB),
    )


def seed(raw: RawClient, datasets: Datasets) -> dict[str, float]:
    """Uploads every data set; returns seconds per set (recorded, not reported)."""
    seconds = {}
    for ds in datasets.all():
        # Big objects go as one multipart upload with parallel parts; small ones many at a time.
        concurrency = 4 if ds.size > 64 * 1024 * 1024 else 32
        out = raw.seed(list(ds.keys), ds.size, concurrency)
        seconds[ds.name] = out["seconds"]
        log(f"seeded {ds.describe()} in {out['seconds']:.1f} s")
    return seconds
