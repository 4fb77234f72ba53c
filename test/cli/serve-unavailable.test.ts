import Database from 'better-sqlite3';
import { createHmac } from 'node:crypto';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startServe, tempDir, writeConfig, type ServeProcess } from '../helpers.js';

/**
 * `serve` on SQLite while another process holds the write lock past busyTimeoutMs: every
 * delivery is answered 503 with Retry-After and logged as one line without a stack,
 * /healthz says 503 while an insert cannot commit, and both come back by themselves when
 * the lock is let go.
 */

const SECRET = 'unavailable-secret';
const BUSY_MS = 300;

function signed(id: string): { body: string; headers: Record<string, string> } {
  const body = JSON.stringify({ id, type: 'order.paid' });
  return { body, headers: { 'content-type': 'application/json', 'x-signature': createHmac('sha256', SECRET).update(body).digest('hex') } };
}

async function deliver(url: string, id: string): Promise<Response> {
  const d = signed(id);
  return fetch(`${url}/webhooks/shop`, { method: 'POST', headers: d.headers, body: d.body });
}

const lines = (stderr: string) =>
  stderr
    .split('\n')
    .filter((l) => l.trim().startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>);

describe('serve while the SQLite write lock is held by another process', () => {
  let tmp: ReturnType<typeof tempDir>;
  let serve: ServeProcess | undefined;
  let holder: Database.Database | undefined;

  beforeEach(() => {
    tmp = tempDir('receiver-unavailable-');
  });
  afterEach(async () => {
    if (holder?.inTransaction === true) holder.exec('ROLLBACK');
    holder?.close();
    holder = undefined;
    await serve?.stop('SIGKILL');
    serve = undefined;
    tmp.cleanup();
  });

  it('503s are one error line each, without a stack; /healthz is 503 while the lock is held and 200 once it is let go', async () => {
    const file = writeConfig(tmp.dir, {
      busyTimeoutMs: BUSY_MS,
      sources: { shop: { provider: 'hmac-sha256', header: 'X-Signature', encoding: 'hex', secret: SECRET, deliveryId: '{body.id}', eventType: '{body.type}' } },
      // The ingest path's lines only: a drain would log its own failed claims meanwhile.
      drain: { enabled: false },
    });
    serve = await startServe(file);
    expect((await deliver(serve.url, 'before')).status).toBe(202);
    expect((await fetch(`${serve.url}/healthz`)).status).toBe(200);

    holder = new Database(join(tmp.dir, 'receiver.db'));
    holder.exec('BEGIN IMMEDIATE');

    // No delivery yet: the ping itself finds that an insert cannot take the lock.
    const idle = await fetch(`${serve.url}/healthz`);
    expect(idle.status).toBe(503);
    expect(idle.headers.get('retry-after')).not.toBeNull();

    const refused = 5;
    for (let i = 0; i < refused; i++) {
      const res = await deliver(serve.url, `during-${i}`);
      expect(res.status).toBe(503);
      expect(res.headers.get('retry-after')).toBe('5');
    }
    const during = await fetch(`${serve.url}/healthz`);
    expect(during.status).toBe(503);
    expect(await during.json()).toMatchObject({ status: 'unavailable' });

    holder.exec('ROLLBACK');
    // The deliveries refused a moment ago still count as recent: a sender that retries
    // brings health back at once, with its first committed insert.
    expect((await deliver(serve.url, 'during-0')).status).toBe(202);
    expect((await fetch(`${serve.url}/healthz`)).status).toBe(200);

    await serve.stop('SIGTERM');
    const errors = lines(serve.output().stderr).filter((l) => l.level === 'error' || l.level === 'fatal');
    // One line per refused delivery: the delivery line, with the cause and no stack.
    expect(errors).toHaveLength(refused);
    for (const e of errors) {
      expect(e).toMatchObject({ msg: 'delivery', outcome: 'unavailable', status: 503 });
      expect(String(e.error)).toMatch(/database unavailable/);
      expect(JSON.stringify(e)).not.toMatch(/stack|\bat [^ ]+ \(/);
    }
  });

  it('/healthz comes back to 200 by itself a few seconds after the last refused delivery, with no new delivery', async () => {
    const file = writeConfig(tmp.dir, {
      busyTimeoutMs: BUSY_MS,
      sources: { shop: { provider: 'hmac-sha256', header: 'X-Signature', encoding: 'hex', secret: SECRET, deliveryId: '{body.id}', eventType: '{body.type}' } },
    });
    serve = await startServe(file);
    holder = new Database(join(tmp.dir, 'receiver.db'));
    holder.exec('BEGIN IMMEDIATE');
    expect((await deliver(serve.url, 'refused')).status).toBe(503);
    holder.exec('ROLLBACK');
    // The lock is free, but ingest's last word was a 503 moments ago.
    expect((await fetch(`${serve.url}/healthz`)).status).toBe(503);
    const until = Date.now() + 8000;
    let status = 503;
    while (status !== 200 && Date.now() < until) {
      await new Promise((r) => setTimeout(r, 200));
      status = (await fetch(`${serve.url}/healthz`)).status;
    }
    expect(status).toBe(200);
  });
});
