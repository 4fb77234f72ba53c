/**
 * The receiver as a whole, started from code: configuration in, a running receiver out
 * (HTTP ingress, metrics, the admin pages when configured, the drain in its thread, the
 * background catch-up runs), with its address, its store and a
 * stop(). `receiver serve` is a thin CLI wrapper over it that adds what belongs to a
 * process: signals, exit codes, and exiting on a bug. Nothing here exits the process.
 */
import { createAdaptorServer } from '@hono/node-server';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startAlerts, type Alerts } from './alerts/service.js';
import { startCatchUp, type CatchUpSchedule } from './catchup/schedule.js';
import { plainApiBases } from './catchup/warnings.js';
import type { Config } from './config/load.js';
import { assertReloadable, configChanges, type ConfigChanges } from './config/changes.js';
import { isPostgresUrl } from './config/database.js';
import { describeConfig } from './config/describe.js';
import { effectsLongerThanGrace } from './config/grace.js';
import { ReceiverError } from './errors.js';
import { laneOf } from './effects/routes.js';
import type { Drain } from './drain/loop.js';
import { startDrainThread } from './drain/thread.js';
import { createApp } from './http/app.js';
import { ingestHealth } from './http/health.js';
import { LoginThrottle } from './http/admin/session.js';
import { DrainLinesAfterDeliveries, logDelivery } from './http/delivery-log.js';
import { metricsRoute, ReceiverMetrics, type QueueSnapshot } from './http/metrics.js';
import { createLogger, logStyle, redactUrl, stderrWriter, type LineSink, type Logger, type LogStyle } from './log.js';
import { openStore } from './store/open.js';
import type { Store } from './store/types.js';

export interface ReceiverOptions {
  /** Start-up, shutdown and error lines; default: lines in `log.format` on stderr at `log.level`. */
  logger?: Logger;
  /** The one line per delivery; default: like `logger`, without its redaction pass. */
  deliveryLogger?: Logger;
  /** How the default loggers' and the drain thread's lines look; default: `log.format` for this process's stderr. */
  logStyle?: LogStyle;
  /**
   * Where the default loggers and the drain thread write their lines; default: the
   * process's stderr writer (bounded, never blocking; its dropped lines are counted on /metrics).
   */
  logSink?: LineSink;
  /** The clock for the queue-age gauge, health, ingest, the admin pages and catch-up runs; default Date.now. */
  now?: () => number;
  /** Node's process metrics on /metrics (off by default: one process may run several receivers). */
  processMetrics?: boolean;
  /**
   * The drain thread failed after it started (a bug). Default: a `fatal` log line; `serve`
   * exits for systemd to restart it.
   */
  onFatal?: (e: Error) => void;
  /** The environment the configuration was resolved against (the environment file's variables under the real ones); default process.env. */
  env?: NodeJS.ProcessEnv;
}

export interface Receiver {
  /** Where it listens (the port actually bound when `port` was 0). */
  address: { host: string; port: number; url: string };
  store: Store;
  metrics: ReceiverMetrics;
  /** The configuration running now, and when it was loaded (ms since the epoch). */
  current(): { config: Config; loadedAt: number };
  /**
   * Takes in a reloaded configuration, validated by the caller (assertRunnable): the drain
   * first (it takes it for the next event it starts, and every event it plans from then
   * on is planned under it), then HTTP: requests already being read finish under the old
   * one, new ones get the new one; catch-up runs restart when their settings changed. So a
   * delivery received once it resolves runs the new routes. Rejects with a `config`
   * error, with nothing applied, when it changes what needs a restart (assertReloadable).
   * Resolves with what changed, by name.
   */
  reload(config: Config, env?: NodeJS.ProcessEnv): Promise<ConfigChanges>;
  /**
   * Stops accepting, lets in-flight requests and the running effect finish within
   * `graceMs` (default `shutdownGraceSeconds`), ends the catch-up runs, then closes the database. Rejects when
   * closing the database failed (after logging it). Calling it again returns the same promise.
   */
  stop(graceMs?: number): Promise<void>;
}

/**
 * The queue gauges of GET /metrics, read from the store at scrape time with its cheap
 * queueStats() (never stats(), which scans every event).
 */
