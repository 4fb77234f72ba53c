import type { QueueStats } from '../ops-types.js';
import { sqliteError } from './errors.js';
import type { Db } from './open.js';

/**
 * The queue gauges of GET /metrics, read at every scrape. Each count walks one partial
 * index (events_due, events_leased, events_dead; the planner picks them), so the cost
 * follows the queue, not the table: stats() scans every event, which on a large file
 * would stall ingest at every scrape.
 */
export function queueStats(db: Db): Promise<QueueStats> {
  try {
    const pending = db.prepare(`SELECT count(*) AS n, min(received_at) AS oldest FROM events WHERE status = 'pending'`).get() as {
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
