#!/usr/bin/python3
"""
A FUSE file system that loses what a power cut loses (the power-cut harness, power-cut.ts).

Reads and writes pass through to a live directory. Beside it the file system keeps the
durable state, as a disk would after a power cut:
  - a file's data is durable as of its last fsync or fdatasync (a range written since is
    not; a truncation since is not);
  - a directory's entries (a name created, renamed, linked or removed) are durable as of
    the last fsync of that directory.
When the file system is unmounted (the harness has SIGKILLed every process using it: the
"power cut"), it writes the durable state into --out as plain files and exits. With --tear
the last write not synced yet lands in part: a random number of its first 512-byte sectors.

Usage: powerfs.py --backing DIR --mount DIR --out DIR [--seed N] [--tear] [--clean]
--backing holds the starting state (taken as durable); --out must not exist.
"""

import argparse
import errno
import os
import random
import shutil
import stat
import sys
import threading

from fusepy import FUSE, FuseOSError, Operations

SECTOR = 512


class PowerFS(Operations):
    use_ns = True

    def __init__(self, live, shadow):
        self.live = live
        self.shadow = shadow
        self.mutex = threading.Lock()
        self.next_id = 0
        # Live: path -> file id; open descriptor -> file id.
        self.ids = {}
        self.fds = {}
        # Durable: directory path -> {name: file id | DIR}.
        self.durable = {}
        # Per file id: unsynced written ranges [(offset, length)], the smallest unsynced size.
        self.dirty = {}
        self.trunc = {}
        # The last unsynced write, (id, offset, data), for --tear.
        self.last_write = None
        self.shm = set()
        self.stats = {'writes': 0, 'fsyncs': 0, 'dirsyncs': 0}
        self._scan('/')

    # --- the model ---

    def _new_id(self):
        self.next_id += 1
        return self.next_id

    def _scan(self, rel):
        """The starting state: every file and directory under --backing is durable."""
        entries = {}
        for name in os.listdir(self._live(rel)):
            child = os.path.join(rel, name)
            st = os.lstat(self._live(child))
            if stat.S_ISDIR(st.st_mode):
                entries[name] = 'DIR'
                self._scan(child)
            elif stat.S_ISREG(st.st_mode):
                fid = self._new_id()
                self.ids[child] = fid
                shutil.copyfile(self._live(child), self._shadow(fid))
                entries[name] = fid
        self.durable[rel] = entries

    def _live(self, path):
        return os.path.join(self.live, path.lstrip('/'))

    def _shadow(self, fid):
        return os.path.join(self.shadow, str(fid))

    def _dirty(self, fid, offset, length):
        ranges = self.dirty.setdefault(fid, [])
        ranges.append((offset, length))
        if len(ranges) > 4096:
            start = min(o for o, _ in ranges)
            end = max(o + n for o, n in ranges)
            self.dirty[fid] = [(start, end - start)]

    def _sync_file(self, fid, fd):
        """fsync/fdatasync: the file's data as it is now becomes durable."""
        size = os.fstat(fd).st_size
        path = self._shadow(fid)
        flags = os.O_RDWR | os.O_CREAT
        sfd = os.open(path, flags, 0o600)
        try:
            if fid in self.trunc:
                os.ftruncate(sfd, min(self.trunc.pop(fid), os.fstat(sfd).st_size))
            for offset, length in self.dirty.pop(fid, []):
                data = os.pread(fd, length, offset)
                if data:
                    os.pwrite(sfd, data, offset)
            os.ftruncate(sfd, size)
        finally:
            os.close(sfd)
        if self.last_write is not None and self.last_write[0] == fid:
            self.last_write = None
        self.stats['fsyncs'] += 1

    def _sync_dir(self, rel):
        """fsync of a directory: its entries as they are now become durable."""
        entries = {}
        for name in os.listdir(self._live(rel)):
            child = os.path.join(rel, name)
            if os.path.isdir(self._live(child)) and not os.path.islink(self._live(child)):
                entries[name] = 'DIR'
                self.durable.setdefault(child, {})
            elif child in self.ids:
                entries[name] = self.ids[child]
        self.durable[rel] = entries
        self.stats['dirsyncs'] += 1

    def materialize(self, out, rng, tear):
        """Writes what survived the power cut into `out`: durable names, durable data."""
        written = {}

        def walk(rel, target):
            os.mkdir(target)
            for name, fid in self.durable.get(rel, {}).items():
                dest = os.path.join(target, name)
                if fid == 'DIR':
                    walk(os.path.join(rel, name), dest)
                elif fid in written:
                    os.link(written[fid], dest)
                else:
                    if os.path.exists(self._shadow(fid)):
                        shutil.copyfile(self._shadow(fid), dest)
                    else:
                        open(dest, 'wb').close()
                    written[fid] = dest

        walk('/', out)
        torn = None
        if tear and self.last_write is not None and self.last_write[0] in written:
            fid, offset, data = self.last_write
            cuts = [b for b in range((offset // SECTOR + 1) * SECTOR, offset + len(data), SECTOR)]
            if cuts:
                cut = rng.choice(cuts)
                with open(written[fid], 'r+b') as f:
                    f.seek(offset)
                    f.write(data[: cut - offset])
                torn = (written[fid], offset, cut - offset, len(data))
        return torn

    # --- file system operations ---

    def getattr(self, path, fh=None):
        try:
            st = os.lstat(self._live(path))
        except OSError as e:
            raise FuseOSError(e.errno)
        keys = ('st_mode', 'st_ino', 'st_nlink', 'st_uid', 'st_gid', 'st_size', 'st_atime_ns', 'st_mtime_ns', 'st_ctime_ns', 'st_blocks')
        attrs = {k: getattr(st, k) for k in keys}
        for k in ('st_atime', 'st_mtime', 'st_ctime'):
            attrs[k] = attrs.pop(k + '_ns')
        return attrs

    def access(self, path, amode):
        if not os.access(self._live(path), amode):
            raise FuseOSError(errno.EACCES)

    def readdir(self, path, fh):
        return ['.', '..'] + os.listdir(self._live(path))

    def statfs(self, path):
        sv = os.statvfs(self._live(path))
        return {k: getattr(sv, k) for k in ('f_bavail', 'f_bfree', 'f_blocks', 'f_bsize', 'f_favail', 'f_ffree', 'f_files', 'f_flag', 'f_frsize', 'f_namemax')}

    def chmod(self, path, mode):
        os.chmod(self._live(path), mode)

    def chown(self, path, uid, gid):
        os.chown(self._live(path), uid, gid)

    def utimens(self, path, times=None):
        os.utime(self._live(path), ns=times)

    def mkdir(self, path, mode):
        os.mkdir(self._live(path), mode)

    def rmdir(self, path):
        os.rmdir(self._live(path))

    def open(self, path, fi):
        with self.mutex:
            flags = fi.flags & ~(os.O_APPEND | os.O_CREAT | os.O_EXCL)
            try:
                fd = os.open(self._live(path), flags)
            except OSError as e:
                raise FuseOSError(e.errno)
            if path not in self.ids:
                self.ids[path] = self._new_id()
            self.fds[fd] = self.ids[path]
            if path.endswith('-shm'):
                self.shm.add(self.ids[path])
            fi.fh = fd
            # The kernel's page cache stays valid across opens (every write passes through
            # it): SQLite's -shm is mapped shared by several processes.
            fi.keep_cache = 1
            return 0

    def create(self, path, mode, fi):
        with self.mutex:
            flags = (fi.flags & ~os.O_APPEND) | os.O_CREAT
            try:
                fd = os.open(self._live(path), flags, mode)
            except OSError as e:
                raise FuseOSError(e.errno)
            if path not in self.ids:
                self.ids[path] = self._new_id()
            self.fds[fd] = self.ids[path]
            if path.endswith('-shm'):
                self.shm.add(self.ids[path])
            fi.fh = fd
            fi.keep_cache = 1
            return 0

    def read(self, path, size, offset, fi):
        return os.pread(fi.fh, size, offset)

    def write(self, path, data, offset, fi):
        with self.mutex:
            n = os.pwrite(fi.fh, data, offset)
            fid = self.fds[fi.fh]
            self._dirty(fid, offset, n)
            # SQLite rebuilds -shm from the WAL after a crash: tearing it proves nothing.
            if fid not in self.shm:
                self.last_write = (fid, offset, bytes(data[:n]))
            self.stats['writes'] += 1
            return n

    def truncate(self, path, length, fi=None):
        with self.mutex:
            if fi is not None:
                os.ftruncate(fi.fh, length)
                fid = self.fds[fi.fh]
            else:
                os.truncate(self._live(path), length)
                fid = self.ids.get(path)
            if fid is not None:
                self.trunc[fid] = min(self.trunc.get(fid, length), length)

    def fsync(self, path, datasync, fi):
        with self.mutex:
            self._sync_file(self.fds[fi.fh], fi.fh)
            return 0

    def fsyncdir(self, path, datasync, fh):
        with self.mutex:
            self._sync_dir(path)
            return 0

    def flush(self, path, fi):
        return 0

    def release(self, path, fi):
        with self.mutex:
            self.fds.pop(fi.fh, None)
            os.close(fi.fh)
            return 0

    def unlink(self, path):
        with self.mutex:
            os.unlink(self._live(path))
            self.ids.pop(path, None)

    def rename(self, old, new):
        with self.mutex:
            if os.path.isdir(self._live(old)):
                raise FuseOSError(errno.EXDEV)
            os.rename(self._live(old), self._live(new))
            if old in self.ids:
                self.ids[new] = self.ids.pop(old)

    def link(self, target, source):
        with self.mutex:
            os.link(self._live(source), self._live(target))
            if source in self.ids:
                self.ids[target] = self.ids[source]

    def symlink(self, target, source):
        raise FuseOSError(errno.EPERM)


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--backing', required=True)
    p.add_argument('--mount', required=True)
    p.add_argument('--out', required=True)
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--tear', action='store_true')
    # An orderly shutdown (the system syncs on its way down): --out gets the live files.
    p.add_argument('--clean', action='store_true')
    a = p.parse_args()
    # The live files: a copy of the starting state, thrown away at the end.
    live = a.out + '.live'
    shadow = a.out + '.shadow'
    shutil.copytree(a.backing, live, symlinks=True)
    os.mkdir(shadow)
    fs = PowerFS(live, shadow)
    FUSE(fs, a.mount, raw_fi=True, foreground=True, nothreads=False, allow_other=True, use_ino=True, hard_remove=True,
         fsname='powerfs', attr_timeout=0, entry_timeout=0, negative_timeout=0)
    live_files = sorted('%s:%d' % (n, os.path.getsize(os.path.join(live, n))) for n in os.listdir(live) if os.path.isfile(os.path.join(live, n)))
    if a.clean:
        shutil.copytree(live, a.out, symlinks=True)
        torn = None
    else:
        torn = fs.materialize(a.out, random.Random(a.seed), a.tear)
    shutil.rmtree(live)
    shutil.rmtree(shadow)
    s = fs.stats
    print('powerfs: writes %d, fsyncs %d, directory fsyncs %d, unsynced files %d, torn %s, live %s'
          % (s['writes'], s['fsyncs'], s['dirsyncs'], len(fs.dirty), torn, ' '.join(live_files)), flush=True)


if __name__ == '__main__':
    sys.exit(main())
