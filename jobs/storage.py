"""Where batch inputs and outputs and the store's request rows live: this host's files, or an
object store. `location(uri)` names a file or directory either way, as a Location:

    /data/out, file:///data/out           LocalPath: this host's files, as pathlib sees them
    s3://bucket/prefix, gs://..., abfs:// ObjectPath: what pyarrow.fs serves, and any other
                                          scheme fsspec serves (it and the scheme's package installed)

S3's endpoint and credentials are the standard AWS settings, read by the AWS SDK under pyarrow:
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION or AWS_DEFAULT_REGION,
~/.aws; AWS_ENDPOINT_URL (or AWS_ENDPOINT_URL_S3) points them at another server (MinIO, Ceph, moto).
A URI carries no options: a query would put credentials in DAG params and manifests.

An object store has no rename, no hard link, no symlink and no lock. What stands in for them:

* rename of a finished temporary -> the upload itself: an object appears whole when its upload
  completes (one PUT, or CompleteMultipartUpload), so objects are written in place. A killed
  upload leaves no object, at most an incomplete multipart upload that no listing shows (a bucket
  lifecycle rule, AbortIncompleteMultipartUpload, reclaims its storage).
* a hard link that never replaces (publish) -> an upload to a key of the attempt's own
  (name-<random>.ext): a key, once written, is never written again; readers learn which key
  counts from a manifest, never from a listing.
* an exclusive create (create_first) -> candidacies: each contender puts a key of its own, lists
  the others, and only one that sees no rival goes on (ObjectPath.create_first says why that holds).
* temporaries named after their process (jobs.tempfiles) -> kept on this host's disk (scratch),
  where their owner can be judged; the object store holds none.

This needs strong read-after-write and list-after-write consistency: AWS S3 (since December 2020),
GCS, Azure Blob, MinIO and moto have it.
"""
from __future__ import annotations

import abc
import contextlib
import fnmatch
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Iterator
from urllib.parse import unquote, urlsplit

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from jobs import settings
from jobs.errors import StorageError
from jobs.tempfiles import owned_name, remove_dead_temporaries

CHUNK = 8 << 20


def location(uri: str, what: str) -> Location:
    """The place `uri` (a path, a file:// URI or an object-store URI) names; `what` names it
    in errors. Refused: a query or fragment, a file URI naming another host (it would
    silently mean this host's path), an object-store URI without a bucket, a scheme no
    filesystem serves."""
    parts = urlsplit(uri) if "://" in uri or uri.startswith("file:") else None
    if parts is None:
        return LocalPath(Path(uri))
    if parts.query or parts.fragment:
        raise StorageError(f"{what}: {uri!r} has a query or fragment; percent-encode ? and # in names "
                           "(an S3 endpoint is set by AWS_ENDPOINT_URL, not in the URI)")
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise StorageError(f"{what}: {uri!r} names host {parts.netloc!r}; only this host's files "
                               "(file:///path) or an object store (s3://bucket/prefix)")
        return LocalPath(Path(unquote(parts.path)))
    if not parts.netloc:
        raise StorageError(f"{what}: {uri!r} names no bucket (want {parts.scheme}://bucket/prefix)")
    fs, fs_path = _filesystem(uri, what)
    return ObjectPath(fs, fs_path.rstrip("/"), uri.rstrip("/"))


def _filesystem(uri: str, what: str) -> tuple[pafs.FileSystem, str]:
    try:
        return pafs.FileSystem.from_uri(uri)
    except pa.ArrowInvalid as e:
        if "Unrecognized filesystem type" not in str(e):
            raise StorageError(f"{what}: {uri!r}: {e}") from None
    except OSError as e:   # e.g. hdfs:// without a JVM
        raise StorageError(f"{what}: {uri!r}: {_one_line(e)}") from None
    try:
        import fsspec
        fs, path = fsspec.core.url_to_fs(uri)
    except (ImportError, ValueError) as e:   # no fsspec, or no implementation of the scheme
        raise StorageError(f"{what}: no filesystem serves {uri!r} (pyarrow serves s3://, gs://, abfs://, "
                           f"hdfs://; others need fsspec and the scheme's package): {e}") from None
    return pafs.PyFileSystem(pafs.FSSpecHandler(fs)), path


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


