import {
  closeSync,
  existsSync,
  fsyncSync,
  linkSync,
  lstatSync,
  openSync,
  readdirSync,
  readlinkSync,
  realpathSync,
  renameSync,
  statSync,
  unlinkSync,
} from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { Worker } from 'node:worker_threads';
import type { Command } from 'commander';
import { isPostgresUrl } from '../config/database.js';
import { ReceiverError } from '../errors.js';
import { redactUrl } from '../log.js';
import { backupSqlite, type BackupResult } from '../store/sqlite/backup.js';
import { addCommonOptions, configFrom, positiveInt, type CommonOptions } from './common.js';
import type { CliIo } from './io.js';

interface BackupOptions extends CommonOptions {
  force?: boolean;
  keep?: number;
}

/**
 * Placeholders a backup's file name may hold, replaced by the time of the backup in UTC.
 * Each sorts by name in time order, which is how `--keep` finds the newest copies; and
 * unlike `$(date +%F)` they need no `\%` in a crontab.
 */
const PLACEHOLDERS = {
  '{date}': { pattern: '\\d{4}-\\d{2}-\\d{2}', format: (d: Date) => d.toISOString().slice(0, 10) },
  '{datetime}': {
    pattern: '\\d{4}-\\d{2}-\\d{2}T\\d{6}Z',
    format: (d: Date) => `${d.toISOString().slice(0, 10)}T${d.toISOString().slice(11, 19).replaceAll(':', '')}Z`,
  },
} as const;

const PLACEHOLDER = /\{date\}|\{datetime\}/g;
const HAS_PLACEHOLDER = /\{date\}|\{datetime\}/;

export function registerBackup(program: Command, io: CliIo): void {
  addCommonOptions(program.command('backup'))
    .description('copy the SQLite database to <file>, consistent while serve runs, and check the copy')
    .argument('<file>', 'where to write the copy; {date} and {datetime} in the name become the UTC date (2026-03-01) or time (2026-03-01T023000Z)')
    .option('--force', 'replace <file> when it exists')
    .option('--keep <n>', 'after a good copy, delete all but the N newest copies named like <file> (needs {date} or {datetime} in it)', positiveInt('--keep'))
    .action((file: string, options: BackupOptions) => backup(file, options, io));
}

/**
 * The hidden name a copy is written under until it is checked: beside the target (so the
 * rename is atomic), with the process id that writes it, so a later run can tell the
 * leftovers of a killed run (its process gone) from a copy being written right now.
 * SQLite adds `-journal` to it while VACUUM INTO writes.
 */
const partialName = (target: string, pid: number, ms: number) => `.${target}.partial-${pid}-${ms}`;
const PARTIAL_SUFFIX = '\\.partial-(\\d+)-\\d+(?:-journal)?';

/**
 * `receiver backup <file>`: a consistent, checked copy of a running receiver's SQLite
 * database. The copy is written beside its destination under a temporary name, checked,
 * synced, and only then given its name, so a failed or interrupted backup never leaves a
 * half-written file under a backup's name (nor replaces a good one with it).
 */
