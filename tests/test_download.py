"""``python -m lra.data download``: fixture archives in the real formats, served on 127.0.0.1."""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import http.server
import io
import os
import socket
import tarfile
import threading
import time
from pathlib import Path

import pytest

from lra.data import download, http_fetch, prepare, tar_extract
from lra.data.types import DataError
from test_data_tasks import CIFAR_BATCHES, write_aan, write_aclimdb, write_cifar_pickles
from test_listops import RELEASE_LINES

# ----------------------------------------------------------------------------------------- fixtures


def tar_gz(folder: Path, names: list[str], extra: list[tuple[str, bytes]] = ()) -> bytes:
    """A .tar.gz of ``folder/<name>`` for each name (recursively), plus raw (member name, bytes) files."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name in names:
            tar.add(folder / name, arcname=name)
        for name, data in extra:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def lra_release_tree(root: Path) -> None:
    """The release's nesting: lra_release/lra_release/{listops-1000,tsv_data,pathfinder32}."""
    inner = root / "lra_release" / "lra_release"
    write_aan(root, nested=True)
    folder = inner / "listops-1000"
    folder.mkdir(parents=True)
    for split, file in (("train", "basic_train.tsv"), ("validation", "basic_val.tsv"), ("test", "basic_test.tsv")):
        (folder / file).write_text("".join(f"{line}\n" for line in ["Source\tTarget", *RELEASE_LINES[split]]))
    (inner / "pathfinder32").mkdir()
    (inner / "pathfinder32" / "unused.png").write_bytes(b"not extracted")


@pytest.fixture(scope="module")
def archives(tmp_path_factory) -> dict[str, bytes]:
    """file name -> bytes of the three archives, built once per module."""
    src = tmp_path_factory.mktemp("src")
    write_aclimdb(src)
    write_cifar_pickles(src)
    lra_release_tree(src)
    return {
        "aclImdb_v1.tar.gz": tar_gz(src, ["aclImdb"]),
        "cifar-10-python.tar.gz": tar_gz(src, ["cifar-10-batches-py"]),
        "lra_release.gz": tar_gz(src, ["lra_release"]),
    }


class Server:
    """An HTTP server on 127.0.0.1 in a thread; supports ``Range: bytes=N-`` unless told not to."""

    def __init__(self, files: dict[str, bytes]):
        self.files = dict(files)
        self.status: int | None = None  # answer every GET with this error status
        self.ignore_range = False
        self.cut_after: int | None = None  # announce the full length, send this many bytes, hang up
        self.requests: list[tuple[str, str | None]] = []  # (path, Range header)
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            timeout = 10

            def log_message(self, *args):
                pass

            def do_GET(self):
                server.requests.append((self.path, self.headers.get("Range")))
                data = server.files.get(self.path.lstrip("/"))
                if server.status or data is None:
                    self.send_error(server.status or 404)
                    return
                start = 0
                if self.headers.get("Range") and not server.ignore_range:
                    start = int(self.headers["Range"].removeprefix("bytes=").rstrip("-"))
                    if start >= len(data):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(data)}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(data) - start))
                self.end_headers()
                body = data[start:]
                self.wfile.write(body if server.cut_after is None else body[: server.cut_after])

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def served(archives, monkeypatch):
    """The fixture archives served locally, the table's sizes/checksums set to theirs, and
    $LRA_DOWNLOAD_BASE pointing at the server."""
    server = Server(archives)
    table = {}
    for name, archive in download.ARCHIVES.items():
        data = archives[archive.filename]
        size = None if archive.size is None else len(data)  # the release: no published size, as upstream
        md5 = hashlib.md5(data).hexdigest() if archive.md5 else None
        sha256 = hashlib.sha256(data).hexdigest() if archive.sha256 else None
        table[name] = dataclasses.replace(archive, size=size, md5=md5, sha256=sha256)
    monkeypatch.setattr(download, "ARCHIVES", table)
    monkeypatch.setenv(download.BASE_ENV, server.base)
    yield server
    server.close()


