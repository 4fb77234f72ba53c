import { createAdaptorServer } from '@hono/node-server';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { InvalidArgumentError, type Command } from 'commander';
import type { Config } from '../config/load.js';
import { ReceiverError } from '../errors.js';
import { moduleOrigin } from '../effects/module.js';
import type { Drain } from '../drain/loop.js';
import { startDrainThread } from '../drain/thread.js';
import { createApp } from '../http/app.js';
import { startCatchUp, type CatchUpSchedule } from '../catchup/schedule.js';
import type { DeliveryOutcome } from '../http/ingest.js';
import { metricsRoute, ReceiverMetrics, type QueueSnapshot } from '../http/metrics.js';
import { createLogger, redactUrl, type Logger } from '../log.js';
import { isPostgresUrl, openStore } from '../store/open.js';
import type { Store } from '../store/types.js';
import { describeConfig } from './check-config.js';
import { addCommonOptions, configFrom, type CommonOptions } from './common.js';

interface ServeOptions extends CommonOptions {
  host?: string;
  port?: number;
  logLevel?: string;
}

function portNumber(value: string): number {
  if (!/^\d{1,5}$/.test(value) || Number(value) > 65535) throw new InvalidArgumentError('--port must be a whole number from 0 to 65535, e.g. --port 8080.');
  return Number(value);
}

export function registerServe(program: Command): void {
  addCommonOptions(program.command('serve'))
    .description('HTTP ingress and the drain, in one process; SIGTERM stops it cleanly')
    .option('--host <host>', 'address to listen on (overrides "host"; also $RECEIVER_HOST)')
    .option('--port <port>', 'port to listen on, 0 for any free port (overrides "port"; also $RECEIVER_PORT)', portNumber)
    .option('--log-level <level>', 'fatal, error, warn, info, debug, trace or silent (overrides "log.level"; also $RECEIVER_LOG_LEVEL)')
    .action(async (options: ServeOptions) => {
      await serve(options);
    });
}

/** Log level per delivery outcome: what an operator should look at stands out. */
const OUTCOME_LEVEL: Record<DeliveryOutcome['outcome'], 'info' | 'warn' | 'error'> = {
  accepted: 'info',
  duplicate: 'info',
  handshake: 'info',
  not_found: 'info',
  too_large: 'info',
  bad_request: 'info',
  // A wrong secret after a rotation shows up here first.
  unauthorized: 'warn',
  conflict: 'warn',
  unavailable: 'error',
  error: 'error',
};

/** One log line per delivery: event id, source, delivery id, status, outcome, duration. Never headers or body. */
export function logDelivery(logger: Logger, o: DeliveryOutcome): void {
  const line = {
    source: o.source,
    outcome: o.outcome,
    status: o.status,
    ...(o.eventId === undefined ? {} : { eventId: o.eventId }),
    ...(o.deliveryId === undefined ? {} : { deliveryId: o.deliveryId }),
    ...(o.eventType === undefined ? {} : { eventType: o.eventType }),
    durationMs: Math.round(o.durationMs * 100) / 100,
    ...(o.error === undefined ? {} : { error: o.error }),
  };
  logger[OUTCOME_LEVEL[o.outcome]](line, 'delivery');
}

/**
 * The queue gauges of GET /metrics, read from the store at scrape time with its cheap
 * queueStats() (never stats(), which scans every event).
 */
export function queueSnapshot(store: Pick<Store, 'queueStats'>, now: () => number = Date.now): () => Promise<QueueSnapshot> {
  return async () => {
    const q = await store.queueStats();
    return {
      pending: q.pending,
      processing: q.processing,
      dead: q.dead,
      oldestPendingAgeSeconds: q.oldestPendingReceivedAt === null ? null : Math.max(0, (now() - q.oldestPendingReceivedAt) / 1000),
    };
  };
}

/** Node's HTTP server options: slow or stalled clients cannot hold a connection, or the process. */
export function serverTimeouts(config: Pick<Config, 'requestTimeoutSeconds'>) {
  const requestTimeout = Math.max(1, Math.round(config.requestTimeoutSeconds * 1000));
  return {
    // The whole request, headers and body, must arrive within this (else 408 and close).
    requestTimeout,
    headersTimeout: Math.min(requestTimeout, 10_000),
    // Idle keep-alive sockets are closed after 5 s (senders reconnect cheaply).
    keepAliveTimeout: 5000,
    // Node checks the two timeouts above only this often (default 30 s): check every second
    // or faster, so a trickling client is cut off close to requestTimeout.
    connectionsCheckingInterval: Math.min(1000, Math.max(100, Math.floor(requestTimeout / 4))),
  };
}

