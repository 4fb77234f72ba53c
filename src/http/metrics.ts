import { createHash, timingSafeEqual } from 'node:crypto';
import type { Context, Hono } from 'hono';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { Secret } from '../config/secret.js';
import {
  ATTEMPT_OUTCOMES,
  CATCH_UP_OUTCOMES,
  CATCH_UP_RESULTS,
  DELIVERY_OUTCOMES,
  RAN_OUTCOMES,
  SETTLE_STATUSES,
  type AttemptOutcomeName,
  type CatchUpOutcomeName,
  type CatchUpResultName,
  type SettleStatus,
} from '../vocabulary.js';
import type { DeliveryOutcome } from './ingest.js';

/**
 * Prometheus metrics for one app instance. Each instance has its own Registry (never
 * prom-client's global one), so tests can run several apps in one process.
 *
 * Duplicate ratio: we export counters, not a precomputed ratio, because a ratio since
 * process start hides a burst. Alert on
 *   sum(rate(receiver_deliveries_total{outcome="duplicate"}[15m]))
 *     / sum(rate(receiver_deliveries_total{outcome=~"accepted|duplicate|conflict"}[15m]))
 * (see docs/operations.md, "Metrics and alerts").
 */

/**
 * Deliveries to a source name that is not configured are counted under this label,
 * so a scanner posting to random paths cannot create unbounded series.
 */
const UNKNOWN_SOURCE = '_unknown';

/** What the store says about the queue, read at scrape time. */
export interface QueueSnapshot {
  pending: number;
  processing?: number;
  dead: number;
  /** Age in seconds of the oldest pending event, or null with none pending. */
  oldestPendingAgeSeconds: number | null;
  /** Each lane with pending or running units. */
  lanes?: readonly LaneSnapshot[];
}

/** One lane's work, as the store says it at scrape time. */
export interface LaneSnapshot {
  lane: string;
  pending: number;
  running: number;
  /** Age in seconds of the event of the lane's oldest pending unit, or null with none pending. */
  oldestPendingAgeSeconds: number | null;
}

/** One try of one effect, as the drain reports it (its AttemptOutcome). */
export interface EffectAttemptObservation {
  route: string;
  outcome: AttemptOutcomeName;
  durationMs: number;
}

/** What became of a claimed event, as the drain reports it (its EventOutcome). */
export interface EventObservation {
  status: SettleStatus;
}

const RAN = new Set(RAN_OUTCOMES);

export interface MetricsOptions {
  /** Configured source names: their series start at 0 so rate() sees the first delivery. */
  sources?: Iterable<string>;
  /** Configured route names, for the same reason. */
  routes?: Iterable<string>;
  /** The configured routes' lanes: their receiver_lane_* gauges read 0 while nothing waits or runs in them. */
  lanes?: Iterable<string>;
  /** Read at every scrape; a failure sets receiver_database_up to 0 and keeps the last values. */
  queue?: () => Promise<QueueSnapshot> | QueueSnapshot;
  /** Node process metrics (memory, CPU, event loop lag). Off in tests that make many apps. */
  processMetrics?: boolean;
  /** Sources with catchUp configured: their receiver_catch_up_* series start at 0. */
  catchUpSources?: Iterable<string>;
  /** Log lines dropped so far by the stderr writer (its buffer was full), read at scrape time. */
  logLinesDropped?: () => number;
}

/** One catch-up run, as src/catchup/run.ts reports it (its CatchUpResult). */
export interface CatchUpObservation {
  source: string;
  listed: number;
  alreadyStored: number;
  storedNow: number;
  redeliveryAsked: number;
  failed: number;
  skipped: number;
  requests: number;
  error: string | null;
}

/** The CatchUpObservation field each receiver_catch_up_events_total outcome counts. */
const CATCH_UP_FIELD: Record<CatchUpOutcomeName, 'listed' | 'alreadyStored' | 'storedNow' | 'redeliveryAsked' | 'failed' | 'skipped'> = {
  listed: 'listed',
  already_stored: 'alreadyStored',
  stored: 'storedNow',
  redelivery_asked: 'redeliveryAsked',
  failed: 'failed',
  skipped: 'skipped',
};

