import type { QueueStats } from '../ops-types.js';
import type { Conn } from './conn.js';

/**
 * The queue gauges of GET /metrics, read at every scrape: one statement whose three
 * filtered counts each match a partial index (events_due, events_leased, events_dead),
 * never the finished events that stats() scans.
 */
export async function queueStats(c: Conn): Promise<QueueStats> {
  const { rows } = await c.query<{ pending: number; processing: number; dead: number; oldest: number | null }>(
    'queue stats',
    `SELECT
       (SELECT count(*) FROM events WHERE status = 'pending') AS pending,
       (SELECT count(*) FROM events WHERE status = 'processing') AS processing,
       (SELECT count(*) FROM events WHERE status = 'dead') AS dead,
       (SELECT min(received_at) FROM events WHERE status = 'pending') AS oldest`,
  );
  const r = rows[0] as { pending: number; processing: number; dead: number; oldest: number | null };
  return { pending: r.pending, processing: r.processing, dead: r.dead, oldestPendingReceivedAt: r.oldest };
}
