import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { post, startServe, tempDir, waitFor, writeConfig, type ServeProcess } from '../helpers.js';
import { inspect, lines } from './helpers.js';

const shop = { provider: 'none', deliveryId: '{body.id}', eventType: '{body.type}' };

/** Heartbeat leases and fast recovery, with real `serve` processes sharing one SQLite file. */
describe('leases under a heartbeat (receiver serve processes)', () => {
  let tmp: ReturnType<typeof tempDir>;
  let serves: ServeProcess[] = [];
  let orphan: number | undefined;
  beforeEach(() => {
    tmp = tempDir('receiver-heartbeat-');
    serves = [];
    orphan = undefined;
  });
  afterEach(async () => {
    for (const s of serves) await s.stop('SIGKILL');
    if (orphan !== undefined) {
      try {
        process.kill(orphan, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    tmp.cleanup();
  });

  it('an effect three times longer than the lease runs once, though a second serve polls the same file all along', async () => {
    const runs = join(tmp.dir, 'runs.txt');
    const file = writeConfig(tmp.dir, {
      sources: { shop },
      drain: { leaseSeconds: 1, pollMs: 50 },
      routes: [
        {
          name: 'deploy',
          source: 'shop',
          key: '{body.commit}',
          effect: { exec: ['/bin/sh', '-c', 'echo "$RECEIVER_KEY" >> "$1"; sleep 3', 'sh', runs], timeoutSeconds: 10 },
        },
      ],
    });
    serves.push(await startServe(file));
    serves.push(await startServe(file));
    expect((await post(`${serves[0]!.url}/webhooks/shop`, JSON.stringify({ id: 'e1', type: 'push', commit: 'c1' }))).status).toBe(202);
    const db = inspect(join(tmp.dir, 'receiver.db'));
    try {
      await waitFor(() => (db.event(1).status === 'done' ? true : undefined), 'the event to be done', 15_000);
      expect(lines(runs)).toEqual(['c1']);
      expect(db.effect('deploy:c1')).toMatchObject({ status: 'done', runs: 1 });
      expect(db.event(1)).toMatchObject({ attempts: 1 });
    } finally {
      db.close();
    }
  });

  it('kill -9 mid-effect and an immediate restart: the claim is taken back at once, not after the 60 s lease', async () => {
    const runs = join(tmp.dir, 'runs.txt');
    const slow = join(tmp.dir, 'slow');
    const pid = join(tmp.dir, 'pid');
    const script = 'echo "$RECEIVER_KEY $RECEIVER_ATTEMPT" >> "$1"; echo $$ > "$3"; if [ -f "$2" ]; then exec sleep 30; fi';
    const file = writeConfig(tmp.dir, {
      sources: { shop },
      drain: { leaseSeconds: 60, pollMs: 50 },
      routes: [
        { name: 'deploy', source: 'shop', key: '{body.commit}', effect: { exec: ['/bin/sh', '-c', script, 'sh', runs, slow, pid], timeoutSeconds: 45 } },
      ],
    });
    writeFileSync(slow, '');
    const first = await startServe(file);
    serves.push(first);
    expect((await post(`${first.url}/webhooks/shop`, JSON.stringify({ id: 'e1', type: 'push', commit: 'c1' }))).status).toBe(202);
    await waitFor(() => (lines(runs).length === 1 && existsSync(pid) ? true : undefined), 'the effect to start', 10_000);
    orphan = Number(readFileSync(pid, 'utf8'));
    await first.stop('SIGKILL');
    rmSync(slow);

    const restartedAt = Date.now();
    serves.push(await startServe(file));
    const db = inspect(join(tmp.dir, 'receiver.db'));
    try {
      // Waited for past the 60 s lease: a restart that did not take the claim back would still
      // finish the event once the lease ran out, and only the bound below would fail.
      await waitFor(() => (db.event(1).status === 'done' ? true : undefined), 'the event to be done', 75_000);
      expect(Date.now() - restartedAt).toBeLessThan(10_000);
      expect(lines(runs)).toEqual(['c1 1', 'c1 2']);
      expect(db.effect('deploy:c1')).toMatchObject({ status: 'done', runs: 2 });
      expect(serves[1]!.output().stderr).toMatch(/took back the claims of a receiver process that is no longer running/);
    } finally {
      db.close();
    }
  }, 120_000);

  it('two serve processes on one file, short leases and slow effects: no effect key runs twice', async () => {
    const runs = join(tmp.dir, 'runs.txt');
    const file = writeConfig(tmp.dir, {
      sources: { shop },
      drain: { leaseSeconds: 0.5, pollMs: 20 },
      // An event whose key runs in the other process waits (busy) and looks again soon.
      retry: { maxAttempts: 100, baseSeconds: 0.1, maxSeconds: 0.5 },
      routes: [
        {
          name: 'licence',
          source: 'shop',
          key: '{body.order}',
          effect: { exec: ['/bin/sh', '-c', 'echo "$RECEIVER_KEY" >> "$1"; sleep 0.$2', 'sh', runs, '8'], timeoutSeconds: 10 },
        },
      ],
    });
    serves.push(await startServe(file));
    serves.push(await startServe(file));
    // 24 events about 8 orders, posted alternately to both processes.
    const posts = [];
    for (let i = 0; i < 24; i++) {
      const target = serves[i % 2]!;
      posts.push(post(`${target.url}/webhooks/shop`, JSON.stringify({ id: `e${i}`, type: 'order.paid', order: `o${i % 8}` })));
    }
    expect((await Promise.all(posts)).every((r) => r.status === 202)).toBe(true);
    const db = inspect(join(tmp.dir, 'receiver.db'));
    try {
      const done = () => (db.db.prepare(`SELECT count(*) AS n FROM events WHERE status = 'done'`).get() as { n: number }).n;
      await waitFor(() => (done() === 24 ? true : undefined), 'every event to be done', 30_000);
      expect(lines(runs).sort()).toEqual(Array.from({ length: 8 }, (_, i) => `o${i}`).sort());
      expect(db.db.prepare(`SELECT max(runs) AS m FROM effects`).get()).toEqual({ m: 1 });
    } finally {
      db.close();
    }
  });
});
