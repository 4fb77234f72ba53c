import { resolve } from 'node:path';
import { InvalidArgumentError, type Command } from 'commander';
import { exposedSecretFiles } from '../config/secret-files.js';
import { becomeServiceUser, exposureWarning } from '../config/service-user.js';
import { assertRunnable } from '../config/check.js';
import { RestartNeeded, unchanged, type ConfigChanges } from '../config/changes.js';
import { loadConfigAndEnv, type Config } from '../config/load.js';
import { startPrivilegedReader } from '../config/reader.js';
import { readText } from '../config/secret.js';
import { createLogger, logStyle, stderrWriter } from '../log.js';
import { ReceiverError } from '../errors.js';
import { startReceiver } from '../server.js';
import { addCommonOptions, overridesFrom, type CommonOptions } from './common.js';
import type { CliIo } from './io.js';
import { processIsServe, readPidFile, removePidFile, writePidFile, writeReloadRecord, type ReloadRecord } from './pid-file.js';

interface ServeOptions extends CommonOptions {
  host?: string;
  port?: number;
  logLevel?: string;
  logFormat?: string;
  user?: string;
  pidFile?: string;
}

function portNumber(value: string): number {
  if (!/^\d{1,5}$/.test(value) || Number(value) > 65535) throw new InvalidArgumentError('--port must be a whole number from 0 to 65535, e.g. --port 8080.');
  return Number(value);
}

/** The `config reloaded` line's fields: what changed, by name; lists left out when empty. */
function changedFields(c: ConfigChanges): Record<string, string[]> {
  const fields: Record<string, string[]> = {
    sourcesAdded: c.sources.added,
    sourcesRemoved: c.sources.removed,
    sourcesChanged: c.sources.changed,
    routesAdded: c.routes.added,
    routesRemoved: c.routes.removed,
    routesChanged: c.routes.changed,
    secretsRotated: c.secretsRotated,
    environment: c.environment,
    settings: c.settings,
  };
  return Object.fromEntries(Object.entries(fields).filter(([, v]) => v.length > 0));
}

export function registerServe(program: Command, io: CliIo): void {
  addCommonOptions(program.command('serve'))
    .description('HTTP ingress and the drain, in one process; SIGHUP reloads the configuration, SIGTERM stops it cleanly')
    .option('--host <host>', 'address to listen on (overrides "host"; also $RECEIVER_HOST)')
    .option('--port <port>', 'port to listen on, 0 for any free port (overrides "port"; also $RECEIVER_PORT)', portNumber)
    .option('--log-level <level>', 'fatal, error, warn, info, debug, trace or silent (overrides "log.level"; also $RECEIVER_LOG_LEVEL)')
    .option('--log-format <format>', 'auto, json or pretty (overrides "log.format"; also $RECEIVER_LOG_FORMAT)')
    .option('--user <name>', 'started as root: read the configuration and secrets, then run as this user (overrides "user"; also $RECEIVER_USER)')
    .option(
      '--pid-file <file>',
      'write the process id here once listening, and each reload\'s outcome beside it, for `receiver reload` (overrides "pidFile"; also $RECEIVER_PID_FILE)',
    )
    .action((options: ServeOptions) => serve(options, io));
}

/**
 * `receiver serve`: the receiver (src/server.ts) as a process. Configuration first; a
 * start-up failure rejects with Error/Try (exit 1, or 2 for configuration), so systemd sees
 * a failed start. What belongs to the process is here: exiting on a bug, and SIGTERM/SIGINT.
 */
