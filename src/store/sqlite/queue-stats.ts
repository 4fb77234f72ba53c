import type { QueueStats } from '../ops-types.js';
import { sqliteError } from './errors.js';
import type { Db } from './open.js';

/**
 * The queue gauges of GET /metrics, read at every scrape, on serve's main thread. Each
 * count walks one partial index (events_pending, events_leased, events_dead; the planner
 * picks them), and the oldest pending event is the first stored of them, one look-up in
 * events_pending: so the cost follows the queue's size in index entries, never reads an
 * event's row but one, and never the table. (min(received_at) over the pending events read
 * every pending row: 130 to 280 ms a scrape with 100,000 pending, the HTTP thread held
 * meanwhile; stats() scans every event.)
 */
export function queueStats(db: Db): Promise<QueueStats> {
  try {
    const pending = db
      .prepare(
        `SELECT count(*) AS n, (SELECT received_at FROM events WHERE status = 'pending' ORDER BY id LIMIT 1) AS oldest FROM events WHERE status = 'pending'`,
      )
      .get() as {
      n: number;
      oldest: number | null;
    };
    const processing = db.prepare(`SELECT count(*) FROM events WHERE status = 'processing'`).pluck().get() as number;
    const dead = db.prepare(`SELECT count(*) FROM events WHERE status = 'dead'`).pluck().get() as number;
    return Promise.resolve({ pending: pending.n, processing, dead, oldestPendingReceivedAt: pending.oldest });
  } catch (e) {
    return Promise.reject(sqliteError(e, 'queue stats'));
  }
}