export async function backup(template: string, options: BackupOptions, io: CliIo): Promise<void> {
  const config = configFrom(options, io.env, { secrets: false });
  const database = config.database;
  if (isPostgresUrl(database)) {
    throw new ReceiverError('usage', `receiver backup copies a SQLite database; ${redactUrl(database)} is PostgreSQL`, {
      hint: 'back it up with pg_dump: pg_dump --format=custom --file=receiver-$(date +%F).dump "<the database URL>" (restore with pg_restore)',
    });
  }
  if (database === ':memory:') throw new ReceiverError('usage', 'the database is :memory:; there is nothing on disk to back up');
  if (!existsSync(database)) {
    throw new ReceiverError('runtime', `no database at ${database}`, {
      hint: 'pass --db with the path serve uses (see "database" in the configuration; a relative path is resolved against the current directory)',
    });
  }
  if (HAS_PLACEHOLDER.test(dirname(template))) {
    throw new ReceiverError('usage', `${template}: {date} and {datetime} may only appear in the file name, not in its directory`);
  }
  const hasPlaceholder = HAS_PLACEHOLDER.test(basename(template));
  if (options.keep !== undefined && !hasPlaceholder) {
    throw new ReceiverError('usage', '--keep needs {date} or {datetime} in the file name: that is how receiver tells its earlier copies from other files', {
      hint: `e.g. receiver backup ${join(dirname(template), 'receiver-{date}.db')} --keep ${options.keep}`,
    });
  }

  const now = new Date(io.now());
  const target = resolve(template.replace(PLACEHOLDER, (p) => PLACEHOLDERS[p as keyof typeof PLACEHOLDERS].format(now)));
  const dir = dirname(target);
  if (!existsSync(dir)) {
    throw new ReceiverError('runtime', `the directory ${dir} does not exist`, {
      hint: `create it, readable only by the service's user: install -d -m 0700 -o receiver -g receiver ${dir}`,
    });
  }
  const live = databaseFile(target, database);
  if (live !== undefined) {
    throw new ReceiverError('usage', `${target} ${live}; nothing was written`, {
      hint: 'name a file in a backup directory, e.g. /var/backups/receiver/receiver-{date}.db',
    });
  }
  const exists = lstatQuietly(target) !== undefined;
  if (exists && options.force !== true) {
    throw new ReceiverError('runtime', `${target} already exists; nothing was written`, {
      hint: hasPlaceholder
        ? 'pass --force to replace it, or use {datetime} in the name to keep several copies a day'
        : 'pass --force to replace it, or choose another name',
    });
  }

  // What killed runs left behind (hundreds of MB each) goes before this copy needs the space.
  const leftovers = removeLeftovers(dir, basename(template));
  // The temporary copy: hidden, 0600 (a copy holds every stored body), created empty because
  // VACUUM INTO writes only into an empty file.
  const partial = join(dir, partialName(basename(target), process.pid, now.getTime()));
  let result: BackupResult;
  try {
    closeSync(openSync(partial, 'wx', 0o600));
  } catch (e) {
    throw new ReceiverError('runtime', `cannot write in ${dir}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`, {
      hint: `run the backup as a user who may write to ${dir} (the service's user: receiver backup through contrib/receiver.sh)`,
    });
  }
  const progress = io.stderr.isTTY === true && io.stderr.fd !== undefined ? await drawProgress(database, partial, io.stderr) : undefined;
  try {
    result = backupSqlite(database, partial, { busyTimeoutMs: Math.max(config.busyTimeoutMs, 5000), onChecking: () => progress?.checking() });
    if (options.force === true) renameSync(partial, target);
    else {
      // link() never replaces: a file created under this name meanwhile is not overwritten.
      linkSync(partial, target);
      unlinkSync(partial);
    }
    syncDirectory(dir);
  } catch (e) {
    removeQuietly(partial);
    removeQuietly(`${partial}-journal`);
    if (e instanceof ReceiverError) throw e;
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'EEXIST')
      throw new ReceiverError('runtime', `${target} appeared while the copy was made; nothing was written`, { hint: 'pass --force to replace it' });
    throw new ReceiverError('runtime', `cannot write ${target}: ${code ?? (e as Error).message}`, {
      hint: `check the free space and permissions of ${dir}`,
      cause: e,
    });
  } finally {
    await progress?.end();
  }

  const bytes = statSync(target).size;
  const rows = Object.entries(result.rows)
    .map(([table, n]) => `${n} ${table}`)
    .join(', ');
  const lines = leftovers.map((name) => `removed ${join(dir, name)} (left by a backup that was killed)`);
  lines.push(`wrote ${target} (${formatBytes(bytes)}, schema version ${result.schemaVersion}, integrity ok): ${rows}`);
  if (exists) lines.push(`replaced the earlier ${basename(target)} (--force)`);
  if (options.keep !== undefined) {
    const removed = rotate(dir, basename(template), options.keep, basename(target));
    for (const name of removed) lines.push(`removed ${join(dir, name)}`);
    lines.push(`kept the ${options.keep} newest ${options.keep === 1 ? 'copy' : 'copies'} named like ${basename(template)}`);
  }
  io.stdout.write(`${lines.join('\n')}\n`);
}

