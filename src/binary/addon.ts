/**
 * better-sqlite3's addon inside the single executable. The addon is a shared library and
 * the dynamic loader only maps files, so it is written out once per content hash and read
 * back, hash checked, before every load (once per thread that opens SQLite). Whoever can
 * change that file runs code as the service: it is written only into a directory owned by
 * this user that no one else can write, inside parents no one else can rename it out of.
 */
import { createHash, randomBytes } from 'node:crypto';
import {
  closeSync,
  existsSync,
  fstatSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readFileSync,
  realpathSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
  constants,
} from 'node:fs';
import { dirname, join } from 'node:path';
import { ReceiverError } from '../errors.js';

const TRY = 'set RECEIVER_NATIVE_DIR to a directory that only the user running receiver can write (mode 0700), or fix the permissions named above';

/** Where the addon is written: RECEIVER_NATIVE_DIR, else the user's cache directory. */
export function addonDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.RECEIVER_NATIVE_DIR) return env.RECEIVER_NATIVE_DIR;
  if (env.XDG_CACHE_HOME) return join(env.XDG_CACHE_HOME, 'receiver');
  // The service user's home (/var/lib/receiver in docs/operations.md) is writable by the unit and cron.
  if (env.HOME) return join(env.HOME, '.cache', 'receiver');
  throw new ReceiverError('config', 'no directory to write the SQLite addon to: neither RECEIVER_NATIVE_DIR, XDG_CACHE_HOME nor HOME is set', { hint: TRY });
}

const euid = () => process.geteuid?.() ?? 0;

/** Creates `dir` (mode 0700) if missing; refuses one that anyone but this user (or root) could change. */
export function ensurePrivateDir(dir: string): string {
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  } catch (e) {
    throw new ReceiverError('config', `cannot create ${dir} for the SQLite addon: ${(e as Error).message}`, { hint: TRY });
  }
  const real = realpathSync(dir);
  const own = statSync(real);
  if (own.uid !== euid() || (own.mode & 0o022) !== 0) {
    throw new ReceiverError(
      'config',
      `${real} must belong to uid ${euid()} and be writable by it alone to hold the SQLite addon (it belongs to uid ${own.uid}, mode ${(own.mode & 0o777).toString(8)})`,
      { hint: TRY },
    );
  }
  // A parent that others can write could have our directory renamed away and replaced,
  // unless its sticky bit (/tmp) keeps them to their own entries.
  for (let p = dirname(real); ; p = dirname(p)) {
    const st = statSync(p);
    const othersWrite = (st.mode & 0o022) !== 0 && (st.mode & 0o1000) === 0;
    if ((st.uid !== 0 && st.uid !== euid()) || othersWrite) {
      throw new ReceiverError(
        'config',
        `${p} (above ${real}) can be changed by other users (uid ${st.uid}, mode ${(st.mode & 0o7777).toString(8)}), so the SQLite addon cannot be kept safely below it`,
        { hint: TRY },
      );
    }
    if (p === dirname(p)) break;
  }
  return real;
}

/**
 * Opens `file` when it is ours, written by no one else, and hashes to `sha256`; the
 * descriptor is what gets loaded, so a file swapped after the check is not the one mapped.
 * Undefined when it is missing or its content differs.
 */
function openVerified(file: string, sha256: string): number | undefined {
  let fd: number;
  try {
    fd = openSync(file, constants.O_RDONLY | constants.O_NOFOLLOW);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw e;
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile() || st.uid !== euid() || (st.mode & 0o022) !== 0) {
      throw new ReceiverError('config', `${file} is not a regular file of uid ${euid()} writable by it alone; not loading it`, { hint: TRY });
    }
    if (createHash('sha256').update(readFileSync(fd)).digest('hex') !== sha256) {
      closeSync(fd);
      return undefined;
    }
    return fd;
  } catch (e) {
    closeSync(fd);
    throw e;
  }
}

/** Writes a temp file beside `file`, flushes it, renames it over: readers see all or nothing. */
function writeAtomically(file: string, bytes: Uint8Array): void {
  const tmp = `${file}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`;
  try {
    writeFileSync(tmp, bytes, { flag: 'wx', mode: 0o500 });
    const fd = openSync(tmp, 'r');
    try {
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, file);
  } catch (e) {
    rmSync(tmp, { force: true });
    throw new ReceiverError('config', `cannot write the SQLite addon to ${file}: ${(e as Error).message}`, { hint: TRY });
  }
}

export interface AddonSource {
  /** The directory to keep it in (see addonDir). */
  dir: string;
  /** sha256 of the addon, hex, stamped at build time. */
  sha256: string;
  /** The addon's bytes, read from the executable only when the file must be (re)written. */
  bytes: () => Uint8Array;
}

/** The file the addon of this content lives in. */
export function addonFile(source: Pick<AddonSource, 'dir' | 'sha256'>): string {
  return join(source.dir, `better_sqlite3-${source.sha256.slice(0, 16)}.node`);
}

/** Writes the addon once per content hash, checks it, and loads it: better-sqlite3's nativeBinding. */
export function loadAddon(source: AddonSource): object {
  const dir = ensurePrivateDir(source.dir);
  const file = addonFile({ dir, sha256: source.sha256 });
  let fd = openVerified(file, source.sha256);
  if (fd === undefined) {
    // Missing, or not the bytes this executable carries (an interrupted older write cannot
    // be: writes are atomic; so another receiver version, or tampering): replace it.
    writeAtomically(file, source.bytes());
    fd = openVerified(file, source.sha256);
    if (fd === undefined) throw new ReceiverError('runtime', `the SQLite addon written to ${file} does not hash to ${source.sha256}`);
  }
  try {
    const module = { exports: {} };
    // Through the checked descriptor where /proc exists; the path otherwise.
    process.dlopen(module, existsSync('/proc/self/fd') ? `/proc/self/fd/${fd}` : file);
    return module.exports;
  } finally {
    closeSync(fd);
  }
}
