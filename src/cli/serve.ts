import { InvalidArgumentError, type Command } from 'commander';
import { exposedSecretFiles } from '../config/secret-files.js';
import { exposureWarning } from '../config/service-user.js';
import { createLogger, logStyle, stderrWriter } from '../log.js';
import { startReceiver } from '../server.js';
import { addCommonOptions, configFrom, type CommonOptions } from './common.js';
import type { CliIo } from './io.js';

interface ServeOptions extends CommonOptions {
  host?: string;
  port?: number;
  logLevel?: string;
  logFormat?: string;
  user?: string;
}

function portNumber(value: string): number {
  if (!/^\d{1,5}$/.test(value) || Number(value) > 65535) throw new InvalidArgumentError('--port must be a whole number from 0 to 65535, e.g. --port 8080.');
  return Number(value);
}

export function registerServe(program: Command, io: CliIo): void {
  addCommonOptions(program.command('serve'))
    .description('HTTP ingress and the drain, in one process; SIGTERM stops it cleanly')
    .option('--host <host>', 'address to listen on (overrides "host"; also $RECEIVER_HOST)')
    .option('--port <port>', 'port to listen on, 0 for any free port (overrides "port"; also $RECEIVER_PORT)', portNumber)
    .option('--log-level <level>', 'fatal, error, warn, info, debug, trace or silent (overrides "log.level"; also $RECEIVER_LOG_LEVEL)')
    .option('--log-format <format>', 'auto, json or pretty (overrides "log.format"; also $RECEIVER_LOG_FORMAT)')
    .option('--user <name>', 'started as root: read the configuration and secrets, then run as this user (overrides "user"; also $RECEIVER_USER)')
    .action((options: ServeOptions) => serve(options, io));
}

/**
 * `receiver serve`: the receiver (src/server.ts) as a process. Configuration first; a
 * start-up failure rejects with Error/Try (exit 1, or 2 for configuration), so systemd sees
 * a failed start. What belongs to the process is here: exiting on a bug, and SIGTERM/SIGINT.
 */
export async function serve(options: ServeOptions, io: CliIo): Promise<void> {
  const config = configFrom(options, io.env);
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

  for (const f of exposedSecretFiles(config, io.env)) logger.warn({ file: f.path, mode: f.mode.toString(8).padStart(4, '0'), fix: f.fix }, f.message);
  const exposure = exposureWarning(config);
  if (exposure !== undefined) logger.warn({ fix: exposure.fix }, exposure.message);

  const receiver = await startReceiver(config, { logger, deliveryLogger, logStyle: style, processMetrics: true, onFatal: crash('drain thread failed') });

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) {
      // A second Ctrl-C: leave now. Nothing is lost: a sender got a 2xx only for a committed
      // row, and a running effect is retried after its lease.
      logger.warn({ signal }, 'second signal: exiting without waiting');
      process.exit(1);
    }
    stopping = true;
    const graceMs = config.shutdownGraceSeconds * 1000;
    const started = io.now();
    logger.info({ signal, graceMs }, 'shutting down');
    let code = 0;
    try {
      await receiver.stop(graceMs);
    } catch {
      // Logged by stop().
      code = 1;
    }
    logger.info({ signal, tookMs: io.now() - started }, 'stopped');
    process.exit(code);
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
}