export class ReceiverMetrics {
  readonly registry = new Registry();
  #sources = new Set<string>();
  readonly #catchUpSeen = new Set<string>();
  readonly #deliveries: Counter<'source' | 'outcome'>;
  readonly #ingestSeconds: Histogram<'source'>;
  readonly #attempts: Counter<'route' | 'outcome'>;
  readonly #effectSeconds: Histogram<'route'>;
  readonly #settled: Counter<'status'>;
  readonly #catchUpRuns: Counter<'source' | 'result'>;
  readonly #catchUpEvents: Counter<'source' | 'outcome'>;
  readonly #catchUpRequests: Counter<'source'>;
  readonly #catchUpLastOk: Gauge<'source'>;
  readonly #reloads: Counter<'result'>;
  readonly #configLoaded: Gauge;
  readonly #alerts: Counter<'kind' | 'status' | 'destination' | 'result'>;
  #lanes = new Set<string>();

  constructor({ sources = [], routes = [], lanes = [], queue, processMetrics = false, catchUpSources = [], logLinesDropped }: MetricsOptions = {}) {
    const registers = [this.registry];
    this.#deliveries = new Counter({
      name: 'receiver_deliveries_total',
      help: 'Webhook deliveries received, by source and outcome (accepted, duplicate, conflict, replayed, unauthorized, too_large, unavailable, ...)',
      labelNames: ['source', 'outcome'],
      registers,
    });
    this.#ingestSeconds = new Histogram({
      name: 'receiver_ingest_duration_seconds',
      help: 'Time from request start to answer for POST /webhooks/:source (verification and durable insert included)',
      labelNames: ['source'],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      registers,
    });
    this.#attempts = new Counter({
      name: 'receiver_effect_attempts_total',
      help: 'Effect attempts by route and outcome',
      labelNames: ['route', 'outcome'],
      registers,
    });
    this.#effectSeconds = new Histogram({
      name: 'receiver_effect_duration_seconds',
      help: 'Duration of one effect attempt, by route',
      labelNames: ['route'],
      buckets: [0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300],
      registers,
    });
    this.#settled = new Counter({
      name: 'receiver_events_settled_total',
      help: 'Claimed events by what became of them: done, retry, dead, lost (lease taken over), interrupted (shutdown mid-effect)',
      labelNames: ['status'],
      registers,
    });
    // Every series exists from the start, so an alert on lost or interrupted claims, or on
    // busy or stale attempts, sees 0 rather than no data.
    for (const status of SETTLE_STATUSES) this.#settled.labels(status).inc(0);
    this.#catchUpRuns = new Counter({
      name: 'receiver_catch_up_runs_total',
      help: "Catch-up runs against a sender's API, by source and result (ok, error)",
      labelNames: ['source', 'result'],
      registers,
    });
    this.#catchUpEvents = new Counter({
      name: 'receiver_catch_up_events_total',
      help: 'Events seen by catch-up runs, by source and outcome (listed, already_stored, stored, redelivery_asked, failed, skipped: null or malformed items)',
      labelNames: ['source', 'outcome'],
      registers,
    });
    this.#catchUpRequests = new Counter({
      name: 'receiver_catch_up_requests_total',
      help: "Requests catch-up made to a sender's API, by source",
      labelNames: ['source'],
      registers,
    });
    this.#catchUpLastOk = new Gauge({
      name: 'receiver_catch_up_last_success_timestamp_seconds',
      help: 'When the last successful catch-up run of a source ended (0: none since start); alert when it falls behind',
      labelNames: ['source'],
      registers,
    });
    this.#reloads = new Counter({
      name: 'receiver_config_reloads_total',
      help: 'Configuration reloads (SIGHUP), by result: ok (applied) or error (refused; the running configuration stays)',
      labelNames: ['result'],
      registers,
    });
    for (const result of ['ok', 'error'] as const) this.#reloads.labels(result).inc(0);
    this.#configLoaded = new Gauge({
      name: 'receiver_config_loaded_timestamp_seconds',
      help: 'When the running configuration was loaded (at start, or by the last successful reload)',
      registers,
    });
    this.#alerts = new Counter({
      name: 'receiver_alerts_total',
      help: 'Tries to tell an alert destination, by alert kind, status (firing, resolved), destination and result (sent, failed, suppressed, given_up)',
      labelNames: ['kind', 'status', 'destination', 'result'],
      registers,
    });
    this.configure({ sources, routes, lanes, catchUpSources });

    if (queue !== undefined) {
      // registry.metrics() calls every collect() at once: the three gauges share one read.
      let scrape: Promise<void> | undefined;
      const collect = () =>
        (scrape ??= (async () => {
          try {
            const q = await queue();
            events.set({ status: 'pending' }, q.pending);
            if (q.processing !== undefined) events.set({ status: 'processing' }, q.processing);
            events.set({ status: 'dead' }, q.dead);
            oldest.set(q.oldestPendingAgeSeconds ?? 0);
            if (q.lanes !== undefined) {
              // A lane neither configured nor busy any more drops out; a configured one reads 0.
              for (const g of [lanePending, laneRunning, laneOldest]) g.reset();
              for (const lane of this.#lanes) for (const g of [lanePending, laneRunning, laneOldest]) g.set({ lane }, 0);
              for (const l of q.lanes) {
                lanePending.set({ lane: l.lane }, l.pending);
                laneRunning.set({ lane: l.lane }, l.running);
                laneOldest.set({ lane: l.lane }, l.oldestPendingAgeSeconds ?? 0);
              }
            }
            up.set(1);
          } catch {
            up.set(0);
          }
        })().finally(() => (scrape = undefined)));
      const events = new Gauge({
        name: 'receiver_events',
        help: 'Stored events by status (pending, processing, dead), read from the database at scrape time',
        labelNames: ['status'],
        registers,
        collect,
      });
      const oldest = new Gauge({
        name: 'receiver_oldest_pending_age_seconds',
        help: 'Age of the oldest pending event (0 when none is pending); a growing value means the drain is stuck or failing',
        registers,
        collect,
      });
      const lanePending = new Gauge({
        name: 'receiver_lane_pending',
        help: 'Units of work (one route of one event) waiting in each lane, for their turn or their retry, read from the database at scrape time',
        labelNames: ['lane'],
        registers,
        collect,
      });
      const laneRunning = new Gauge({
        name: 'receiver_lane_running',
        help: 'Units of work claimed in each lane (running, or left to a lease that has not run out yet), read at scrape time; at most 1 per lane',
        labelNames: ['lane'],
        registers,
        collect,
      });
      const laneOldest = new Gauge({
        name: 'receiver_lane_oldest_pending_seconds',
        help: "Age of the event of each lane's oldest pending unit (0 when none is pending); a growing value means the lane is stuck behind a slow or failing effect",
        labelNames: ['lane'],
        registers,
        collect,
      });
      const up = new Gauge({ name: 'receiver_database_up', help: '1 when the last scrape could read the queue from the database, else 0', registers, collect });
    }
    if (logLinesDropped !== undefined) {
      let counted = 0;
      new Counter({
        name: 'receiver_log_lines_dropped_total',
        help: 'Log lines dropped because stderr took them more slowly than they came (its buffer, log.bufferBytes, was full); never blocks ingest',
        registers,
        collect() {
          const now = logLinesDropped();
          this.inc(now - counted);
          counted = now;
        },
      });
    }
    if (processMetrics) collectDefaultMetrics({ register: this.registry });
  }

  /**
   * The configured names (at start and after a reload): their series start at 0. A name
   * no longer configured keeps its series, with what it counted.
   */
  configure({ sources = [], routes = [], lanes = [], catchUpSources = [] }: Pick<MetricsOptions, 'sources' | 'routes' | 'lanes' | 'catchUpSources'>): void {
    this.#lanes = new Set(lanes);
    for (const source of catchUpSources) {
      for (const result of CATCH_UP_RESULTS) this.#catchUpRuns.labels(source, result).inc(0);
      for (const outcome of CATCH_UP_OUTCOMES) this.#catchUpEvents.labels(source, outcome).inc(0);
      this.#catchUpRequests.labels(source).inc(0);
      // A source already configured keeps when its last run succeeded.
      if (!this.#catchUpSeen.has(source)) this.#catchUpLastOk.labels(source).set(0);
      this.#catchUpSeen.add(source);
    }
    this.#sources = new Set(sources);
    for (const source of this.#sources) {
      for (const outcome of DELIVERY_OUTCOMES) this.#deliveries.labels(source, outcome).inc(0);
    }
    for (const route of routes) {
      this.#effectSeconds.zero({ route });
      for (const outcome of ATTEMPT_OUTCOMES) this.#attempts.labels(route, outcome).inc(0);
    }
  }

  /** A reload applied (ok) or refused (error). */
  observeReload(result: 'ok' | 'error'): void {
    this.#reloads.labels(result).inc();
  }

  /** The running configuration was loaded at `at` (ms since the epoch). */
  configLoaded(at: number): void {
    this.#configLoaded.set(at / 1000);
  }

  /** The ingest handler's onOutcome hook. */
  observeDelivery(o: DeliveryOutcome): void {
    const source = this.#sources.has(o.source) ? o.source : UNKNOWN_SOURCE;
    this.#deliveries.labels(source, o.outcome).inc();
    this.#ingestSeconds.labels(source).observe(o.durationMs / 1000);
  }

  /** The drain's onAttempt hook. */
  observeAttempt(a: EffectAttemptObservation): void {
    this.#attempts.labels(a.route, a.outcome).inc();
    if (RAN.has(a.outcome)) this.#effectSeconds.labels(a.route).observe(a.durationMs / 1000);
  }

  /** The drain's onEvent hook. */
  observeEvent(e: EventObservation): void {
    this.#settled.labels(e.status).inc();
  }

  /** serve's catch-up runs (src/catchup/schedule.ts). */
  observeCatchUp(r: CatchUpObservation, now = Date.now()): void {
    const result: CatchUpResultName = r.error === null ? 'ok' : 'error';
    this.#catchUpRuns.labels(r.source, result).inc();
    for (const outcome of CATCH_UP_OUTCOMES) this.#catchUpEvents.labels(r.source, outcome).inc(r[CATCH_UP_FIELD[outcome]]);
    this.#catchUpRequests.labels(r.source).inc(r.requests);
    if (r.error === null) this.#catchUpLastOk.labels(r.source).set(now / 1000);
  }

  /** One try to tell an alert destination (src/alerts/send.ts). */
  observeAlert(o: { kind: string; status: string; destination: string; result: string }): void {
    this.#alerts.labels(o.kind, o.status, o.destination, o.result).inc();
  }

  text(): Promise<string> {
    return this.registry.metrics();
  }
}