/**
 * `--keep N`: the files in `dir` whose name is `template` with each placeholder replaced by
 * a date or time of its format are earlier copies; all but the N newest by name (the names
 * sort in time order) are deleted. Returns the names deleted. `written` is never deleted.
 */
function rotate(dir: string, template: string, keep: number, written: string): string[] {
  const pattern = new RegExp(`^${namePattern(template)}$`);
  const copies = readdirSync(dir, { withFileTypes: true })
    .filter((d) => d.isFile() && pattern.test(d.name))
    .map((d) => d.name)
    .sort()
    .reverse();
  const removed: string[] = [];
  for (const name of copies.slice(keep)) {
    if (name === written) continue;
    unlinkSync(join(dir, name));
    removed.push(name);
  }
  return removed;
}

/** A regular expression source matching the names `template` gives, a date or time where each placeholder is. */
function namePattern(template: string): string {
  // split() with a capturing group keeps the placeholders between the literal parts.
  return template
    .split(/(\{date\}|\{datetime\})/)
    .map((p) => (Object.hasOwn(PLACEHOLDERS, p) ? PLACEHOLDERS[p as keyof typeof PLACEHOLDERS].pattern : escapeRegExp(p)))
    .join('');
}

/**
 * Deletes the partial copies and journals that earlier runs of this backup (a name like
 * `template`) left in `dir` when they were killed: files named as partialName names them,
 * owned by this user, whose process is gone. A copy another run is writing now (its
 * process alive), a file of another user, a link or a directory, and any other name, stay.
 * Returns the names deleted.
 */
function removeLeftovers(dir: string, template: string): string[] {
  const pattern = new RegExp(`^\\.${namePattern(template)}${PARTIAL_SUFFIX}$`);
  const uid = process.geteuid?.();
  const removed: string[] = [];
  for (const name of readdirSync(dir).sort()) {
    const m = pattern.exec(name);
    if (m === null) continue;
    const pid = Number(m[1]);
    const st = lstatQuietly(join(dir, name));
    if (st === undefined || !st.isFile() || (uid !== undefined && st.uid !== uid) || pid === process.pid || isRunning(pid)) continue;
    unlinkSync(join(dir, name));
    removed.push(name);
  }
  return removed;
}

/** Whether a process with this id exists (one of another user counts: kill() says EPERM). */
function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/**
 * Why `target` is the live database, if it is: what it names once every symbolic link is
 * followed, in the file itself and in every directory above it (a link that points
 * nowhere yet included), is the database file or its -wal, -shm or -journal file, or
 * another name (a hard link) for one of them. Writing the copy there would replace the
 * database under the running receiver.
 */
function databaseFile(target: string, database: string): string | undefined {
  const to = followLinks(target);
  const names = new Map<string, string>();
  // SQLite keeps its -wal beside the file it opened once links are followed; the name as
  // configured (the directory's links followed) is counted too.
  for (const db of [followLinks(database), join(followLinks(dirname(resolve(database))), basename(database))]) {
    names.set(db, 'the database itself');
    for (const suffix of ['-wal', '-shm', '-journal']) names.set(db + suffix, `the database's ${suffix} file`);
  }
  const what = names.get(to);
  if (what !== undefined) return to === resolve(target) ? `is ${what}` : `resolves to ${to}, ${what}`;
  const st = statQuietly(to);
  if (st === undefined) return undefined;
  for (const [file, which] of names) {
    const other = statQuietly(file);
    if (other !== undefined && other.dev === st.dev && other.ino === st.ino) return `is another name (a hard link) for ${file}, ${which}`;
  }
  return undefined;
}

