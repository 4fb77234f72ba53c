import Database from 'better-sqlite3';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import type { Config } from '../../src/config/load.js';
import { planStored } from '../../src/drain/loop.js';
import { processUnit, type AttemptOutcome, type EventOutcome, type ProcessContext } from '../../src/drain/process.js';
import { createLogger } from '../../src/log.js';
import type { SqliteStore } from '../../src/store/sqlite/index.js';
import type { NewEvent } from '../../src/store/types.js';

/** A clock tests move by hand. */
export function clock(start = Date.now()) {
  let t = start;
  return {
    now: () => t,
    advance: (ms: number) => (t += ms),
    set: (ms: number) => (t = ms),
  };
}

export const silent = createLogger('silent');

export function newEvent(e: {
  source: string;
  deliveryId: string;
  eventType: string;
  body: unknown;
  receivedAt: number;
  headers?: Record<string, string>;
}): NewEvent {
  const body = Buffer.from(typeof e.body === 'string' ? e.body : JSON.stringify(e.body));
  return {
    source: e.source,
    deliveryId: e.deliveryId,
    eventType: e.eventType,
    headers: { 'content-type': 'application/json', ...e.headers },
    body,
    bodySha256: createHash('sha256').update(body).digest('hex'),
    receivedAt: e.receivedAt,
    successStatus: 202,
    onConflict: 'reject',
  };
}

export interface Harness {
  ctx: ProcessContext;
  attempts: AttemptOutcome[];
  events: EventOutcome[];
}

export function harness(
  config: Config,
  store: SqliteStore,
  now: () => number,
  random: () => number = () => 0.5,
  execEnv: NodeJS.ProcessEnv = process.env,
): Harness {
  const attempts: AttemptOutcome[] = [];
  const events: EventOutcome[] = [];
  const ctx: ProcessContext = {
    config,
    store,
    logger: silent,
    now,
    random,
    leaseMs: config.drain.leaseSeconds * 1000,
    execEnv,
    onAttempt: (a) => attempts.push(a),
    onEvent: (e) => events.push(e),
  };
  return { ctx, attempts, events };
}

let owners = 0;

/**
 * What the loop does, step by step and without timers: plan, then claim the oldest due
 * unit and process it, until nothing is due.
 */
export async function drainDue(h: Harness, owner = 'test'): Promise<EventOutcome[]> {
  const out: EventOutcome[] = [];
  for (;;) {
    while ((await planStored(h.ctx.store, h.ctx.config.routes, h.ctx.now())) > 0);
    const [unit] = await h.ctx.store.claimUnits(`${owner}#${++owners}`, h.ctx.now(), h.ctx.leaseMs, { busyLanes: [], lanes: 1, perLane: 1 });
    if (unit === undefined) return out;
    out.push(await processUnit(h.ctx, unit, new AbortController().signal));
  }
}

/** An exec effect that appends its RECEIVER_KEY to `file` (no shell interpolation of the key). */
export const appendKey = (file: string) => ['/bin/sh', '-c', 'echo "$RECEIVER_KEY" >> "$1"', 'sh', file];

export function lines(file: string): string[] {
  return existsSync(file)
    ? readFileSync(file, 'utf8')
        .split('\n')
        .filter((l) => l !== '')
    : [];
}

/** A separate connection for inspecting rows and moving timestamps, as an operator would. */
export function inspect(path: string) {
  const db = new Database(path);
  db.pragma('busy_timeout = 2000');
  return {
    db,
    event: (id: number) =>
      db.prepare('SELECT * FROM events WHERE id = ?').get(id) as Record<string, unknown> & {
        status: string;
        attempts: number;
        next_attempt_at: number;
        last_error: string | null;
        lease_owner: string | null;
        lease_expires_at: number | null;
        force_effects: number;
      },
    unit: (eventId: number, route: string) =>
      db.prepare('SELECT * FROM units WHERE event_id = ? AND route = ?').get(eventId, route) as
        (Record<string, unknown> & { status: string; attempts: number; lane: string; lease_owner: string | null; replays: number }) | undefined,
    effect: (key: string) =>
      db.prepare('SELECT * FROM effects WHERE effect_key = ?').get(key) as
        | (Record<string, unknown> & { status: string; runs: number; version: string | null; forced_runs: number; last_error: string | null; event_id: number })
        | undefined,
    attempts: (eventId?: number) =>
      (eventId === undefined
        ? db.prepare('SELECT * FROM attempts ORDER BY id').all()
        : db.prepare('SELECT * FROM attempts WHERE event_id = ? ORDER BY id').all(eventId)) as {
        id: number;
        event_id: number;
        attempt: number;
        route: string;
        effect_key: string | null;
        outcome: string;
        error: string | null;
        output: string | null;
        forced: number;
        finished_at: number | null;
      }[],
    close: () => db.close(),
  };
}