const digest = (s: string) => createHash('sha256').update(s).digest();

/**
 * True when the Authorization header carries exactly `Bearer <token>`. Both sides are
 * hashed first, so the comparison is constant-time and says nothing about the length.
 */
export function bearerMatches(header: string | undefined, token: Secret): boolean {
  const presented = /^Bearer (.+)$/i.exec(header ?? '')?.[1] ?? '';
  const ok = timingSafeEqual(digest(presented), digest(token.reveal()));
  return ok && presented !== '';
}

export interface MetricsRouteOptions {
  /** With a token, a scrape without `Authorization: Bearer <token>` gets 401. */
  token?: Secret | undefined;
}

/** Mounts GET /metrics (pass to createApp's `extend`). */
export function metricsRoute(metrics: ReceiverMetrics, { token }: MetricsRouteOptions = {}) {
  return function mountMetrics(app: Hono): void {
    app.get('/metrics', async (c: Context) => {
      if (token !== undefined && !bearerMatches(c.req.header('authorization'), token)) {
        return c.json({ error: 'unauthorized', message: 'GET /metrics needs Authorization: Bearer <metrics.token>' }, 401, {
          'www-authenticate': 'Bearer realm="metrics"',
        });
      }
      return c.body(await metrics.text(), 200, { 'content-type': metrics.registry.contentType });
    });
  };
}
