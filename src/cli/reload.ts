import { execFileSync } from 'node:child_process';
import { resolve } from 'node:path';
import type { Command } from 'commander';
import { assertRunnable } from '../config/check.js';
import type { Config } from '../config/load.js';
import { ReceiverError } from '../errors.js';
import { addCommonOptions, configAndEnvFrom, positiveInt, printable, printJson, type CommonOptions } from './common.js';
import { ExitCode, type CliIo } from './io.js';
import { processIsServe, readPidFile, readReloadRecord, reloadRecordPath, type ReloadRecord } from './pid-file.js';

interface ReloadOptions extends CommonOptions {
  pid?: number;
  pidFile?: string;
  unit: string;
  timeout: number;
  json?: boolean;
}

export function registerReload(program: Command, io: CliIo): void {
  addCommonOptions(program.command('reload'))
    .description("check the configuration as check-config does, then have the running serve reload it (SIGHUP) and print serve's outcome")
    .option('--pid <pid>', "serve's process id (default: the pid file's, else the systemd unit's MainPID)", positiveInt('--pid'))
    .option('--pid-file <file>', 'the pid file serve writes (overrides "pidFile"; also $RECEIVER_PID_FILE)')
    .option('--unit <name>', 'the systemd unit whose MainPID is serve when no pid or pid file is given', 'receiver')
    .option('--timeout <seconds>', "how long to wait for serve's outcome", positiveInt('--timeout'), 30)
    .option('--json', 'print one JSON document')
    .action((options: ReloadOptions) => reload(options, io));
}

/**
 * `receiver reload`: a configuration check-config refuses is reported (exit 2) and serve is
 * never signalled, since it would refuse it too. Otherwise SIGHUP goes to serve, checked
 * first to be one (/proc/<pid>/cmdline), and serve's own outcome is read from the record it
 * writes beside its pid file: applied (what changed, by name), refused (a restart field),
 * or failed (exit 1 for both).
 */
async function reload(options: ReloadOptions, io: CliIo): Promise<void> {
  const { config, env } = configAndEnvFrom(options, io.env);
  await assertRunnable(config, { cwd: process.cwd(), env });
  const { pid, from } = findServe(options, config);
  const found = processIsServe(pid);
  if (!found.running) {
    throw new ReceiverError('runtime', `serve is not running: ${from} names process ${pid}, which does not exist`, {
      hint:
        config.pidFile !== undefined && options.pid === undefined
          ? `start serve; a serve that stopped without a clean exit leaves ${config.pidFile} behind (remove it)`
          : 'start serve, or name the running one with --pid or --pid-file',
    });
  }
  if (!found.serve) {
    throw new ReceiverError('runtime', `process ${pid} (${from}) is not a receiver serve: ${shortCommand(found.command ?? '')}; it was not signalled`, {
      hint: 'name the running serve with --pid, --pid-file or --unit (a stale pid file may name a process that took its number)',
    });
  }
  // A record that began reading the files at or after this moment reflects the files checked above.
  const sentAt = io.now();
  try {
    process.kill(pid, 'SIGHUP');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw new ReceiverError('runtime', `cannot signal serve ${pid} (${code ?? String(e)})`, {
      hint: code === 'EPERM' ? "run as root or as the service's user" : 'check that serve is still running',
    });
  }
  if (config.pidFile === undefined) {
    throw new ReceiverError('runtime', `sent SIGHUP to serve ${pid} (${from}), but its outcome is unknown: serve writes it only beside its pid file`, {
      hint: `read its log (journalctl -u ${options.unit} -o cat -n 5: "config reloaded" or "config reload failed"); set "pidFile" (serve --pid-file) for reload to print it`,
    });
  }
  const record = await outcome(config.pidFile, pid, { sentAt, timeoutMs: options.timeout * 1000, unit: options.unit }, io);
  // What was checked above is what serve read only when they are the same file.
  if (record.file !== resolve(config.file)) {
    io.stderr.write(`Warning: serve ${pid} reads ${record.file}; this command checked ${resolve(config.file)} (pass -c ${record.file})\n`);
  }
  report(record, options.json === true, io);
}

/** Another process's command line, for a message: controls escaped, at most 200 characters. */
const shortCommand = (command: string) => printable(command.length > 200 ? `${command.slice(0, 200)}...` : command);

