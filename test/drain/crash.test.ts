import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { post, startServe, tempDir, waitFor, writeConfig, type ServeProcess } from '../helpers.js';
import { inspect, lines } from './helpers.js';

describe('crash mid-effect (kill -9 of receiver serve)', () => {
  let tmp: ReturnType<typeof tempDir>;
  let serve: ServeProcess | undefined;
  let orphan: number | undefined;
  beforeEach(() => {
    tmp = tempDir('receiver-crash-');
  });
  afterEach(async () => {
    await serve?.stop('SIGKILL');
    // The effect a crashed serve left behind keeps running (it is its own process group).
    if (orphan !== undefined) {
      try {
        process.kill(orphan, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    tmp.cleanup();
  });

  it('loses nothing: after a restart the event completes, and the repeat is visible in the ledger', async () => {
    const runs = join(tmp.dir, 'runs.txt');
    const slow = join(tmp.dir, 'slow');
    const pid = join(tmp.dir, 'pid');
    // Records each run, then (while `slow` exists) hangs like a deploy in progress.
    const script = 'echo "$RECEIVER_KEY $RECEIVER_ATTEMPT" >> "$1"; echo $$ > "$3"; if [ -f "$2" ]; then exec sleep 30; fi';
    const file = writeConfig(tmp.dir, {
      sources: { shop: { provider: 'none', deliveryId: '{body.id}', eventType: '{body.type}' } },
      drain: { leaseSeconds: 60, pollMs: 50 },
      routes: [
        { name: 'deploy', source: 'shop', key: '{body.commit}', effect: { exec: ['/bin/sh', '-c', script, 'sh', runs, slow, pid], timeoutSeconds: 45 } },
      ],
    });
    const dbPath = join(tmp.dir, 'receiver.db');
    writeFileSync(slow, '');

    serve = await startServe(file);
    const first = await post(`${serve.url}/webhooks/shop`, JSON.stringify({ id: 'e1', type: 'push', commit: 'c1' }));
    expect(first.status).toBe(202);
    await waitFor(() => (lines(runs).length === 1 && existsSync(pid) ? true : undefined), 'the effect to start', 10_000);
    // A second event arrives while the first effect runs: it waits, committed, behind it.
    const second = await post(`${serve.url}/webhooks/shop`, JSON.stringify({ id: 'e2', type: 'push', commit: 'c2' }));
    expect(second.status).toBe(202);
    orphan = Number(readFileSync(pid, 'utf8'));

    serve.child.kill('SIGKILL');
    await serve.stop('SIGKILL');
    serve = undefined;

    const db = inspect(dbPath);
    expect(db.event(1)).toMatchObject({ status: 'processing', attempts: 1 });
    expect(db.event(2)).toMatchObject({ status: 'pending' });
    expect(db.effect('deploy:c1')).toMatchObject({ status: 'running', runs: 1 });
    expect(db.attempts(1).map((a) => a.outcome)).toEqual(['running']);

    // The next run will not hang; the crashed claim's lease expires (moved back, not waited for).
    rmSync(slow);
    db.db.prepare(`UPDATE units SET lease_expires_at = ? WHERE event_id = 1`).run(Date.now() - 1);

    serve = await startServe(file);
    await waitFor(() => (db.event(1).status === 'done' && db.event(2).status === 'done' ? true : undefined), 'both events to be done', 10_000);
    expect(lines(runs)).toEqual(['c1 1', 'c1 2', 'c2 1']);
    expect(db.effect('deploy:c1')).toMatchObject({ status: 'done', runs: 2, event_id: 1 });
    expect(db.effect('deploy:c2')).toMatchObject({ status: 'done', runs: 1 });
    // The crashed run's attempt ended as interrupted (failed) when its unit was taken back, beside the repeat that finished.
    expect(db.attempts(1).map((a) => [a.attempt, a.outcome])).toEqual([
      [1, 'failed'],
      [2, 'ok'],
    ]);
    expect(db.attempts(1)[0]!.error).toMatch(/^interrupted: /);
    db.close();
  });
});