/** What `serve` warns about at start: the configuration is valid but may hurt senders. */
export function startupWarnings(config: Pick<Config, 'sources' | 'routes' | 'database' | 'busyTimeoutMs'>): { fields: Record<string, unknown>; message: string }[] {
  const warnings: { fields: Record<string, unknown>; message: string }[] = [];
  for (const source of config.sources.values()) {
    if (source.provider.name === 'none') {
      warnings.push({ fields: { source: source.name }, message: `source "${source.name}" uses provider "none": deliveries are NOT verified; use it for local testing only` });
    }
  }
  // SQLite has one writer: a module effect holds the write lock for as long as its handler
  // runs (its writes commit with the ledger row). Ingest waits busyTimeoutMs for that lock,
  // then answers 503.
  if (!isPostgresUrl(config.database)) {
    for (const route of config.routes) {
      const holdMs = route.effect.timeoutSeconds * 1000;
      if (route.effect.module === undefined || holdMs <= config.busyTimeoutMs) continue;
      warnings.push({
        fields: { route: route.name, timeoutSeconds: route.effect.timeoutSeconds, busyTimeoutMs: config.busyTimeoutMs },
        message: `route "${route.name}": its module effect may hold the database's write lock for up to ${route.effect.timeoutSeconds} s (effect.timeoutSeconds), longer than busyTimeoutMs (${config.busyTimeoutMs} ms); deliveries arriving meanwhile are answered 503 and retried by their senders. Lower effect.timeoutSeconds to ${Math.floor(config.busyTimeoutMs / 1000) || 'under 1'} s or raise busyTimeoutMs to ${holdMs}`,
      });
    }
  }
  return warnings;
}

/** Why listen() failed, in words, and what to do about it. */
export function listenError(e: unknown, host: string, port: number): ReceiverError {
  const code = (e as NodeJS.ErrnoException).code ?? '';
  const where = `${host.includes(':') ? `[${host}]` : host}:${port}`;
  const [reason, hint] =
    code === 'EADDRINUSE'
      ? ['the address is already in use (EADDRINUSE)', `stop the process listening there (ss -ltnp 'sport = :${port}' names it), or choose another port with --port or "port"`]
      : code === 'EADDRNOTAVAIL'
        ? ['the address is not available on this machine (EADDRNOTAVAIL)', 'choose an address of one of its interfaces with --host or "host" (127.0.0.1 for this machine only, 0.0.0.0 for all)']
        : code === 'EACCES' || code === 'EPERM'
          ? [`permission denied (${code}): ports below 1024 need privileges`, 'choose a port of 1024 or above, or grant the capability (AmbientCapabilities=CAP_NET_BIND_SERVICE in the systemd unit)']
          : code === 'ENOTFOUND' || code === 'EAI_AGAIN'
            ? [`the host name does not resolve (${code})`, 'use an IP address, or a name this machine resolves, with --host or "host"']
            : [`${(e as Error).message}${code === '' || (e as Error).message.includes(code) ? '' : ` (${code})`}`, 'check --host and --port ("host" and "port" in the configuration)'];
  return new ReceiverError('runtime', `cannot listen on ${where}: ${reason}`, { hint, cause: e });
}

function listen(server: Server, port: number, host: string): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

/** A thrown value as one short line: no stack, no properties (they may carry a body). */
function briefly(e: unknown): string {
  const text = e instanceof Error ? `${e.name}: ${e.message}` : typeof e === 'string' ? e : Object.prototype.toString.call(e);
  return text.length > 200 ? `${text.slice(0, 200)}...` : text;
}

/**
 * Start-up order: configuration, database (refused when this process cannot write it),
 * HTTP listener, and only then the drain. A failure at any step closes what was opened and
 * is reported as Error/Try with exit 1, so systemd sees a failed start, never a process
 * that runs effects with no listener, or listens on a database it cannot write.
 */