class Location(abc.ABC):
    """A file or directory, local or in an object store; `/` names one inside it. What is
    written appears whole or not at all."""

    @property
    @abc.abstractmethod
    def name(self) -> str: ...

    @abc.abstractmethod
    def __truediv__(self, name: str) -> Location: ...

    @abc.abstractmethod
    def exists(self) -> bool: ...

    @abc.abstractmethod
    def read_bytes(self) -> bytes: ...

    @abc.abstractmethod
    def open(self) -> IO[bytes]:
        """For reading, as pyarrow.parquet does (seekable)."""

    @abc.abstractmethod
    def write_bytes(self, data: bytes) -> None: ...

    @abc.abstractmethod
    def create_first(self, data: bytes, contender: str) -> None:
        """Writes `data` here unless it exists or another contender is creating it
        (FileExistsError); one contender may create it twice."""

    @abc.abstractmethod
    def delete(self) -> None:
        """Removes this file; one that is not there is fine."""

    @abc.abstractmethod
    def glob(self, pattern: str) -> list[Location]:
        """What this directory holds directly whose name matches `pattern`, in name order."""

    @abc.abstractmethod
    def is_symlink(self) -> bool: ...

    @abc.abstractmethod
    def check_reachable(self) -> None:
        """StorageError, in one line, where an object store's bucket cannot be reached."""

    @abc.abstractmethod
    def publish(self, local_file: Path) -> Location:
        """Makes `local_file` this file's content without ever replacing one there; returns
        what it published (on an object store a key of its own: see published())."""

    @abc.abstractmethod
    def published(self) -> list[Location]:
        """Every file publish() made of this one so far, in name order."""

    @abc.abstractmethod
    def local_copy(self) -> contextlib.AbstractContextManager[Path]:
        """This file as a path on this host, for readers that need one."""

    @abc.abstractmethod
    def attempts_dir(self) -> Path:
        """The local directory in which an attempt prepares, under an owned temporary name,
        what it then publishes here (this directory itself when it is local)."""

    @abc.abstractmethod
    def arrow(self) -> tuple[pafs.FileSystem, str]:
        """The pyarrow filesystem and path, for pyarrow's own readers (datasets)."""

    def remove_dead_temporaries(self) -> int:
        """Removes the owned temporaries in this directory whose process is gone; how many.
        An object store holds none (what it gets is uploaded whole)."""
        return 0

    def remove_empty_dir(self) -> None:
        """Removes this directory if it is empty (an object store has no directories)."""


