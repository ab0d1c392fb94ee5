"""What a replica promises is on disk first (issue 38): its Raft journal, its term and vote, and
the full dump that log compaction and a snapshot from the leader leave behind.

A replica tells a peer it holds entries (a successful ``next_node_idx``) or asks for or grants a
vote only once its journal is on disk, and a leader counts its own entries towards a commit only
then (etcd's raftexample saves its WAL before it sends). pysyncobj writes the journal through
mmap and never flushes it, so a power cut could lose acknowledged, committed entries and the
replica would vote as if it never had them. How: the node's journal is a ``DurableJournal``, which
notes whether anything was written since its last flush and stores term and vote with fsync (the
file before the rename, its directory after). ``GuardedTransport.send`` (raft_transport.py) hands
such a message to the node's ``AckGate`` while the journal has unflushed writes; the gate flushes
the journal once (msync) and sends what it held, in order, at three points of every tick
(``RaftNode._onTick``, raft.py): before pysyncobj's tick, which is where the leader counts matches
towards the commit index, before the tick waits for the network, and after it handled what
arrived; and once a replica becomes leader (a replica alone in its cluster commits its no-op entry
in that same tick). One flush thus covers every entry written in a tick, however many messages
brought them. A flush that fails stops the replica (``stop_after_lost_writes``): a later one could
succeed without the lost writes. The full dump is replaced durably too (``DurableSerializer``): log
compaction and a snapshot from the leader truncate the journal once it is written. A power cut in
the middle of a flush can leave a torn tail: the header's end-of-journal offset on disk but not
every page of the records before it. Those records were never acknowledged (the flush had not
returned), so ``DurableJournal`` drops them on start (``torn_tail``) instead of failing to load or
loading garbage: a record whose length fields disagree, that runs past the file, or whose index
does not follow its predecessor's ends the journal. pysyncobj's format has no checksum, so a record
whose length fields and index survived but whose middle page is stale is not detected. The
controller also writes every decision to the KB before acting on it: every replica can still lose
its disk at once.

pysyncobj 0.3.17 has no option for its journal factory (``createJournal``) nor for the rename of
its dump into place (``atomicReplace``): both are module-level names its code calls.
``durable_syncobj_init`` is pysyncobj's own ``SyncObj.__init__`` with ``createJournal`` and
``Serializer`` bound to ours, and ``DurableSerializer`` runs pysyncobj's own serializer code with
``atomicReplace`` bound to ``durable_replace`` (``with_names``): only a ``RaftNode`` uses them, and
nothing in pysyncobj's modules or classes is changed. An upstream ``SyncObjConf`` option for each
would replace the two copies.
"""

from __future__ import annotations

import logging
import os
import struct
import types
from collections.abc import Callable
from typing import Any, NoReturn

from pysyncobj import pickle as _pickle
from pysyncobj.journal import (
    FIRST_RECORD_OFFSET,
    LAST_RECORD_OFFSET_OFFSET,
    FileJournal,
    MemoryJournal,
    MetaStorer,
)
from pysyncobj.serializer import Serializer
from pysyncobj.syncobj import SyncObj

from qonnect.controller.raft_config import check_pysyncobj_version

check_pysyncobj_version()  # the code below runs pysyncobj's private code with names of ours

log = logging.getLogger(__name__)

# messages that tell a peer what this replica holds or decided: a vote request or a granted vote
VOTES = frozenset({"request_vote", "response_vote"})


def promises_durability(message: Any) -> bool:
    """True for a message a peer may count on after a power cut here: an acknowledgement of
    appended entries (a successful ``next_node_idx``), a vote request or a granted vote."""
    if not isinstance(message, dict):
        return False
    kind = message.get("type")
    return kind in VOTES or (kind == "next_node_idx" and bool(message.get("success")))


def fsync_dir(path: str) -> None:
    """Make the directory entry of PATH durable (a new or renamed file is not, until then)."""
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def durable_replace(tmp: str, path: str) -> None:
    """Replace PATH by TMP so that a power cut leaves one of them whole and, once this returns,
    the new one: pysyncobj renames its full dump into place without fsync."""
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path)


class DurableMetaStorer(MetaStorer):
    """pysyncobj's store of term, vote and commit index, written with fsync: a vote (rare) must
    survive a power cut before the candidate hears of it, and a rename of a file not yet on disk
    can leave an empty one in place of the vote stored before."""

    def storeMeta(self, meta: dict[str, Any]) -> None:
        path = self.getPath()
        with open(path + ".tmp", "wb") as tmp:
            tmp.write(_pickle.dumps(meta))
        durable_replace(path + ".tmp", path)