export function queueSnapshot(store: Pick<Store, 'queueStats' | 'laneStats'>, now: () => number = Date.now): () => Promise<QueueSnapshot> {
  return async () => {
    const [q, lanes] = await Promise.all([store.queueStats(), store.laneStats()]);
    const at = now();
    const age = (receivedAt: number | null) => (receivedAt === null ? null : Math.max(0, (at - receivedAt) / 1000));
    return {
      pending: q.pending,
      processing: q.processing,
      dead: q.dead,
      oldestPendingAgeSeconds: age(q.oldestPendingReceivedAt),
      lanes: lanes.map((l) => ({ lane: l.lane, pending: l.pending, running: l.running, oldestPendingAgeSeconds: age(l.oldestPendingReceivedAt) })),
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
export function startupWarnings(
  config: Pick<Config, 'sources' | 'routes' | 'database' | 'busyTimeoutMs' | 'catchUp' | 'shutdownGraceSeconds'>,
): { fields: Record<string, unknown>; message: string }[] {
  const warnings: { fields: Record<string, unknown>; message: string }[] = [...plainApiBases(config.catchUp), ...effectsLongerThanGrace(config)];
  for (const source of config.sources.values()) {
    if (source.provider.name === 'none') {
      warnings.push({
        fields: { source: source.name },
        message: `source "${source.name}" uses provider "none": deliveries are NOT verified; use it for local testing only`,
      });
    }
  }
  // SQLite has one writer: a module effect holds the write lock from its handler's first
  // statement (or its start) until the handler ends (its writes commit with the ledger
  // row). Ingest waits busyTimeoutMs for that lock, then answers 503.
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

/** Whether a reload changed a source with catch-up, or its credential: its schedule starts again. */
function catchUpChanged(changes: ConfigChanges, running: Config, next: Config): boolean {
  const names = new Set([...running.catchUp.keys(), ...next.catchUp.keys()]);
  const { added, removed, changed } = changes.sources;
  return [...added, ...removed, ...changed].some((n) => names.has(n)) || changes.secretsRotated.some((f) => f.endsWith('.catchUp'));
}

/** Why listen() failed, in words, and what to do about it. */
function listenError(e: unknown, host: string, port: number): ReceiverError {
  const code = (e as NodeJS.ErrnoException).code ?? '';
  const where = `${host.includes(':') ? `[${host}]` : host}:${port}`;
  const [reason, hint] =
    code === 'EADDRINUSE'
      ? [
          'the address is already in use (EADDRINUSE)',
          `stop the process listening there (ss -ltnp 'sport = :${port}' names it), or choose another port with --port or "port"`,
        ]
      : code === 'EADDRNOTAVAIL'
        ? [
            'the address is not available on this machine (EADDRNOTAVAIL)',
            'choose an address of one of its interfaces with --host or "host" (127.0.0.1 for this machine only, 0.0.0.0 for all)',
          ]
        : code === 'EACCES' || code === 'EPERM'
          ? [
              `permission denied (${code}): ports below 1024 need privileges`,
              'choose a port of 1024 or above, or grant the capability (AmbientCapabilities=CAP_NET_BIND_SERVICE in the systemd unit)',
            ]
          : code === 'ENOTFOUND' || code === 'EAI_AGAIN'
            ? [`the host name does not resolve (${code})`, 'use an IP address, or a name this machine resolves, with --host or "host"']
            : [
                `${(e as Error).message}${code === '' || (e as Error).message.includes(code) ? '' : ` (${code})`}`,
                'check --host and --port ("host" and "port" in the configuration)',
              ];
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

/**
 * Start-up order: database (refused when this process cannot write it), HTTP listener, and
 * only then the drain. A failure at any step closes what was opened and rejects with an
 * Error/Try error, so the caller never holds a receiver that runs effects with no
 * listener, or listens on a database it cannot write.
 */
export async function startReceiver(config: Config, options: ReceiverOptions = {}): Promise<Receiver> {
  const now = options.now ?? Date.now;
  const style = options.logStyle ?? logStyle(config.log.format);
  const sink = options.logSink ?? stderrWriter();
  const logger = options.logger ?? createLogger(config.log.level, { style, sink });
  // The delivery line is built field by field in logDelivery (ids, outcome, status, duration).
  const deliveryLogger = options.deliveryLogger ?? createLogger(config.log.level, { redact: false, style, sink });
  // The drain thread's lines come after the delivery lines of the events they are about.
  const order = new DrainLinesAfterDeliveries((line) => sink.write(line));
  // What check-config prints (secrets hidden), for a debug session.
  logger.debug({ configuration: describeConfig(config) }, 'configuration');
  for (const w of startupWarnings(config)) logger.warn(w.fields, w.message);
  const store = await openStore(config.database, { busyTimeoutMs: config.busyTimeoutMs, server: true });
  const metrics = new ReceiverMetrics({
    sources: config.sources.keys(),
    routes: config.routes.map((r) => r.name),
    lanes: config.routes.map(laneOf),
    queue: queueSnapshot(store, now),
    processMetrics: options.processMetrics === true,
    catchUpSources: config.catchUp.keys(),
    ...(sink.dropped === undefined ? {} : { logLinesDropped: () => sink.dropped ?? 0 }),
  });
  // Started once the listener is up (below); until then an accepted delivery wakes nothing.
  let drain: Drain | undefined = undefined;
  // Started with catch-up, after listening; until then a refusal is not counted.
  let alerts: Alerts | undefined = undefined;
  // Shared by every app a reload builds: ingest's recent outcome for /healthz, and the
  // admin login's failed tries (a reload gives a guesser no fresh start).
  const health = ingestHealth({ now });
  const loginThrottle = new LoginThrottle(now);
  const appFor = (config: Config, loadedAt: number) =>
    createApp({
      sources: config.sources,
      store,
      maxBodyBytes: config.maxBodyBytes,
      now,
      health,
      onOutcome: (o) => {
        logDelivery(deliveryLogger, o);
        metrics.observeDelivery(o);
        alerts?.observeDelivery(o);
      },
      onAccepted: () => drain?.wake(),
      onStoring: () => order.storing(),
      routes: config.routes,
      onError: (e) => logger.error({ err: e }, 'request failed'),
      ...(config.metrics.enabled ? { extend: metricsRoute(metrics, { token: config.metrics.token }) } : {}),
      // The admin pages and API at /admin, on this listener, only when admin.token is set.
      ...(config.admin === undefined ? {} : { admin: { config, token: config.admin.token, now, configLoadedAt: loadedAt, loginThrottle } }),
    });
  // What runs now. A request is handed to the app current when it arrives and finishes in
  // it: a reload swaps in a new app, built whole from the new configuration, for the next one.
  let running = { config, env: options.env ?? process.env, loadedAt: now() };
  let app = appFor(config, running.loadedAt);
  metrics.configLoaded(running.loadedAt);
  const server = createAdaptorServer({ fetch: (request: Request, env: unknown) => app.fetch(request, env), serverOptions: serverTimeouts(config) }) as Server;
  // Answers not yet sent, so a shutdown can ask each keep-alive client to disconnect.
  let stopping = false;
  const unanswered = new Set<ServerResponse>();
  server.prependListener('request', (_req: IncomingMessage, res: ServerResponse) => {
    if (stopping) res.setHeader('connection', 'close');
    unanswered.add(res);
    res.once('close', () => unanswered.delete(res));
  });
  const closeStore = () => store.close().catch((closing: unknown) => logger.error({ err: closing }, 'closing the database failed'));

  try {
    await listen(server, config.port, config.host);
  } catch (e) {
    // Nothing was answered and no drain runs: close the database and report Error/Try.
    await closeStore();
    throw listenError(e, config.host, config.port);
  }
  server.on('error', (e) => logger.error({ err: e }, 'http server error'));

  // The drain runs in a thread of its own (see src/drain/thread.ts). It logs every effect
  // attempt and event outcome itself (ids, route, effect key, outcome, duration); here they
  // only feed the counters.
  if (config.drain.enabled) {
    try {
      drain = await startDrainThread({
        config,
        logger,
        logStyle: style,
        onLines: (lines) => order.add(lines),
        onAttempt: (a) => metrics.observeAttempt(a),
        onEvent: (e) => metrics.observeEvent(e),
        onFailure: options.onFatal ?? ((e) => logger.fatal({ err: e }, 'drain thread failed')),
        ingestWaiting: store.ingestWaiting,
        env: running.env,
      });
    } catch (e) {
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await closeStore();
      throw e;
    }
  }
  const bound = server.address() as AddressInfo;
  const address = { host: bound.address, port: bound.port, url: `http://${bound.family === 'IPv6' ? `[${bound.address}]` : bound.address}:${bound.port}` };
  logger.info(
    {
      host: address.host,
      port: address.port,
      database: redactUrl(config.database),
      sources: [...config.sources.keys()],
      routes: config.routes.map((r) => r.name),
      metrics: config.metrics.enabled ? (config.metrics.token === undefined ? 'open' : 'token') : 'off',
      shutdownGraceSeconds: config.shutdownGraceSeconds,
    },
    'listening',
  );
  // In the background, after listening: a run never delays ingest, and a refused credential
  // is logged, never fatal. A run that stored events wakes the drain.
  const catchUpFor = (config: Config): CatchUpSchedule | undefined =>
    config.catchUp.size > 0
      ? startCatchUp({ config, store, logger, now, onStored: () => drain?.wake(), onResult: (r) => metrics.observeCatchUp(r, now()) })
      : undefined;
  let catchUp = catchUpFor(config);
  // Alerts check the store and tell their destinations in the background (src/alerts/).
  const alertsFor = (c: Config, env: NodeJS.ProcessEnv): Alerts | undefined =>
    c.alerts === undefined ? undefined : startAlerts({ config: c, store, logger, now, env, onSend: (o) => metrics.observeAlert(o) });
  alerts = alertsFor(config, running.env);

  const reload = async (next: Config, env: NodeJS.ProcessEnv = running.env): Promise<ConfigChanges> => {
    if (stopping) throw new ReceiverError('runtime', 'the receiver is stopping: the reload was not applied');
    assertReloadable(running.config, next);
    const changes = configChanges(running, { config: next, env });
    const loadedAt = now();
    // Built before anything is swapped: a failure here leaves the old configuration running.
    const nextApp = appFor(next, loadedAt);
    // The drain before HTTP: an event received under the new routes is never planned under
    // the old ones (events received before may be planned under either).
    await drain?.reconfigure(next, env);
    if (stopping) throw new ReceiverError('runtime', 'the receiver is stopping: the reload was not applied');
    for (const w of startupWarnings(next)) logger.warn(w.fields, w.message);
    metrics.configure({
      sources: next.sources.keys(),
      routes: next.routes.map((r) => r.name),
      lanes: next.routes.map(laneOf),
      catchUpSources: next.catchUp.keys(),
    });
    app = nextApp;
    Object.assign(server, serverTimeouts(next));
    if (catchUpChanged(changes, running.config, next)) {
      // A run in flight is aborted; the next one resumes from the stored cursor.
      const old = catchUp;
      catchUp = catchUpFor(next);
      void old?.stop();
    }
    if (running.config.alerts !== undefined || next.alerts !== undefined) {
      // Their state is in the store: the new ones start once these stopped (a send in
      // flight finishes first, so it is recorded once), so two checks never overlap.
      const old = alerts;
      alerts = undefined;
      void (old?.stop({ finishSends: true }) ?? Promise.resolve()).then(() => {
        if (!stopping) alerts = alertsFor(next, env);
      });
    }
    running = { config: next, env, loadedAt };
    metrics.configLoaded(loadedAt);
    return changes;
  };

  let stopped: Promise<void> | undefined;
  const stop = async (graceMs: number): Promise<void> => {
    stopping = true;
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
    //    Catch-up stops its timers and aborts its runs in flight (the next start resumes).
    await Promise.all([closed, drain?.stop(graceMs), catchUp?.stop(), alerts?.stop()]);
    clearTimeout(force);
    // 3. In-flight inserts (group commit) are flushed, then the database is closed.
    try {
      await store.close();
    } catch (e) {
      logger.error({ err: e }, 'closing the database failed');
      throw e;
    }
  };
  return {
    address,
    store,
    metrics,
    current: () => ({ config: running.config, loadedAt: running.loadedAt }),
    reload,
    stop: (graceMs = running.config.shutdownGraceSeconds * 1000) => (stopped ??= stop(graceMs)),
  };
}