/**
 * `path`, absolute, with every symbolic link followed: in the last component and in every
 * directory, whether or not the file it ends at exists.
 */
function followLinks(path: string, depth = 0): string {
  const abs = resolve(path);
  try {
    return realpathSync(abs);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code !== 'ENOENT' && code !== 'ENOTDIR') throw new ReceiverError('usage', `cannot resolve ${path}: ${code ?? (e as Error).message}`);
  }
  // Missing: a dangling link is followed to where it points; else its directory is resolved.
  if (depth > 40) throw new ReceiverError('usage', `cannot resolve ${path}: too many levels of symbolic links`);
  const st = lstatQuietly(abs);
  if (st?.isSymbolicLink() === true) return followLinks(resolve(dirname(abs), readlinkSync(abs)), depth + 1);
  const dir = dirname(abs);
  return dir === abs ? abs : join(followLinks(dir, depth + 1), basename(abs));
}

function lstatQuietly(path: string) {
  try {
    return lstatSync(path);
  } catch {
    return undefined;
  }
}

function statQuietly(path: string) {
  try {
    return statSync(path);
  } catch {
    return undefined;
  }
}

/**
 * On a terminal, a line on stderr rewritten in place while the copy is written and then
 * checked: how much is written against the database's size, then how long the check has
 * run. VACUUM INTO and integrity_check each hold this thread for as long as they run, so a
 * worker thread draws it, writing to stderr's descriptor itself. Resolves once the first
 * line is drawn.
 */
async function drawProgress(database: string, partial: string, stderr: CliIo['stderr']): Promise<{ checking(): void; end(): Promise<void> }> {
  const total = [database, `${database}-wal`].reduce((n, f) => n + (statQuietly(f)?.size ?? 0), 0);
  const worker = new Worker(PROGRESS_WORKER, { eval: true, workerData: { fd: stderr.fd, file: partial, name: basename(database), total } });
  await new Promise<void>((resolve, reject) => {
    worker.once('message', () => resolve());
    worker.once('error', reject);
  });
  return {
    checking: () => worker.postMessage('checking'),
    async end() {
      await worker.terminate();
      stderr.write('\r\x1b[K');
    },
  };
}

const PROGRESS_WORKER = `
const { workerData: w, parentPort } = require('node:worker_threads');
const { statSync, writeSync } = require('node:fs');
const mib = (n) => (n / 1048576).toFixed(1);
let phase = 'copying';
let since = Date.now();
function draw() {
  let text;
  if (phase === 'copying') {
    let size = 0;
    try { size = statSync(w.file).size; } catch {}
    const percent = w.total > 0 ? Math.min(99, Math.floor((size * 100) / w.total)) : 0;
    text = 'copying ' + w.name + ': ' + mib(size) + ' MiB of at most ' + mib(w.total) + ' MiB (' + percent + '%)';
  } else text = 'checking the copy (integrity_check): ' + Math.round((Date.now() - since) / 1000) + ' s';
  try { writeSync(w.fd, '\\r\\x1b[K' + text); } catch {}
}
parentPort.on('message', (m) => { phase = m; since = Date.now(); draw(); });
draw();
parentPort.postMessage('drawn');
setInterval(draw, 500);
`;

/** The directory entry (the new name) is on disk too, not only the file's bytes. */
function syncDirectory(dir: string): void {
  const fd = openSync(dir, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

function removeQuietly(file: string): void {
  try {
    unlinkSync(file);
  } catch {
    // Never created, or already gone.
  }
}

function formatBytes(n: number): string {
  if (n < 1024) return `${n} bytes`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = n / 1024;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u += 1;
  }
  return `${v.toFixed(1)} ${units[u]}`;
}