@dataclass(frozen=True)
class LocalPath(Location):
    path: Path

    def __str__(self) -> str:
        return str(self.path)

    @property
    def name(self) -> str:
        return self.path.name

    def __truediv__(self, name: str) -> LocalPath:
        return LocalPath(self.path / name)

    def exists(self) -> bool:
        return self.path.exists()

    def read_bytes(self) -> bytes:
        return self.path.read_bytes()

    def open(self) -> IO[bytes]:
        return open(self.path, "rb")

    def write_bytes(self, data: bytes, *, exclusive: bool = False) -> None:
        """Written and synced under a temporary name, then renamed into place (with `exclusive`,
        linked: FileExistsError if the file exists)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.parent / owned_name(self.path.name)
        try:
            with open(tmp, "xb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.link(tmp, self.path) if exclusive else os.replace(tmp, self.path)
        finally:
            tmp.unlink(missing_ok=True)

    def create_first(self, data: bytes, contender: str) -> None:
        self.write_bytes(data, exclusive=True)

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)

    def glob(self, pattern: str) -> list[LocalPath]:
        return [LocalPath(p) for p in sorted(self.path.glob(pattern))]

    def is_symlink(self) -> bool:
        return self.path.is_symlink()

    def check_reachable(self) -> None:
        pass   # what a local write needs is checked where it is written

    def publish(self, local_file: Path) -> LocalPath:
        with contextlib.suppress(FileExistsError):   # a file is never replaced: the first one stays
            os.link(local_file, self.path)
        return self

    def published(self) -> list[LocalPath]:
        return [self] if self.path.exists() else []

    @contextlib.contextmanager
    def local_copy(self) -> Iterator[Path]:
        yield self.path

    def attempts_dir(self) -> Path:
        return self.path

    def arrow(self) -> tuple[pafs.FileSystem, str]:
        return pafs.LocalFileSystem(), str(self.path.resolve())

    def remove_dead_temporaries(self) -> int:
        return remove_dead_temporaries(self.path)

    def remove_empty_dir(self) -> None:
        with contextlib.suppress(OSError):   # gone already, or not empty
            self.path.rmdir()


@dataclass(frozen=True)
class ObjectPath(Location):
    fs: pafs.FileSystem
    path: str    # the filesystem's own path: bucket/key
    uri: str

    def __str__(self) -> str:
        return self.uri

    @property
    def name(self) -> str:
        return PurePosixPath(self.path).name

    def __truediv__(self, name: str) -> ObjectPath:
        return ObjectPath(self.fs, f"{self.path}/{name}", f"{self.uri}/{name}")

    def _info(self) -> pafs.FileInfo:
        return self.fs.get_file_info(self.path)

    def exists(self) -> bool:
        return self._info().type != pafs.FileType.NotFound

    def read_bytes(self) -> bytes:
        with self.fs.open_input_stream(self.path) as f:
            return f.read()

    def open(self) -> IO[bytes]:
        return self.fs.open_input_file(self.path)

    def write_bytes(self, data: bytes) -> None:
        # No temporary and no rename: the object appears when its upload completes. (pyarrow
        # completes an upload on close, even after a failed write, so a failed write of a large
        # object can leave it truncated; the JSON written this way is one PUT, parts are
        # published at keys of their own and checked by their footer and checksum.)
        with self.fs.open_output_stream(self.path) as f:
            f.write(data)

    def create_first(self, data: bytes, contender: str) -> None:
        """S3 has no create-if-absent for pyarrow: each attempt puts a candidacy of its own,
        <name>.contenders/<contender>/<unique>, lists them all, and writes the object only if
        no other contender's is there (nor the object); then it withdraws its candidacy.
        Of two contenders, the later to list sees the earlier's candidacy (list-after-write
        consistency), so two never both go on; both may lose at once, and retry. One killed
        before it withdrew leaves its candidacy, which keeps the others out until it is removed
        or its contender retries: the error names it."""
        if self.exists():
            raise FileExistsError(f"{self.uri} exists")
        contenders = self._sibling(f"{self.name}.contenders")
        mine = contenders / contender / owned_name("candidacy")
        mine.write_bytes(b"")
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(contenders.path, recursive=True))
            rivals = sorted(f"{contenders.uri}/{PurePosixPath(i.path).relative_to(contenders.path)}" for i in infos
                            if i.type == pafs.FileType.File and PurePosixPath(i.path).parent.name != contender)
            if rivals:
                raise FileExistsError(f"{self.uri} is being created by another contender ({', '.join(rivals)}; "
                                      "one left by a killed process stays until it is removed)")
            if self.exists():   # written meanwhile by a twin of this contender, or one that withdrew since
                raise FileExistsError(f"{self.uri} exists")
            self.write_bytes(data)
        finally:
            mine.delete()

    def delete(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.delete_file(self.path)

    def glob(self, pattern: str) -> list[ObjectPath]:
        """The files and (common-prefix) directories directly here whose name matches `pattern`."""
        infos = self.fs.get_file_info(pafs.FileSelector(self.path, allow_not_found=True))
        return [self / info.base_name for info in sorted(infos, key=lambda i: i.path)
                if fnmatch.fnmatchcase(info.base_name, pattern)]

    def is_symlink(self) -> bool:
        return False   # object stores have none

    def check_reachable(self) -> None:
        """Its bucket exists and answers (credentials, endpoint); one line when not."""
        bucket = self.path.split("/", 1)[0]
        try:
            found = self.fs.get_file_info(bucket).type
        except OSError as e:
            raise StorageError(f"{self.uri}: cannot reach the object store: {_one_line(e)}") from None
        if found != pafs.FileType.Directory:
            raise StorageError(f"{self.uri}: bucket {bucket!r} does not exist")

    def publish(self, local_file: Path) -> ObjectPath:
        stem, suffix = os.path.splitext(self.name)
        target = self._sibling(f"{stem}-{uuid.uuid4().hex[:16]}{suffix}")
        with open(local_file, "rb") as src, self.fs.open_output_stream(target.path) as dst:
            shutil.copyfileobj(src, dst, CHUNK)
        return target

    def published(self) -> list[ObjectPath]:
        stem, suffix = os.path.splitext(self.name)
        return self._sibling("").glob(f"{stem}-*{suffix}")

    def _sibling(self, name: str) -> ObjectPath:
        parent, uri_parent = self.path.rsplit("/", 1)[0], self.uri.rsplit("/", 1)[0]
        return ObjectPath(self.fs, f"{parent}/{name}".rstrip("/"), f"{uri_parent}/{name}".rstrip("/"))

    @contextlib.contextmanager
    def local_copy(self) -> Iterator[Path]:
        """Downloaded into an owned temporary directory of the scratch (it keeps the object's
        name, which says its format). The object's size and modification time are compared
        before and after: a ranged read of an object replaced meanwhile would mix two versions.
        (Last-Modified has whole seconds: a same-size replacement within the second goes unseen.)"""
        before = self._info()
        if before.type != pafs.FileType.File:
            raise FileNotFoundError(f"{self.uri}: no such object")
        remove_dead_temporaries(settings.scratch_dir())   # copies that killed readers left
        directory = settings.scratch_dir() / owned_name(self.name)
        directory.mkdir(parents=True)
        try:
            copy = directory / self.name
            with self.fs.open_input_stream(self.path) as src, open(copy, "xb") as dst:
                shutil.copyfileobj(src, dst, CHUNK)
            after = self._info()
            if (after.size, after.mtime) != (before.size, before.mtime):
                raise OSError(f"{self.uri} changed while it was being read")
            yield copy
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    def attempts_dir(self) -> Path:
        return settings.scratch_dir()

    def arrow(self) -> tuple[pafs.FileSystem, str]:
        return self.fs, self.path


def write_table(place: Location, table: pa.Table) -> None:
    """`table` as a Parquet file at `place`, whole or not at all. Serialized in memory first: a
    writer streaming to an object store would complete a truncated upload when it fails."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    place.write_bytes(sink.getvalue().to_pybytes())