export async function serve(options: ServeOptions): Promise<void> {
  const config = configFrom(options);
  const logger = createLogger(config.log.level);
  // The delivery line is built field by field in logDelivery (ids, outcome, status, duration).
  // Its lines are written once per event-loop turn (a batch of answers), not once per line.
  const deliveryLogger = createLogger(config.log.level, 2, { redact: false, perTurn: true });
  // What check-config prints (secrets hidden), for a debug session.
  logger.debug({ configuration: describeConfig(config) }, 'configuration');
  for (const w of startupWarnings(config)) logger.warn(w.fields, w.message);
  const store = await openStore(config.database, { busyTimeoutMs: config.busyTimeoutMs, server: true });
  const metrics = new ReceiverMetrics({
    sources: config.sources.keys(),
    routes: config.routes.map((r) => r.name),
    queue: queueSnapshot(store),
    processMetrics: true,
    catchUpSources: config.catchUp.keys(),
  });
  // Started once the listener is up (below); until then an accepted delivery wakes nothing.
  let drain: Drain | undefined = undefined;
  const app = createApp({
    sources: config.sources,
    store,
    maxBodyBytes: config.maxBodyBytes,
    onOutcome: (o) => {
      logDelivery(deliveryLogger, o);
      metrics.observeDelivery(o);
    },
    onAccepted: () => drain?.wake(),
    routes: config.routes,
    onError: (e) => logger.error({ err: e }, 'request failed'),
    ...(config.metrics.enabled ? { extend: metricsRoute(metrics, { token: config.metrics.token }) } : {}),
    ...(config.admin === undefined ? {} : { admin: { config, token: config.admin.token } }),
  });
  const server = createAdaptorServer({ fetch: app.fetch, serverOptions: serverTimeouts(config) }) as Server;
  // Answers not yet sent, so a shutdown can ask each keep-alive client to disconnect.
  let stopping = false;
  const unanswered = new Set<ServerResponse>();
  server.prependListener('request', (_req: IncomingMessage, res: ServerResponse) => {
    if (stopping) res.setHeader('connection', 'close');
    unanswered.add(res);
    res.once('close', () => unanswered.delete(res));
  });

  try {
    await listen(server, config.port, config.host);
  } catch (e) {
    // Nothing was answered and no drain runs: close the database and leave with Error/Try.
    await store.close().catch((closing: unknown) => logger.error({ err: closing }, 'closing the database failed'));
    throw listenError(e, config.host, config.port);
  }
  server.on('error', (e) => logger.error({ err: e }, 'http server error'));

  // A bug must not leave a half-working process: log it as one JSON line and exit 1, for
  // systemd to restart (Restart=on-failure). Committed events are safe; claims come back.
  const crash = (what: string) => (e: unknown) => {
    deliveryLogger.flush();
    logger.fatal({ err: e }, what);
    process.exit(1);
  };
  process.on('uncaughtException', crash('uncaught exception'));
  process.on('unhandledRejection', (e: unknown) => {
    // A promise a module effect's handler started and did not await: its own mistake. One
    // line with the ids and the error's first 200 characters (never a stack or the event),
    // and the receiver keeps serving. The attempt itself was decided by what it returned.
    const from = moduleOrigin();
    if (from !== undefined) {
      logger.error({ ...from, error: briefly(e) }, 'module effect left a promise rejection unhandled; ignored, the receiver keeps running');
      return;
    }
    crash('unhandled promise rejection')(e);
  });

  // The drain runs in a thread of its own (see src/drain/thread.ts). It logs every effect
  // attempt and event outcome itself (ids, route, effect key, outcome, duration); here they
  // only feed the counters.
  if (config.drain.enabled) {
    try {
      drain = await startDrainThread({
        options: { config: options.config, db: options.db, host: options.host, port: options.port, logLevel: options.logLevel },
        logger,
        onAttempt: (a) => metrics.observeAttempt(a),
        onEvent: (e) => metrics.observeEvent(e),
        onFailure: crash('drain thread failed'),
      });
    } catch (e) {
      server.close();
      await store.close().catch((closing: unknown) => logger.error({ err: closing }, 'closing the database failed'));
      throw e;
    }
  }
  const address = server.address() as AddressInfo;
  logger.info(
    {
      host: address.address,
      port: address.port,
      database: redactUrl(config.database),
      sources: [...config.sources.keys()],
      routes: config.routes.map((r) => r.name),
      metrics: config.metrics.enabled ? (config.metrics.token === undefined ? 'open' : 'token') : 'off',
      shutdownGraceSeconds: config.shutdownGraceSeconds,
    },
    'listening',
  );
  // In the background, after listening: a run never delays ingest, and a refused credential is logged, never fatal.
  const catchUp: CatchUpSchedule | undefined =
    config.catchUp.size > 0 ? startCatchUp({ config, store, logger, onStored: () => drain?.wake(), onResult: (r) => metrics.observeCatchUp(r) }) : undefined;

  const stop = async (signal: string) => {
    if (stopping) {
      // A second Ctrl-C: leave now. Nothing is lost: a sender got a 2xx only for a committed
      // row, and a running effect is retried after its lease.
      logger.warn({ signal }, 'second signal: exiting without waiting');
      process.exit(1);
    }
    stopping = true;
    const graceMs = config.shutdownGraceSeconds * 1000;
    const started = Date.now();
    logger.info({ signal, graceMs }, 'shutting down');
    // 1. Stop accepting. Requests already in flight finish: a 2xx goes out only after
    //    the row is committed, so every sender that got one has its event stored.
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    server.closeIdleConnections();
    // A keep-alive client would otherwise keep sending on its open connection and hold
    // close() until the grace period: every answer from now on ends its connection.
    for (const res of unanswered) if (!res.headersSent) res.setHeader('connection', 'close');
    // Past the grace period, a client still sending (or a stalled one) is cut off; it got
    // no 2xx, so the sender retries and the delivery id deduplicates.
    const force = setTimeout(() => {
      logger.warn('grace period over: closing the remaining connections');
      server.closeAllConnections();
    }, graceMs);
    // 2. The drain stops claiming and lets the running effect finish within the grace
    //    period; beyond it the effect is left to its lease and retried after a restart.
    await Promise.all([closed, drain?.stop(graceMs), catchUp?.stop()]);
    clearTimeout(force);
    // 3. In-flight inserts (group commit) are flushed, then the database is closed.
    let code = 0;
    try {
      await store.close();
    } catch (e) {
      logger.error({ err: e }, 'closing the database failed');
      code = 1;
    }
    // The last delivery lines go out before "stopped", which stays the last line.
    deliveryLogger.flush();
    logger.info({ signal, tookMs: Date.now() - started }, 'stopped');
    process.exit(code);
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
}
