import { readFileSync, renameSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { basename } from 'node:path';

/**
 * What serve leaves for `receiver reload` when `pidFile` is set: the pid file (its process
 * id and a newline, as systemd's PIDFile= and `kill $(cat ...)` read it), and beside it
 * the outcome of its last reload, `<pidFile>.reload.json`. Both are replaced whole (a
 * temporary file renamed over the old one), so a reader never sees half of one.
 */

/** The outcome of one reload attempt of serve `pid`, by name only: never a secret's value. */
export interface ReloadRecord {
  pid: number;
  /** Reload attempts of this process, from 1. */
  seq: number;
  /** When serve began reading the files (ms since the epoch): the record answers a signal sent before it. */
  startedAt: number;
  finishedAt: number;
  /** The configuration file serve read, as an absolute path. */
  file: string;
  /** `applied` (`changes` may be empty), `refused` (a restart field changed: `restart`), `failed` (anything else). */
  result: 'applied' | 'refused' | 'failed';
  /** What changed, as the `config reloaded` log line lists it (lists left out when empty). */
  changes?: Record<string, string[]>;
  /** Refused or failed: the message and hint of the `config reload failed` line. */
  error?: string;
  hint?: string;
  /** Refused: the fields that need a restart. */
  restart?: string[];
}

export const reloadRecordPath = (pidFile: string): string => `${pidFile}.reload.json`;

function replaceFile(path: string, text: string): void {
  const tmp = `${path}.${process.pid}.tmp`;
  rmSync(tmp, { force: true });
  // Created anew (never through a link someone put there), then renamed over the old file.
  writeFileSync(tmp, text, { flag: 'wx' });
  renameSync(tmp, path);
}

export function writePidFile(pidFile: string, pid: number): void {
  replaceFile(pidFile, `${pid}\n`);
}

export function writeReloadRecord(pidFile: string, record: ReloadRecord): void {
  replaceFile(reloadRecordPath(pidFile), `${JSON.stringify(record)}\n`);
}

/** The pid in `pidFile`; undefined when there is no such file. Throws when it holds no pid. */
export function readPidFile(pidFile: string): number | undefined {
  let text: string;
  try {
    text = readFileSync(pidFile, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw e;
  }
  const pid = /^\s*(\d+)\s*$/.exec(text)?.[1];
  if (pid === undefined || Number(pid) <= 0) throw new Error(`${pidFile} does not hold a process id`);
  return Number(pid);
}

/** The last record of `pidFile`'s serve; undefined when there is none (yet) or it is not one. */
export function readReloadRecord(pidFile: string): ReloadRecord | undefined {
  try {
    const r = JSON.parse(readFileSync(reloadRecordPath(pidFile), 'utf8')) as ReloadRecord;
    return typeof r.pid === 'number' && typeof r.startedAt === 'number' ? r : undefined;
  } catch {
    return undefined;
  }
}

/** On a clean exit: the pid file and the record, each only while it is still this process's. */
export function removePidFile(pidFile: string, pid: number): void {
  const remove = (path: string) => {
    try {
      unlinkSync(path);
    } catch {
      // Gone already.
    }
  };
  let owner: number | undefined;
  try {
    owner = readPidFile(pidFile);
  } catch {
    return;
  }
  if (owner !== pid) return;
  if (readReloadRecord(pidFile)?.pid === pid) remove(reloadRecordPath(pidFile));
  remove(pidFile);
}

/**
 * Whether `pid` is a running `receiver serve` (node .../receiver.js serve, or the single
 * executable `receiver... serve`), read from /proc/<pid>/cmdline: `running` false when
 * there is no such process, `serve` false for any other (the privileged reader, the
 * module host, an unrelated process that took a stale pid).
 */
export function processIsServe(pid: number): { running: boolean; serve: boolean; command?: string } {
  let cmdline: string;
  try {
    cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ESRCH') return { running: false, serve: false };
    throw e;
  }
  // A zombie (exited, not yet reaped) has an empty command line.
  if (cmdline === '') return { running: false, serve: false };
  const args = cmdline.replace(/\0$/, '').split('\0');
  const at = args.indexOf('serve');
  const serve = at >= 1 && /^receiver/.test(basename(args[at - 1]!));
  return { running: true, serve, command: args.join(' ') };
}