def torn_tail(journal_file: str) -> tuple[int, int] | None:
    """Where a journal's valid records end, if its header claims more: ``(end, claimed)``.

    pysyncobj's record is ``size | idx, term, command | size`` (little-endian u32 sizes, u64 idx
    and term); the header holds the offset after the last record. A record ends the journal when
    its two sizes differ, it is shorter than idx and term, it runs past the claimed end or the
    file, or its index is not its predecessor's plus one."""
    try:
        with open(journal_file, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    if len(data) < FIRST_RECORD_OFFSET:
        return None
    claimed = struct.unpack_from("<I", data, LAST_RECORD_OFFSET_OFFSET)[0]
    end, offset, previous = min(claimed, len(data)), FIRST_RECORD_OFFSET, None
    while offset < claimed:
        if offset + 4 > end:
            break
        size = struct.unpack_from("<I", data, offset)[0]
        stop = offset + 8 + size
        if size < 16 or stop > end or struct.unpack_from("<I", data, stop - 4)[0] != size:
            break
        idx = struct.unpack_from("<Q", data, offset + 4)[0]
        if previous is not None and idx != previous + 1:
            break
        previous, offset = idx, stop
    return None if offset >= claimed else (offset, claimed)


def drop_torn_tail(journal_file: str) -> None:
    """Cut a torn tail off the journal before pysyncobj reads it (said in the log)."""
    found = torn_tail(journal_file)
    if found is None:
        return
    end, claimed = found
    with open(journal_file, "r+b") as f:
        f.seek(LAST_RECORD_OFFSET_OFFSET)
        f.write(struct.pack("<I", end))
        f.flush()
        os.fsync(f.fileno())
    log.warning(
        "raft: the journal %s ends in a torn record (an interrupted flush, never acknowledged): "
        "%d bytes after offset %d dropped",
        journal_file,
        claimed - end,
        end,
    )


class DurableJournal(FileJournal):
    """pysyncobj's memory-mapped journal, plus what a flush needs to be rare: whether anything
    was written since the last one (``dirty``); ``sync`` is called by the node's AckGate. Term,
    vote and commit index go through a DurableMetaStorer."""

    def __init__(self, journal_file: str) -> None:
        self.dirty = True  # a new journal's header (pysyncobj adds its first entry next)
        drop_torn_tail(journal_file)
        super().__init__(journal_file)
        self._FileJournal__metaStorer = DurableMetaStorer(journal_file + ".meta")
        fsync_dir(journal_file)  # the journal file may have just been created

    def add(self, command: bytes, idx: int, term: int) -> None:
        super().add(command, idx, term)
        self.dirty = True

    def clear(self) -> None:
        super().clear()
        self.dirty = True

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        super().deleteEntriesFrom(entryFrom)
        self.dirty = True

    def sync(self) -> bool:
        """Put every write so far on disk with one msync(MS_SYNC) of the mapping (on Linux an
        fdatasync of the file's range: data and the file size); False when there was none."""
        if not self.dirty:
            return False
        self.flush()
        self.dirty = False
        return True


def create_journal(journal_file: str | None = None) -> Any:
    """pysyncobj's journal factory (``createJournal``), with a DurableJournal for a file."""
    return MemoryJournal() if journal_file is None else DurableJournal(journal_file)


def with_names(func: Callable[..., Any], **names: Any) -> Callable[..., Any]:
    """A copy of pysyncobj's function FUNC that finds the module-level NAMES it calls bound to
    ours: FUNC itself, its module and everything else that calls it are left as they are. Each
    name must be one FUNC calls (a pysyncobj that stops calling it must not go unnoticed)."""
    unused = sorted(set(names) - set(func.__code__.co_names))
    if unused:
        raise RuntimeError(f"pysyncobj's {func.__qualname__} no longer calls {', '.join(unused)}")
    scope = {**func.__globals__, **names}
    copy = types.FunctionType(func.__code__, scope, func.__name__, func.__defaults__, func.__closure__)
    copy.__kwdefaults__ = func.__kwdefaults__
    copy.__qualname__ = func.__qualname__
    copy.__doc__ = func.__doc__
    return copy


class DurableSerializer(Serializer):
    """pysyncobj's serializer of the full dump, which it renames into place with
    ``durable_replace`` instead of a bare rename: after log compaction (``serialize``) and once a
    snapshot from the leader arrived (``setTransmissionData``) pysyncobj truncates the journal."""

    serialize = with_names(Serializer.serialize, atomicReplace=durable_replace)
    setTransmissionData = with_names(Serializer.setTransmissionData, atomicReplace=durable_replace)


# pysyncobj's SyncObj.__init__, creating the journal with create_journal and a DurableSerializer
durable_syncobj_init = with_names(
    SyncObj.__init__, createJournal=create_journal, Serializer=DurableSerializer
)


def stop_after_lost_writes(exc: OSError) -> NoReturn:
    """A failed flush may have dropped journal writes, and a later one can succeed without them
    (Linux reports a lost writeback once): acknowledging after it could promise what is gone,
    so the replica stops, as etcd and PostgreSQL do. What it held was never acknowledged."""
    log.critical("raft: the journal could not be flushed to disk (%s); stopping this replica", exc)
    os._exit(os.EX_IOERR)  # a handler flushes each record it writes


class AckGate:
    """Holds the messages that promise durability while the journal has unflushed writes, and
    releases them, in the order they were sent, after one flush (``open``): entries written in
    one tick, however many messages brought them, cost one flush."""

    def __init__(self, journal: Callable[[], Any], enabled: bool = True) -> None:
        self._journal = journal  # the node's journal, read when needed (pysyncobj creates it)
        self.enabled = enabled  # False only to measure what the flush costs (the benchmark)
        self._held: list[tuple[Callable[[Any, Any], Any], Any, Any]] = []
        self.flushes = 0

    def hold(self, send: Callable[[Any, Any], Any], node: Any, message: Any) -> bool:
        """Keep MESSAGE for ``open`` if it must wait for the flush or follows one that waits."""
        if not self._held and not (promises_durability(message) and self._unflushed()):
            return False
        self._held.append((send, node, message))
        return True

    def open(self) -> None:
        """Flush the journal if it has unflushed writes, then send what was held."""
        journal = self._durable_journal()
        try:
            synced = journal is not None and journal.sync()
        except OSError as exc:
            stop_after_lost_writes(exc)
        if synced:
            self.flushes += 1
        held, self._held = self._held, []
        for send, node, message in held:
            send(node, message)

    def _unflushed(self) -> bool:
        journal = self._durable_journal()
        return journal is not None and journal.dirty

    def _durable_journal(self) -> DurableJournal | None:
        journal = self._journal() if self.enabled else None
        return journal if isinstance(journal, DurableJournal) else None
