import type { Config } from '../config/load.js';
import type { Logger } from '../log.js';
import type { Store } from '../store/types.js';
import { runCatchUp, runSummary, type CatchUpResult } from './run.js';

export interface CatchUpScheduleOptions {
  config: Pick<Config, 'catchUp' | 'sources' | 'routes'>;
  store: Store;
  logger: Logger;
  /** After a run that stored events (wakes the drain). */
  onStored?: () => void;
  /** Every run's result (metrics). */
  onResult?: (r: CatchUpResult) => void;
  now?: () => number;
}

export interface CatchUpSchedule {
  /** Stops the timers, aborts runs in flight and waits for them to end. */
  stop(): Promise<void>;
}

/**
 * serve's background catch-up: one run per configured source at start (a restart after
 * downtime is when it matters most), then every `catchUp.everyMinutes`. Runs of one source
 * never overlap; a failed run is logged and counted, and the next one tries again. Nothing
 * here is awaited by ingest: the runs use the store as any other client does.
 */
export function startCatchUp({ config, store, logger, onStored, onResult, now = Date.now }: CatchUpScheduleOptions): CatchUpSchedule {
  const abort = new AbortController();
  const timers = new Set<NodeJS.Timeout>();
  const running = new Set<Promise<void>>();
  let stopped = false;

  const schedule = (name: string, delayMs: number) => {
    if (stopped) return;
    const timer = setTimeout(() => {
      timers.delete(timer);
      const run = once(name).finally(() => running.delete(run));
      running.add(run);
    }, delayMs);
    timers.add(timer);
  };

  const once = async (name: string) => {
    const settings = config.catchUp.get(name)!;
    const source = config.sources.get(name)!;
    try {
      const r = await runCatchUp({
        settings,
        source,
        store,
        routes: config.routes,
        now: now(),
        signal: abort.signal,
      });
      if (r.busy) {
        logger.info({ source: name }, 'catch-up skipped: another receiver is running it');
        return;
      }
      onResult?.(r);
      const line = { ...runSummary(r), durationMs: r.durationMs };
      if (r.error === null) logger.info(line, 'catch-up');
      else logger.error({ ...line, error: r.error, ...(r.hint === null ? {} : { hint: r.hint }) }, 'catch-up failed');
      if (r.storedNow > 0) onStored?.();
    } catch (e) {
      // The store itself failed (closed, unavailable): the next run tries again.
      if (!stopped) logger.error({ source: name, err: e }, 'catch-up failed');
    } finally {
      schedule(name, settings.everyMinutes * 60_000);
    }
  };

  for (const name of config.catchUp.keys()) schedule(name, 0);

  return {
    async stop() {
      stopped = true;
      for (const t of timers) clearTimeout(t);
      timers.clear();
      abort.abort();
      await Promise.allSettled([...running]);
    },
  };
}