/** serve's pid, and where it came from (for messages): --pid, the pid file, or the systemd unit. */
function findServe(options: ReloadOptions, config: Config): { pid: number; from: string } {
  if (options.pid !== undefined) return { pid: options.pid, from: '--pid' };
  if (config.pidFile !== undefined) {
    let pid: number | undefined;
    try {
      pid = readPidFile(config.pidFile);
    } catch (e) {
      throw new ReceiverError('runtime', `cannot read the pid file ${config.pidFile}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`, {
        hint: "run as root or as the service's user, or pass --pid",
      });
    }
    if (pid === undefined) {
      throw new ReceiverError('runtime', `serve is not running: there is no pid file ${config.pidFile}`, {
        hint: 'start serve (it writes the pid file once it listens), or name a serve started with another pid file with --pid-file',
      });
    }
    return { pid, from: `the pid file ${config.pidFile}` };
  }
  let text: string;
  try {
    text = execFileSync('systemctl', ['show', '--property', 'MainPID', '--value', options.unit], {
      encoding: 'utf8',
      timeout: 10_000,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
  } catch (e) {
    throw new ReceiverError(
      'usage',
      `no serve named: no --pid, no pid file ("pidFile" unset), and systemctl could not be asked (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`,
      {
        hint: 'pass --pid <pid> or --pid-file <file>, or set "pidFile" in the configuration',
      },
    );
  }
  const pid = Number(text.trim());
  if (!Number.isInteger(pid) || pid <= 0) {
    throw new ReceiverError('runtime', `the systemd unit ${options.unit} has no running main process (MainPID ${text.trim() || 'empty'})`, {
      hint: `systemctl status ${options.unit}; or name serve with --pid, --pid-file or --unit`,
    });
  }
  return { pid, from: `the unit ${options.unit}'s MainPID` };
}

/** Waits for serve's record of a reload that began at or after `sentAt`. */
async function outcome(pidFile: string, pid: number, wait: { sentAt: number; timeoutMs: number; unit: string }, io: CliIo): Promise<ReloadRecord> {
  const { sentAt, timeoutMs } = wait;
  const deadline = io.now() + timeoutMs;
  for (;;) {
    const record = readReloadRecord(pidFile);
    if (record !== undefined && record.pid === pid && record.startedAt >= sentAt) return record;
    if (!processIsServe(pid).running) {
      throw new ReceiverError('runtime', `serve ${pid} exited before it reported the outcome of the reload`, {
        hint: `read its log (journalctl -u ${wait.unit} -o cat -n 20), and start it again`,
      });
    }
    if (io.now() >= deadline) {
      throw new ReceiverError('runtime', `serve ${pid} was signalled but wrote no outcome to ${reloadRecordPath(pidFile)} within ${timeoutMs / 1000} s`, {
        hint: `read its log (journalctl -u ${wait.unit} -o cat -n 5: "config reloaded" or "config reload failed"); a serve started with another pid file, or without one, writes none there; a longer --timeout for a slow check`,
      });
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** "routesAdded" -> "routes added". */
const label = (field: string) => field.replace(/[A-Z]/g, (c) => ` ${c.toLowerCase()}`);

function report(record: ReloadRecord, json: boolean, io: CliIo): void {
  if (json) {
    printJson(io.stdout, {
      pid: record.pid,
      result: record.result,
      file: record.file,
      changes: record.changes ?? {},
      ...(record.error === undefined ? {} : { error: record.error }),
      ...(record.hint === undefined ? {} : { hint: record.hint }),
      ...(record.restart === undefined ? {} : { restart: record.restart }),
      startedAt: new Date(record.startedAt).toISOString(),
      finishedAt: new Date(record.finishedAt).toISOString(),
    });
    if (record.result !== 'applied') throw new ExitCode(1);
    return;
  }
  if (record.result !== 'applied') {
    throw new ReceiverError(
      'runtime',
      `serve ${record.pid} ${record.result === 'refused' ? 'refused the reload' : 'could not reload'}: ${record.error ?? ''}`,
      {
        ...(record.hint === undefined ? {} : { hint: record.hint }),
      },
    );
  }
  const changes = Object.entries(record.changes ?? {});
  if (changes.length === 0) return void io.stdout.write(`serve ${record.pid} reloaded ${record.file}: nothing changed\n`);
  io.stdout.write(`serve ${record.pid} reloaded ${record.file}\n${changes.map(([k, names]) => `  ${label(k)}: ${names.join(', ')}\n`).join('')}`);
}