def run_cli(*args: str) -> int:
    return prepare.main(["download", *args])


def leftovers(root: Path) -> list[str]:
    """Temporary extraction folders and partial downloads left in the data dir."""
    return (
        sorted(p.name for p in root.iterdir() if p.name.startswith(".lra-extract"))
        + sorted(p.name for p in (root / "downloads").glob("*.part"))
        if root.exists()
        else []
    )


# ----------------------------------------------------------------------------------------- tests


def test_table_is_complete():
    for name, finals in download.TASK_ARCHIVE.values():
        archive = download.ARCHIVES[name]
        assert archive.url.startswith("https://") and archive.filename in archive.url
        assert set(finals) <= {p.final for p in archive.places}
        assert archive.source
    assert download.ARCHIVES["aclImdb"].size == 84_125_825 and download.ARCHIVES["cifar10"].size == 170_498_071


@pytest.mark.parametrize(
    "task, files",
    [
        ("text", ["aclImdb/train/pos/000_9.txt", "aclImdb/test/neg/002_2.txt", "aclImdb/train/unsup/0_0.txt"]),
        ("image", ["cifar-10-batches-py/data_batch_5", "cifar-10-batches-py/test_batch"]),
        ("listops", ["lra_release/listops-1000/basic_val.tsv", "lra_release/tsv_data/new_aan_pairs.eval.tsv"]),
    ],
)
def test_download_extracts_and_prepares(tmp_path, served, capsys, task, files):
    root = tmp_path / "data"
    assert run_cli(task, "--data_dir", str(root)) == 0
    for f in files:
        assert (root / f).is_file(), f
    assert not (root / "lra_release" / "lra_release").exists() and not list(root.rglob("pathfinder*"))
    assert leftovers(root) == [] and not (root / "downloads" / "x").exists()
    assert list((root / "downloads").iterdir()) == []  # archive deleted after extraction
    out, err = capsys.readouterr()
    assert f"task {task}:" in out and "cache:" in out  # prepare ran and summarised
    name = download.ARCHIVES[download.TASK_ARCHIVE[task][0]].filename
    assert f"verified {name}" in err and f"downloading {name}: " in err and "(100%)" in err  # plain lines, no tty
    if task == "image":
        test_line = next(line for line in out.splitlines() if line.startswith("test "))
        assert test_line.split()[1] == str(len(CIFAR_BATCHES["test_batch"][1]))
    # a second run finds the folders and downloads nothing; prepare alone reads them too
    served.requests.clear()
    assert run_cli(task, "--data_dir", str(root), "--no_prepare") == 0
    assert served.requests == []
    assert prepare.main(["prepare", task, "--data_dir", str(root), "--no_download"]) == 0


def test_matching_after_listops_reuses_the_release(tmp_path, served):
    root = tmp_path / "data"
    assert run_cli("listops", "--data_dir", str(root), "--no_prepare", "--keep_archive") == 0
    assert (root / "downloads" / "lra_release.gz").is_file()
    served.requests.clear()
    assert run_cli("matching", "--data_dir", str(root), "--max_len", "64") == 0
    assert served.requests == []  # tsv_data came with the same archive


