"""The official archives (URL, published size and checksums, the folders each provides: docs/data.md), which
serves which task, the URL a run uses (``$LRA_DOWNLOAD_BASE``, ``--url``), and the download's error type."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

from lra.console import format_bytes
from lra.data.types import DataError

BASE_ENV = "LRA_DOWNLOAD_BASE"
CHUNK = 1 << 20


class DownloadError(DataError):
    """A failed download, verification or extraction; the message names the URL or path and the fix."""


def disk_full(path: Path, need: int | None = None) -> DownloadError:
    free = shutil.disk_usage(path.parent if not path.is_dir() else path).free
    what = f"needs {format_bytes(need)}, " if need else ""
    return DownloadError(
        f"no space left on the device of {path} ({what}{format_bytes(free)} free); to fix: free space "
        f"there or choose another data dir (--data_dir or LRA_DATA_DIR)"
    )


@dataclasses.dataclass(frozen=True)
class Place:
    """A folder an archive provides: final path, candidate places in the archive (first complete wins), entries."""

    final: str
    candidates: tuple[str, ...]
    required: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Archive:
    name: str
    url: str
    size: int | None  # published size in bytes; None: none published (the server's length is checked)
    md5: str | None
    sha256: str | None
    places: tuple[Place, ...]
    source: str  # where the size and checksums come from

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[-1]


_LISTOPS = Place(
    "lra_release/listops-1000",
    ("lra_release/lra_release/listops-1000", "lra_release/listops-1000", "listops-1000"),
    tuple(f"basic_{s}.tsv" for s in ("train", "val", "test")),
)
_AAN = Place(
    "lra_release/tsv_data",
    ("lra_release/lra_release/tsv_data", "lra_release/tsv_data", "tsv_data"),
    tuple(f"new_aan_pairs.{s}.tsv" for s in ("train", "eval", "test")),
)
_PATHFINDER = {
    side: Place(
        f"lra_release/pathfinder{side}",
        tuple(f"{prefix}pathfinder{side}" for prefix in ("lra_release/lra_release/", "lra_release/", "")),
        tuple(
            f"{setting}/metadata" for setting in ("curv_baseline", "curv_contour_length_9", "curv_contour_length_14")
        ),
    )
    for side in (32, 128)
}
_IMDB = Place("aclImdb", ("aclImdb",), ("train/pos", "train/neg", "test/pos", "test/neg"))
_CIFAR = Place(
    "cifar-10-batches-py", ("cifar-10-batches-py",), tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch",)
)

ARCHIVES: dict[str, Archive] = {
    "lra_release": Archive(
        name="lra_release",
        url="https://storage.googleapis.com/long-range-arena/lra_release.gz",
        size=None,
        md5=None,
        sha256=None,
        places=(_LISTOPS, _AAN),
        source="no size or checksum published (LRA's README gives none; about 7.7 GB); the length "
        "the server announces and the gzip CRC-32 are checked",
    ),
    "lra_release_pathfinder": Archive(
        name="lra_release_pathfinder",
        url="https://storage.googleapis.com/long-range-arena/lra_release.gz",
        size=None,
        md5=None,
        sha256=None,
        places=(_PATHFINDER[32], _PATHFINDER[128]),
        source="the LRA release again (see lra_release), its Pathfinder folders",
    ),
    "aclImdb": Archive(
        name="aclImdb",
        url="https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz",
        size=84_125_825,
        md5="7c2ac02c03563afcf9b574c7e56c153a",
        sha256="c40f74a18d3b61f90feba1e17730e0d38e8b97c05fde7008942e91923d1658fe",
        places=(_IMDB,),
        source="size and sha256: tensorflow-datasets url_checksums/imdb_reviews.txt; md5: PaddlePaddle's imdb dataset",
    ),
    "cifar10": Archive(
        name="cifar10",
        url="https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
        size=170_498_071,
        md5="c58f30108f718f92721af3b95e74349a",
        sha256="6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce",
        places=(_CIFAR,),
        source="md5: torchvision CIFAR10.tgz_md5; sha256: keras.datasets.cifar10 file_hash; size: "
        "the server's Content-Length in published download logs",
    ),
}
# task -> (archive, the folders the task reads)
TASK_ARCHIVE: dict[str, tuple[str, tuple[str, ...]]] = {
    "listops": ("lra_release", (_LISTOPS.final,)),
    "matching": ("lra_release", (_AAN.final,)),
    "text": ("aclImdb", (_IMDB.final,)),
    "image": ("cifar10", (_CIFAR.final,)),
    "pathfinder": ("lra_release_pathfinder", (_PATHFINDER[32].final,)),
    "pathx": ("lra_release_pathfinder", (_PATHFINDER[128].final,)),
}


def archive_url(archive: Archive, url: str | None = None) -> str:
    """``url`` if given, else ``$LRA_DOWNLOAD_BASE/<file name>`` if set, else the official URL."""
    if url:
        return url
    base = os.environ.get(BASE_ENV, "").strip()
    return f"{base.rstrip('/')}/{archive.filename}" if base else archive.url


def missing_entries(folder: Path, place: Place) -> list[str]:
    return [r for r in place.required if not (folder / r).exists()]
