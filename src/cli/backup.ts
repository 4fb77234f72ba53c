import { closeSync, existsSync, fsyncSync, linkSync, openSync, readdirSync, realpathSync, renameSync, statSync, unlinkSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
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
 * `receiver backup <file>`: a consistent, checked copy of a running receiver's SQLite
 * database. The copy is written beside its destination under a temporary name, checked,
 * synced, and only then given its name, so a failed or interrupted backup never leaves a
 * half-written file under a backup's name (nor replaces a good one with it).
 */
export function backup(template: string, options: BackupOptions, io: CliIo): void {
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
  if (sameFile(target, database)) {
    throw new ReceiverError('usage', `${target} is the database itself`, {
      hint: 'name a file in a backup directory, e.g. /var/backups/receiver/receiver-{date}.db',
    });
  }
  const exists = existsSync(target);
  if (exists && options.force !== true) {
    throw new ReceiverError('runtime', `${target} already exists; nothing was written`, {
      hint: hasPlaceholder
        ? 'pass --force to replace it, or use {datetime} in the name to keep several copies a day'
        : 'pass --force to replace it, or choose another name',
    });
  }

  // The temporary copy: beside the target (so the rename is atomic), hidden, 0600 (a copy
  // holds every stored body), created empty because VACUUM INTO writes only into an empty file.
  const partial = join(dir, `.${basename(target)}.partial-${process.pid}-${now.getTime()}`);
  let result: BackupResult;
  try {
    closeSync(openSync(partial, 'wx', 0o600));
  } catch (e) {
    throw new ReceiverError('runtime', `cannot write in ${dir}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`, {
      hint: `run the backup as a user who may write to ${dir} (the service's user: receiver backup through contrib/receiver.sh)`,
    });
  }
  try {
    result = backupSqlite(database, partial, { busyTimeoutMs: Math.max(config.busyTimeoutMs, 5000) });
    if (options.force === true) renameSync(partial, target);
    else {
      // link() never replaces: a file created under this name meanwhile is not overwritten.
      linkSync(partial, target);
      unlinkSync(partial);
    }
    syncDirectory(dir);
  } catch (e) {
    removeQuietly(partial);
    if (e instanceof ReceiverError) throw e;
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'EEXIST')
      throw new ReceiverError('runtime', `${target} appeared while the copy was made; nothing was written`, { hint: 'pass --force to replace it' });
    throw new ReceiverError('runtime', `cannot write ${target}: ${code ?? (e as Error).message}`, {
      hint: `check the free space and permissions of ${dir}`,
      cause: e,
    });
  }

  const bytes = statSync(target).size;
  const rows = Object.entries(result.rows)
    .map(([table, n]) => `${n} ${table}`)
    .join(', ');
  const lines = [`wrote ${target} (${formatBytes(bytes)}, schema version ${result.schemaVersion}, integrity ok): ${rows}`];
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
  // split() with a capturing group keeps the placeholders between the literal parts.
  const parts = template.split(/(\{date\}|\{datetime\})/);
  const pattern = new RegExp(
    `^${parts.map((p) => (Object.hasOwn(PLACEHOLDERS, p) ? PLACEHOLDERS[p as keyof typeof PLACEHOLDERS].pattern : escapeRegExp(p))).join('')}$`,
  );
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

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/** True when `target` names the database file or its -wal/-shm, through any symlink or relative path. */
function sameFile(target: string, database: string): boolean {
  const real = (p: string) => {
    try {
      return join(realpathSync(dirname(p)), basename(p));
    } catch {
      return resolve(p);
    }
  };
  const t = real(target);
  const db = real(database);
  return t === db || t === `${db}-wal` || t === `${db}-shm`;
}

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
