import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { Config } from '../config/load.js';
import type { DeliveryOutcome } from '../http/ingest.js';
import type { Logger } from '../log.js';
import type { Store } from '../store/types.js';
import { detect, type IngestState } from './detect.js';
import { configSecrets, SecretScrubber } from './message.js';
import { sendDue, type AlertSendObservation } from './send.js';

export interface AlertsOptions {
  config: Pick<Config, 'alerts' | 'routes' | 'catchUp' | 'sources' | 'httpSecrets' | 'metrics' | 'admin' | 'database'>;
  store: Store;
  logger: Logger;
  now?: () => number;
  /** The environment exec destinations draw their minimal variables from. */
  env?: NodeJS.ProcessEnv;
  onSend?: (o: AlertSendObservation) => void;
}

export interface Alerts {
  /** Every answer to a delivery: refusals (503) in a row make an `ingest` alert. */
  observeDelivery(o: Pick<DeliveryOutcome, 'outcome' | 'error'>): void;
  /** Stops the timer, abandons a send in flight (left to its lease) and waits for the check to end. */
  stop(): Promise<void>;
}

/** Outcomes that show the database took (or had) the delivery. */
const STORED = new Set(['accepted', 'duplicate', 'replayed', 'conflict']);

/**
 * serve's alerts: every `alerts.checkSeconds`, a check (detect.ts) fires and resolves
 * alerts in the store, then the sender (send.ts) tells the destinations what is due.
 * Checks never overlap; a failed one is logged and the next one tries again.
 */
export function startAlerts({ config, store, logger, now = Date.now, env, onSend }: AlertsOptions): Alerts {
  const settings = config.alerts!;
  const scrubber = new SecretScrubber(configSecrets(config));
  const owner = `${hostname()}:${process.pid}:alerts:${randomBytes(4).toString('hex')}`;
  const ingest: IngestState = { refusingSince: undefined, lastError: undefined, lastAcceptedAt: undefined };
  const abort = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> | undefined;
  let stopped = false;

  const check = async () => {
    try {
      const r = await detect({ settings, store, routes: config.routes, catchUp: config.catchUp, ingest, now: now() });
      for (const f of r.fired) logger.warn({ alert: f.key, kind: f.kind, summary: scrubber.scrub(f.summary) }, 'alert firing');
      for (const key of r.resolved) logger.info({ alert: key }, 'alert resolved');
      await sendDue({
        settings,
        store,
        owner,
        scrubber,
        logger,
        now,
        ...(env === undefined ? {} : { env }),
        signal: abort.signal,
        ...(onSend === undefined ? {} : { onSend }),
      });
    } catch (e) {
      if (!stopped) logger.error({ err: e }, 'alerts check failed');
    }
  };
  const schedule = (delayMs: number) => {
    if (stopped) return;
    timer = setTimeout(() => {
      running = check().finally(() => {
        running = undefined;
        schedule(settings.checkMs);
      });
    }, delayMs);
  };
  schedule(0);

  return {
    observeDelivery(o) {
      if (o.outcome === 'unavailable') {
        ingest.refusingSince ??= now();
        ingest.lastError = o.error;
      } else if (STORED.has(o.outcome)) {
        ingest.refusingSince = undefined;
        ingest.lastAcceptedAt = now();
      }
    },
    async stop() {
      stopped = true;
      clearTimeout(timer);
      abort.abort();
      await running;
    },
  };
}