def test_resume_sends_range_and_verifies(tmp_path, served, archives, capsys):
    root = tmp_path / "data"
    data = archives["aclImdb_v1.tar.gz"]
    served.cut_after = len(data) // 3  # the first attempt is cut off
    assert run_cli("text", "--data_dir", str(root), "--no_prepare") == 2
    err = capsys.readouterr().err
    part = root / "downloads" / "aclImdb_v1.tar.gz.part"
    assert "error: download of " in err and "resumes from" in err and str(part) in err
    assert part.read_bytes() == data[: len(data) // 3] and not (root / "aclImdb").exists()
    served.cut_after = None
    served.requests.clear()
    assert run_cli("text", "--data_dir", str(root), "--no_prepare") == 0
    assert served.requests == [("/aclImdb_v1.tar.gz", f"bytes={len(data) // 3}-")]
    assert "resuming aclImdb_v1.tar.gz" in capsys.readouterr().err
    assert (root / "aclImdb" / "train" / "pos" / "000_9.txt").is_file() and leftovers(root) == []


def test_resume_from_a_partial_file(tmp_path, served, archives):
    root = tmp_path / "data"
    data = archives["cifar-10-python.tar.gz"]
    (root / "downloads").mkdir(parents=True)
    (root / "downloads" / "cifar-10-python.tar.gz.part").write_bytes(data[:1000])
    assert run_cli("image", "--data_dir", str(root), "--no_prepare") == 0
    assert served.requests == [("/cifar-10-python.tar.gz", "bytes=1000-")]
    assert (root / "cifar-10-batches-py" / "data_batch_1").is_file()


def test_server_ignoring_range_restarts_cleanly(tmp_path, served, archives, capsys):
    root = tmp_path / "data"
    (root / "downloads").mkdir(parents=True)
    (root / "downloads" / "lra_release.gz.part").write_bytes(b"garbage that a restart must discard")
    served.ignore_range = True
    assert run_cli("listops", "--data_dir", str(root)) == 0
    assert served.requests[0][1] == "bytes=35-"
    assert "ignored the resume request" in capsys.readouterr().err
    assert (root / "lra_release" / "listops-1000" / "basic_train.tsv").is_file() and leftovers(root) == []


def test_checksum_mismatch_is_an_error_and_extracts_nothing(tmp_path, served, monkeypatch, capsys):
    root = tmp_path / "data"
    table = dict(download.ARCHIVES)
    table["aclImdb"] = dataclasses.replace(table["aclImdb"], sha256="0" * 64)
    monkeypatch.setattr(download, "ARCHIVES", table)
    assert run_cli("text", "--data_dir", str(root)) == 2
    err = capsys.readouterr().err
    archive = root / "downloads" / "aclImdb_v1.tar.gz"
    assert err.count("error:") == 1 and f"corrupt download {archive}: sha256" in err and "to fix" in err
    assert (root / "downloads" / "aclImdb_v1.tar.gz.corrupt").is_file() and not archive.exists()
    assert not (root / "aclImdb").exists() and leftovers(root) == []


def test_truncated_archive_is_an_error_and_extracts_nothing(tmp_path, served, archives, capsys):
    root = tmp_path / "data"
    name = "lra_release.gz"  # no published size or checksum: the gzip stream itself catches it
    served.files[name] = archives[name][: len(archives[name]) * 2 // 3]
    assert run_cli("listops", "--data_dir", str(root)) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and f"corrupt archive {root / 'downloads' / name}" in err
    assert (root / "downloads" / f"{name}.corrupt").is_file()
    assert not (root / "lra_release").exists() and leftovers(root) == []


def test_wrong_length_from_a_mirror_is_an_error(tmp_path, served, capsys):
    served.files["aclImdb_v1.tar.gz"] += b"x"
    assert run_cli("text", "--data_dir", str(tmp_path)) == 2
    err = capsys.readouterr().err
    assert "serves" in err and "published size" in err and not (tmp_path / "aclImdb").exists()


@pytest.mark.parametrize("status", [404, 500])
def test_server_error_names_the_url(tmp_path, served, capsys, status):
    served.status = status
    url = f"{served.base}/cifar-10-python.tar.gz"
    assert run_cli("image", "--data_dir", str(tmp_path)) == 2
    lines = capsys.readouterr().err.splitlines()
    errors = [line for line in lines if not line.startswith("lra.data: ")]  # the rest is progress
    assert len(errors) == 1 and errors[0].startswith(f"error: HTTP {status} ") and url in errors[0]
    assert "to fix" in errors[0]
    assert not (tmp_path / "cifar-10-batches-py").exists() and leftovers(tmp_path) == []


def test_url_option_overrides_the_base(tmp_path, served, monkeypatch, capsys):
    monkeypatch.setenv(download.BASE_ENV, "http://127.0.0.1:9/nowhere")  # would fail
    url = f"{served.base}/aclImdb_v1.tar.gz"
    assert run_cli("text", "--data_dir", str(tmp_path), "--url", url, "--no_prepare") == 0
    assert download.archive_url(download.ARCHIVES["aclImdb"]) == "http://127.0.0.1:9/nowhere/aclImdb_v1.tar.gz"
    monkeypatch.delenv(download.BASE_ENV)
    assert download.archive_url(download.ARCHIVES["aclImdb"]).startswith("https://ai.stanford.edu/")


@pytest.mark.parametrize("member", ["../evil.txt", "aclImdb/../../evil.txt", "/tmp/evil.txt"])
def test_member_escaping_the_folder_is_refused(tmp_path, served, monkeypatch, capsys, member):
    src = tmp_path / "src"
    write_aclimdb(src)
    served.files["aclImdb_v1.tar.gz"] = tar_gz(src, ["aclImdb"], extra=[(member, b"owned")])
    table = dict(download.ARCHIVES)
    table["aclImdb"] = dataclasses.replace(table["aclImdb"], size=None, md5=None, sha256=None)
    monkeypatch.setattr(download, "ARCHIVES", table)
    root = tmp_path / "data"
    assert run_cli("text", "--data_dir", str(root)) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "refused archive" in err and repr(member) in err
    assert not (root / "aclImdb").exists() and leftovers(root) == []
    assert not list(tmp_path.rglob("evil.txt")) and not Path("/tmp/evil.txt").exists()


def test_link_member_is_refused_and_nothing_is_written_through_it(tmp_path, served, monkeypatch, capsys):
    """A symlink inside a wanted folder, then a file under it: pooch's Untar (Python < 3.12) writes that
    file outside its folder; ours refuses the archive (lra/data/tar_extract.py)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        link = tarfile.TarInfo("aclImdb/link")
        link.type, link.linkname = tarfile.SYMTYPE, str(outside)
        tar.addfile(link)
        evil = tarfile.TarInfo("aclImdb/link/evil.txt")
        evil.size = 5
        tar.addfile(evil, io.BytesIO(b"owned"))
    served.files["aclImdb_v1.tar.gz"] = buf.getvalue()
    table = dict(download.ARCHIVES)
    table["aclImdb"] = dataclasses.replace(table["aclImdb"], size=None, md5=None, sha256=None)
    monkeypatch.setattr(download, "ARCHIVES", table)
    root = tmp_path / "data"
    assert run_cli("text", "--data_dir", str(root)) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "refused archive" in err and "is a link or special file" in err
    assert list(outside.iterdir()) == [] and not (root / "aclImdb").exists() and leftovers(root) == []


def test_a_part_that_is_the_whole_file_is_taken_on_416(tmp_path, served, archives, capsys):
    """No published size (the release): the server answers the resume of a complete part with 416
    ``bytes */<length>``; the part is the file, nothing is downloaded again."""
    root = tmp_path / "data"
    (root / "downloads").mkdir(parents=True)
    data = archives["lra_release.gz"]
    (root / "downloads" / "lra_release.gz.part").write_bytes(data)
    assert run_cli("listops", "--data_dir", str(root), "--no_prepare") == 0
    assert served.requests == [("/lra_release.gz", f"bytes={len(data)}-")]
    assert (root / "lra_release" / "listops-1000" / "basic_train.tsv").is_file() and leftovers(root) == []


def test_no_server_is_one_line_naming_the_url(tmp_path, served, capsys):
    url = "http://127.0.0.1:9/aclImdb_v1.tar.gz"  # the discard port: nothing listens
    assert run_cli("text", "--data_dir", str(tmp_path), "--url", url) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: cannot download {url} (") and "to fix" in errors[0]
    assert leftovers(tmp_path) == []


def test_full_disk_leaves_nothing_at_the_final_path(tmp_path, served, monkeypatch, capsys):
    def full(src, target):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tar_extract, "_write_member", full)
    root = tmp_path / "data"
    assert run_cli("image", "--data_dir", str(root), "--keep_archive") == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "no space left" in err and "--data_dir" in err
    assert not (root / "cifar-10-batches-py").exists() and leftovers(root) == []
    assert (root / "downloads" / "cifar-10-python.tar.gz").is_file()  # verified archive kept: no re-download


def test_not_enough_space_for_the_download(tmp_path, served, monkeypatch, capsys):
    monkeypatch.setattr(http_fetch.shutil, "disk_usage", lambda path: type("U", (), {"free": 10})())
    assert run_cli("image", "--data_dir", str(tmp_path)) == 2
    err = capsys.readouterr().err
    assert "no space left" in err and "cifar-10-python.tar.gz.part" in err


def test_incomplete_folder_is_not_overwritten_without_force(tmp_path, served, capsys):
    (tmp_path / "aclImdb" / "train" / "pos").mkdir(parents=True)
    assert run_cli("text", "--data_dir", str(tmp_path)) == 2
    assert "exists but is incomplete" in capsys.readouterr().err and served.requests == []
    assert run_cli("text", "--data_dir", str(tmp_path), "--force", "--no_prepare") == 0
    assert (tmp_path / "aclImdb" / "test" / "neg" / "000_2.txt").is_file() and leftovers(tmp_path) == []


def test_member_path_rules():
    assert download.member_path("./aclImdb/train/x.txt").as_posix() == "aclImdb/train/x.txt"
    for bad in ("../x", "a/../../x", "/etc/passwd"):
        with pytest.raises(download.BadArchive):
            download.member_path(bad)
    assert issubclass(download.DownloadError, DataError)


def test_stale_extraction_folders_are_removed_and_live_ones_kept(tmp_path, monkeypatch):
    """Issue 26 U10: a download killed while extracting leaves .lra-extract-*; the next run removes
    it when its owner is gone, and keeps the folders of live processes and of other hosts."""
    root = tmp_path / "data"
    host = socket.gethostname()
    names = {
        "dead": f".lra-extract-lra_release-{host}-99999999-0a1b2c3d",  # beyond any pid_max
        "alive": f".lra-extract-lra_release-{host}-{os.getppid()}-0a1b2c3d",
        "other_host": ".lra-extract-lra_release-elsewhere-99999999-0a1b2c3d",
        "legacy_dead": ".lra-extract-lra_release-99999999-0a1b2c3d",
    }
    for name in names.values():
        (root / name / "new").mkdir(parents=True)
        (root / name / "new" / "big").write_bytes(b"x" * 1000)
    old = time.time() - 3600
    os.utime(root / names["legacy_dead"], (old, old))
    monkeypatch.setattr(download, "present", lambda *a: True)  # the task is there: only the clean-up runs
    download.download("listops", root)
    assert leftovers(root) == sorted([names["alive"], names["other_host"]])


def test_stale_extraction_cleanup_keeps_a_symlink_and_does_not_say_it_removed_it(tmp_path, monkeypatch, capsys):
    """Issue 38 DL1: a .lra-extract-* name that is a symlink (to a folder) is kept, and never logged as removed."""
    root = tmp_path / "data"
    (tmp_path / "elsewhere" / "keep").mkdir(parents=True)
    root.mkdir()
    link = root / f".lra-extract-lra_release-{socket.gethostname()}-99999999-0a1b2c3d"
    link.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    assert download.remove_stale_extractions(root) == []
    assert link.is_symlink() and (tmp_path / "elsewhere" / "keep").is_dir()
    captured = capsys.readouterr()
    assert "removed" not in captured.out + captured.err