export async function serve(options: ServeOptions, io: CliIo): Promise<void> {
  const overrides = overridesFrom(options);
  const loaded = loadConfigAndEnv(overrides, io.env);
  const config = loaded.config;
  // Started as root with a service user: the reader of what a reload reads stays root
  // (see src/config/reader.ts); then this process becomes the service's user.
  const files = io.env === process.env && config.user !== undefined && process.geteuid?.() === 0 ? await startPrivilegedReader(overrides) : undefined;
  if (io.env === process.env) becomeServiceUser(config.user);
  // Every line goes through the process's stderr writer: bounded, never blocking ingest,
  // written out on exit (process.exit included).
  const style = logStyle(config.log.format, io.stderr, io.env);
  stderrWriter().configure({ maxBytes: config.log.bufferBytes, style });
  const logger = createLogger(config.log.level, { style });
  const deliveryLogger = createLogger(config.log.level, { redact: false, style });

  // A bug must not leave a half-working process: log it as one line and exit 1, for
  // systemd to restart (Restart=on-failure). Committed events are safe; claims come back.
  // The exit writes what waits for stderr, this line last (synchronously, best effort).
  const crash = (what: string) => (e: unknown) => {
    logger.fatal({ err: e }, what);
    process.exit(1);
  };
  process.on('uncaughtException', crash('uncaught exception'));
  // Module code runs in the module host, never here: a rejection nobody handled is a bug.
  process.on('unhandledRejection', crash('unhandled promise rejection'));

  const exposedFiles = (c: Config) => {
    for (const f of exposedSecretFiles(c)) logger.warn({ file: f.path, mode: f.mode.toString(8).padStart(4, '0'), fix: f.fix }, f.message);
  };
  exposedFiles(config);
  const exposure = exposureWarning(config);
  if (exposure !== undefined) logger.warn({ fix: exposure.fix }, exposure.message);

  // Another serve that writes this pid file: starting would take its file (and its
  // reloads' records) from it, and `receiver reload` would signal the wrong process.
  if (config.pidFile !== undefined) refuseLivePidFile(config.pidFile);

  const receiver = await startReceiver(config, {
    logger,
    deliveryLogger,
    logStyle: style,
    processMetrics: true,
    onFatal: crash('drain thread failed'),
    env: loaded.env,
  });
  // After listening, so a serve that could not start leaves a running one's file alone.
  const pidFile = config.pidFile;
  if (pidFile !== undefined) {
    try {
      writePidFile(pidFile, process.pid);
    } catch (e) {
      await receiver.stop(0).catch(() => undefined);
      throw new ReceiverError('runtime', `cannot write the pid file ${pidFile} (${(e as NodeJS.ErrnoException).code ?? String(e)})`, {
        hint: "make its directory writable by the service's user (e.g. /var/lib/receiver/receiver.pid), or leave pidFile unset",
      });
    }
  }
  let reloads = 0;
  const record = (r: Omit<ReloadRecord, 'pid' | 'seq' | 'finishedAt' | 'file'>) => {
    if (pidFile === undefined) return;
    try {
      writeReloadRecord(pidFile, { pid: process.pid, seq: ++reloads, ...r, finishedAt: io.now(), file: resolve(config.file) });
    } catch (e) {
      logger.warn({ file: pidFile, err: String(e) }, 'reload outcome not written beside the pid file');
    }
  };

  // SIGHUP: the configuration file, the environment file and every `file:` secret are
  // read again and checked as check-config checks them; only then is the new
  // configuration swapped in. A configuration that fails any of it leaves the running one
  // as it is. Reloads run one at a time; signals meanwhile make one more.
  const reloadOnce = async () => {
    const startedAt = io.now();
    try {
      const next = loadConfigAndEnv(overrides, io.env, files === undefined ? readText : await files.read());
      await assertRunnable(next.config, { cwd: process.cwd(), env: next.env });
      const changes = await receiver.reload(next.config, next.env);
      receiver.metrics.observeReload('ok');
      logger.info({ file: next.config.file, ...changedFields(changes) }, unchanged(changes) ? 'config reloaded: nothing changed' : 'config reloaded');
      record({ startedAt, result: 'applied', changes: changedFields(changes) });
      exposedFiles(next.config);
    } catch (e) {
      receiver.metrics.observeReload('error');
      const err = e as { message?: unknown; hint?: unknown };
      const hint = typeof err.hint === 'string' ? { hint: err.hint } : {};
      logger.error({ err: String(err.message ?? e), ...hint }, 'config reload failed');
      record({
        startedAt,
        ...(e instanceof RestartNeeded ? { result: 'refused', restart: e.fields } : { result: 'failed' }),
        error: String(err.message ?? e),
        ...hint,
      });
    }
  };
  let reloading: Promise<void> | undefined;
  let again = false;
  const reload = () => {
    if (reloading !== undefined) {
      again = true;
      return;
    }
    reloading = (async () => {
      do {
        again = false;
        await reloadOnce();
      } while (again && !stopping);
      reloading = undefined;
    })();
  };
  process.on('SIGHUP', reload);

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) {
      // A second Ctrl-C: leave now. Nothing is lost: a sender got a 2xx only for a committed
      // row, and a running effect is retried after its lease.
      logger.warn({ signal }, 'second signal: exiting without waiting');
      process.exit(1);
    }
    stopping = true;
    const graceMs = receiver.current().config.shutdownGraceSeconds * 1000;
    const started = io.now();
    logger.info({ signal, graceMs }, 'shutting down');
    let code = 0;
    try {
      await receiver.stop(graceMs);
    } catch {
      // Logged by stop().
      code = 1;
    }
    if (pidFile !== undefined) removePidFile(pidFile, process.pid);
    logger.info({ signal, tookMs: io.now() - started }, 'stopped');
    process.exit(code);
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
}

/** Refuses to start while the pid file names another running receiver serve; a stale one (a crash) is taken over. */
function refuseLivePidFile(pidFile: string): void {
  let pid: number | undefined;
  try {
    pid = readPidFile(pidFile);
  } catch {
    // Not a pid: nothing of another serve's, replaced once this one listens.
    return;
  }
  if (pid === undefined || pid === process.pid) return;
  let serve: boolean;
  try {
    serve = processIsServe(pid).serve;
  } catch {
    // Its command line cannot be read (another user's, hidden): not known to be a serve.
    return;
  }
  if (!serve) return;
  throw new ReceiverError('runtime', `another receiver serve (pid ${pid}) runs with the pid file ${pidFile}`, {
    hint: `stop it first (kill ${pid}), or give this serve a pidFile of its own`,
  });
}
