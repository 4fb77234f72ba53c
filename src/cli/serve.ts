import { createAdaptorServer } from '@hono/node-server';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Command } from 'commander';
import { startDrain } from '../drain/loop.js';
import { createApp } from '../http/app.js';
import { createLogger } from '../log.js';
import { openStore } from '../store/open.js';
import { addCommonOptions, configFrom, type CommonOptions } from './common.js';

interface ServeOptions extends CommonOptions {
  host?: string;
  port?: number;
  logLevel?: string;
}

export function registerServe(program: Command): void {
  addCommonOptions(program.command('serve'))
    .description('HTTP ingress and the drain, in one process; SIGTERM stops it cleanly')
    .option('--host <host>', 'address to listen on (overrides "host"; also $RECEIVER_HOST)')
    .option('--port <port>', 'port to listen on, 0 for any free port (overrides "port"; also $RECEIVER_PORT)', (v) => Number(v))
    .option('--log-level <level>', 'fatal, error, warn, info, debug, trace or silent (also $RECEIVER_LOG_LEVEL)')
    .action(async (options: ServeOptions) => {
      await serve(options);
    });
}

export async function serve(options: ServeOptions): Promise<void> {
  const config = configFrom(options);
  const logger = createLogger(config.log.level);
  for (const source of config.sources.values()) {
    if (source.provider.name === 'none') {
      logger.warn({ source: source.name }, `source "${source.name}" uses provider "none": deliveries are NOT verified; use it for local testing only`);
    }
  }
  const store = await openStore(config.database, { busyTimeoutMs: config.busyTimeoutMs, server: true });
  const drain = config.drain.enabled ? startDrain({ config, store, logger }) : undefined;
  const app = createApp({
    sources: config.sources,
    store,
    maxBodyBytes: config.maxBodyBytes,
    onOutcome: (o) => logger.info({ ...o, durationMs: Math.round(o.durationMs * 100) / 100 }, 'delivery'),
    onAccepted: () => drain?.wake(),
    onError: (e) => logger.error({ err: e }, 'request failed'),
  });
  const server = createAdaptorServer({ fetch: app.fetch }) as Server;
  // Slow or stalled clients cannot hold a connection (or the process) forever.
  server.requestTimeout = config.requestTimeoutSeconds * 1000;
  server.headersTimeout = Math.min(server.requestTimeout, 10_000);
  server.keepAliveTimeout = 5000;

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(config.port, config.host, () => resolve());
  });
  const address = server.address() as AddressInfo;
  logger.info({ host: address.address, port: address.port, database: redactUrl(config.database), sources: [...config.sources.keys()] }, 'listening');

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    const graceMs = config.shutdownGraceSeconds * 1000;
    logger.info({ signal, graceMs }, 'shutting down');
    // Stop accepting; in-flight requests finish and get their answers.
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    server.closeIdleConnections();
    const force = setTimeout(() => server.closeAllConnections(), graceMs);
    await Promise.all([closed, drain?.stop(graceMs)]);
    clearTimeout(force);
    await store.close();
    logger.info('stopped');
    process.exit(0);
  };
  process.once('SIGTERM', () => void stop('SIGTERM'));
  process.once('SIGINT', () => void stop('SIGINT'));
}

/** A postgres:// URL may carry a password; logs show it without. */
export function redactUrl(database: string): string {
  return database.replace(/\/\/([^:/@]+):[^@]*@/, '//$1:***@');
}
