import { createHmac } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { expect } from 'vitest';
import { createServer, connect, type AddressInfo, type Socket } from 'node:net';
import type { ServeProcess } from '../helpers.js';
import type { TestDatabase } from '../postgres-helpers.js';

/**
 * What the PostgreSQL fault tests share: a TCP proxy between `serve` and the shared
 * PostgreSQL server that a test cuts and restores (the server itself is never stopped:
 * other tests use it), a way to drop every receiver connection, and a bounded load of
 * signed deliveries from senders that retry until they get an answer other than 503.
 */

export const SECRET = 'pg-faults-secret';

export const shopSource = {
  provider: 'hmac-sha256',
  header: 'X-Signature',
  encoding: 'hex',
  secret: SECRET,
  deliveryId: '{body.id}',
  eventType: '{body.type}',
};

export interface Delivery {
  id: string;
  body: string;
  signature: string;
}

export function delivery(id: string, fields: Record<string, unknown> = {}): Delivery {
  const body = JSON.stringify({ id, type: 'order.paid', key: id, ...fields });
  return { id, body, signature: createHmac('sha256', SECRET).update(body).digest('hex') };
}

export function post(url: string, d: Delivery): Promise<Response> {
  return fetch(`${url}/webhooks/shop`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-signature': d.signature }, body: d.body });
}

export interface TcpProxy {
  port: number;
  /** Connections open through the proxy now. */
  readonly open: number;
  /** Resets every open connection and every new one until restore(): the server refuses. */
  cut(): void;
  /**
   * A network partition until restore(): open connections stop carrying bytes and new ones
   * are accepted but never answered. Nothing is refused; nothing answers.
   */
  hang(): void;
  restore(): void;
  close(): Promise<void>;
}

/** A TCP proxy on 127.0.0.1:<port 0> forwarding to the PostgreSQL server of `url`. */
export async function startProxy(url: string): Promise<TcpProxy> {
  const target = new URL(url);
  const host = target.hostname;
  const port = Number(target.port || '5432');
  const pairs = new Set<[Socket, Socket]>();
  const held = new Set<Socket>();
  let mode: 'open' | 'cut' | 'hang' = 'open';
  const link = (client: Socket) => {
    const upstream = connect(port, host);
    const pair: [Socket, Socket] = [client, upstream];
    pairs.add(pair);
    const end = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
    client.pipe(upstream);
    upstream.pipe(client);
    client.resume();
  };
  const server = createServer((client) => {
    if (mode === 'cut') {
      client.resetAndDestroy();
    } else if (mode === 'hang') {
      client.pause();
      held.add(client);
      const forget = () => held.delete(client);
      client.on('error', forget).on('close', forget);
    } else {
      link(client);
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const cutAll = () => {
    mode = 'cut';
    for (const [client, upstream] of [...pairs]) {
      client.resetAndDestroy();
      upstream.destroy();
    }
    pairs.clear();
    for (const client of held) client.resetAndDestroy();
    held.clear();
  };
  return {
    port: (server.address() as AddressInfo).port,
    get open() {
      return pairs.size;
    },
    cut: cutAll,
    hang() {
      mode = 'hang';
      for (const [client, upstream] of pairs) {
        client.unpipe(upstream);
        upstream.unpipe(client);
        client.pause();
        upstream.pause();
      }
    },
    restore() {
      if (mode === 'hang') {
        for (const [client, upstream] of pairs) {
          client.pipe(upstream);
          upstream.pipe(client);
        }
        for (const client of held) {
          client.removeAllListeners('error').removeAllListeners('close');
          link(client);
        }
        held.clear();
      }
      mode = 'open';
    },
    async close() {
      cutAll();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** The database URL of `db` through the proxy. */
export function viaProxy(db: TestDatabase, proxy: TcpProxy): string {
  const u = new URL(db.url);
  u.hostname = '127.0.0.1';
  u.port = String(proxy.port);
  return u.toString();
}

/**
 * Terminates every connection `serve` holds on the database (application_name receiver),
 * or only those in `state` for at least `forMs`; returns how many.
 */
export async function terminateReceiverConnections(db: TestDatabase, state?: string, forMs = 0): Promise<number> {
  const rows = await db.query<{ n: number }>(
    `SELECT count(pg_terminate_backend(pid))::bigint AS n FROM pg_stat_activity
     WHERE datname = $1 AND application_name = 'receiver' AND ($2::text IS NULL OR state = $2)
       AND state_change <= clock_timestamp() - make_interval(secs => $3::double precision / 1000)`,
    [db.name, state ?? null, forMs],
  );
  return rows[0]?.n ?? 0;
}

export interface LoadResult {
  /** How many of the deliveries the senders took (sent at least once). */
  sent: number;
  /** delivery id -> event id, from every 2xx answer. */
  acked: Map<string, number>;
  /** HTTP status -> count, every answer (retries included). */
  statuses: Map<number, number>;
  /** 503 answers that had no Retry-After header. */
  without503RetryAfter: number;
  /** Requests that got no HTTP answer at all (connection refused or reset). */
  noAnswer: number;
}

/**
 * Sends `deliveries` from `concurrency` senders, each retrying a 503 after `retryMs`
 * (not the Retry-After of 5 s: the test is bounded in time) until `deadline`. A
 * delivery that never got a 2xx is simply not acknowledged. With `until`, the senders
 * take no new delivery once it returns true (a delivery already taken is still sent
 * until answered): the load lasts as long as the test needs it.
 */
export async function sendLoad(
  url: string,
  deliveries: readonly Delivery[],
  options: { concurrency: number; retryMs: number; deadline: number; pauseMs?: number; until?: () => boolean },
): Promise<LoadResult> {
  const result: LoadResult = { sent: 0, acked: new Map(), statuses: new Map(), without503RetryAfter: 0, noAnswer: 0 };
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
  const sender = async () => {
    while (result.sent < deliveries.length && Date.now() < options.deadline && options.until?.() !== true) {
      const d = deliveries[result.sent++]!;
      while (Date.now() < options.deadline) {
        let res: Response;
        try {
          res = await post(url, d);
        } catch {
          result.noAnswer += 1;
          await sleep(options.retryMs);
          continue;
        }
        const text = await res.text();
        result.statuses.set(res.status, (result.statuses.get(res.status) ?? 0) + 1);
        if (res.status === 503) {
          if (res.headers.get('retry-after') === null) result.without503RetryAfter += 1;
          await sleep(options.retryMs);
          continue;
        }
        if (res.status >= 200 && res.status < 300) result.acked.set(d.id, (JSON.parse(text) as { id: number }).id);
        break;
      }
      if (options.pauseMs !== undefined) await sleep(options.pauseMs);
    }
  };
  await Promise.all(Array.from({ length: options.concurrency }, sender));
  return result;
}

/** Waits (bounded) until every event is done; fails naming what is left, or at once if `serve` exited. */
export async function waitAllDone(db: TestDatabase, timeoutMs: number, serve?: ServeProcess): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    if (serve !== undefined && serve.child.exitCode !== null) {
      throw new Error(`serve exited with ${serve.child.exitCode}:\n${serve.output().stderr.split('\n').slice(-5).join('\n')}`);
    }
    const left = await db.query<{ n: number }>(`SELECT count(*)::bigint AS n FROM events WHERE status <> 'done'`);
    if (left[0]!.n === 0) return;
    if (Date.now() > until) {
      const by = await db.query(`SELECT status, count(*)::bigint AS n FROM events GROUP BY 1`);
      // A lease is a unit's (one route of an event).
      const claims = await db.query(
        `SELECT event_id, route, status, attempts, lease_owner, lease_expires_at - (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS lease_left_ms
         FROM units WHERE status <> 'done' ORDER BY event_id, route LIMIT 20`,
      );
      const log = serve === undefined ? '' : `\nserve's last lines:\n${serve.output().stderr.split('\n').slice(-30).join('\n')}`;
      throw new Error(`${left[0]!.n} events still not done after ${timeoutMs} ms: ${JSON.stringify(by)}\nnot done: ${JSON.stringify(claims)}${log}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

export function logLines(stderr: string): Record<string, unknown>[] {
  return stderr
    .split('\n')
    .filter((l) => l.trim().startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

/**
 * Every acknowledged delivery is stored once, as the event its 2xx named; every event's
 * effects ran once: one row per key in `applied` (the module's table), one line per key
 * in `execOut` (the exec effect's file), and the ledger says done, one run, for each.
 */
export async function checkEffectsOnce(db: TestDatabase, acked: ReadonlyMap<string, number>, execOut: string): Promise<void> {
  const rows = await db.query<{ id: number; delivery_id: string }>('SELECT id, delivery_id FROM events');
  const stored = new Map(rows.map((r) => [r.delivery_id, r.id]));
  for (const [deliveryId, eventId] of acked) expect(stored.get(deliveryId)).toBe(eventId);
  const keys = [...stored.keys()].sort();

  const applied = await db.query<{ key: string; n: number }>('SELECT key, count(*)::bigint AS n FROM applied GROUP BY key ORDER BY key');
  expect(applied.filter((a) => a.n !== 1)).toEqual([]);
  expect(applied.map((a) => a.key).sort()).toEqual(keys);

  const lines = existsSync(execOut) ? readFileSync(execOut, 'utf8').trim().split('\n') : [];
  const runs = new Map<string, number>();
  for (const l of lines) runs.set(l, (runs.get(l) ?? 0) + 1);
  expect([...runs].filter(([, n]) => n !== 1)).toEqual([]);
  expect([...runs.keys()].sort()).toEqual(keys);

  const ledger = await db.query<{ route: string; status: string; runs: number; n: number }>(
    'SELECT route, status, runs, count(*)::bigint AS n FROM effects GROUP BY 1, 2, 3 ORDER BY 1, 2, 3',
  );
  expect(ledger).toEqual([
    { route: 'licence', status: 'done', runs: 1, n: keys.length },
    { route: 'notify', status: 'done', runs: 1, n: keys.length },
  ]);
}
