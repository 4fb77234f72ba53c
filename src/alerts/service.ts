import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { Config } from '../config/load.js';
import type { DeliveryOutcome } from '../http/ingest.js';
import type { Logger } from '../log.js';
import type { Store } from '../store/types.js';
import { deliver } from './deliver.js';
import { detect, ingestAlert, type IngestState } from './detect.js';
import { alertMessage, configSecrets, SecretScrubber } from './message.js';
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
  /**
   * Stops the timer and waits for the check in flight to end. A shutdown abandons its send
   * (left to its lease: sent again later, perhaps twice); a reload (`finishSends`) lets it
   * finish, within the destination's own time bound, so that it is recorded once.
   */
  stop(options?: { finishSends?: boolean }): Promise<void>;
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
  const ingest: IngestState = { refusingSince: undefined, lastError: undefined, lastAcceptedAt: undefined, told: new Set(), toldFacts: undefined };

  /**
   * Deliveries are refused and the database will not store the alert either (it is what
   * refuses them): each destination is told directly, once, and the alert is stored as
   * sent to it once the database takes it.
   */
  const tellDirectly = async () => {
    const at = now();
    const facts = ingestAlert(ingest, at);
    if (facts === undefined) return;
    const message = alertMessage(facts, 'firing', at, settings.adminUrl, scrubber);
    ingest.toldFacts ??= facts;
    for (const d of settings.destinations) {
      if (!d.on.includes('ingest') || ingest.told.has(d.name) || abort.signal.aborted) continue;
      const r = await deliver(d, message, `ingest:${ingest.refusingSince}:${d.name}`, at, { ...(env === undefined ? {} : { env }), signal: abort.signal });
      if (r.ok) {
        ingest.told.add(d.name);
        onSend?.({ kind: 'ingest', status: 'firing', destination: d.name, result: 'sent' });
        logger.warn({ alert: 'ingest', destination: d.name }, 'alert sent directly: the database cannot store it');
      } else onSend?.({ kind: 'ingest', status: 'firing', destination: d.name, result: 'failed' });
    }
  };
  const abort = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> | undefined;
  let stopped = false;

  const check = async () => {
    try {
      const r = await detect({ settings, store, routes: config.routes, catchUp: config.catchUp, ingest, now: now() }).catch(async (e: unknown) => {
        await tellDirectly();
        throw e;
      });
      if (r.ingestUnstored) await tellDirectly();
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
    async stop(options = {}) {
      stopped = true;
      clearTimeout(timer);
      if (options.finishSends !== true) abort.abort();
      await running;
    },
  };
}
