import { spawnSync } from 'node:child_process';
import { closeSync, mkdirSync, openSync, rmSync, truncateSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, describe, expect, it } from 'vitest';
import { startServe, tempDir, writeConfig, type ServeProcess } from '../helpers.js';
import { inspect, integrityCheck, postOnce, printReport, SECRET_ENV, shopSource, signShop, TEST_TIMEOUT_MS } from './harness.js';

/**
 * The database on a small filesystem (a size-limited tmpfs) that a filler file fills up:
 * deliveries are answered 503 with Retry-After, nothing is half-written, the file stays
 * intact, and ingest recovers once the filler is deleted. Needs root (CI runs as root);
 * without permission to mount, the test is skipped with a notice.
 */

function mount(dir: string, sizeMb: number): string | undefined {
  const r = spawnSync('mount', ['-t', 'tmpfs', '-o', `size=${sizeMb}m`, 'tmpfs', dir], { encoding: 'utf8' });
  return r.status === 0 ? undefined : (r.stderr || r.error?.message || `mount exited with ${r.status}`).trim();
}

function unmount(dir: string): void {
  if (spawnSync('umount', [dir]).status !== 0) spawnSync('umount', ['-l', dir]);
}

/** Writes zeros until the filesystem says ENOSPC (bounded by `maxBytes`); returns the bytes written. */
function fill(file: string, maxBytes: number): number {
  const fd = openSync(file, 'w');
  const chunk = Buffer.alloc(64 * 1024);
  let written = 0;
  try {
    while (written < maxBytes) {
      try {
        written += writeSync(fd, chunk);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === 'ENOSPC') break;
        throw e;
      }
    }
    // Then the last few bytes, one small write at a time.
    for (let small = Buffer.alloc(512); written < maxBytes;) {
      try {
        written += writeSync(fd, small);
      } catch {
        break;
      }
    }
  } finally {
    closeSync(fd);
  }
  return written;
}

describe('reliability: a full disk', () => {
  const tmp = tempDir('receiver-disk-');
  afterAll(tmp.cleanup);

  it(
    'deliveries get 503 with Retry-After while the disk is full; nothing half-written; ingest recovers when space is freed',
    async (ctx) => {
      const mnt = join(tmp.dir, 'small');
      mkdirSync(mnt);
      const refused = mount(mnt, 8);
      if (refused !== undefined) {
        const why = `cannot mount a small tmpfs (${refused}). Run as root to include it.`;
        console.warn(`\n*** SKIPPED the full-disk test: ${why} ***\n`);
        ctx.skip(why);
      }
      let serve: ServeProcess | undefined;
      try {
        const dbPath = join(mnt, 'receiver.db');
        const file = writeConfig(tmp.dir, {
          database: dbPath,
          sources: { shop: shopSource },
          drain: { leaseSeconds: 2, pollMs: 100 },
          shutdownGraceSeconds: 5,
        });
        serve = await startServe(file, { env: SECRET_ENV });
        let url = `${serve.url}/webhooks/shop`;
        let n = 0;
        const delivery = (size = 0) => {
          const id = `disk-${n++}`;
          return { id, body: JSON.stringify({ id, type: 'order.paid', pad: 'p'.repeat(size) }) };
        };
        const acked = new Set<string>();
        const send = async (d: { id: string; body: string }) => {
          const a = await postOnce(url, d.body, signShop(d.body));
          if (a.status === 202) acked.add(d.id);
          return a;
        };

        // 1. Before: accepted.
        for (let i = 0; i < 20; i++) expect((await send(delivery(1000))).status).toBe(202);

        // 2. Fill the filesystem but for a little headroom, then deliver from 8 senders at once:
        //    the disk runs out in the middle of the load, between and inside group commits.
        const filler = join(mnt, 'filler');
        const filled = fill(filler, 16 * 1024 * 1024);
        truncateSync(filler, Math.max(0, filled - 256 * 1024));
        const answers: Record<string, number> = {};
        const unavailable: { id: string; body: string }[] = [];
        let missingRetryAfter = 0;
        let sent = 0;
        const other: number[] = [];
        await Promise.all(
          Array.from({ length: 8 }, async () => {
            while (sent < 800 && unavailable.length < 40) {
              sent += 1;
              const d = delivery(8 * 1024);
              const a = await send(d);
              answers[a.status] = (answers[a.status] ?? 0) + 1;
              if (a.status === 503) {
                unavailable.push(d);
                if (a.retryAfter === null) missingRetryAfter += 1;
              } else if (a.status !== 202) other.push(a.status);
            }
          }),
        );
        expect(other).toEqual([]);
        expect(unavailable.length).toBeGreaterThan(0);
        expect(missingRetryAfter).toBe(0);
        const health = await fetch(`${serve.url}/healthz`);
        expect(serve.child.exitCode).toBeNull();

        // Nothing half-written: the file is intact, every 202 is stored whole, no 503 is stored.
        const db = inspect(dbPath);
        const whileFull = integrityCheck(db);
        const rows = new Map(
          (db.prepare(`SELECT delivery_id AS id, body FROM events`).all() as { id: string; body: Buffer }[]).map((r) => [r.id, r.body.toString()]),
        );
        db.close();
        expect(whileFull).toBe('ok');
        for (const id of acked) expect(rows.has(id)).toBe(true);
        for (const d of unavailable) expect(rows.has(d.id)).toBe(false);
        expect(rows.size).toBe(acked.size);

        // 3. kill -9 while the disk is full, and a restart (as systemd would) while it still is:
        //    the new process opens the file, recovers its WAL and answers 503, not a crash loop.
        await serve.stop('SIGKILL');
        serve = await startServe(file, { env: SECRET_ENV });
        const restartedWhileFull: Record<string, number> = {};
        for (const d of unavailable.slice(0, 5)) {
          const a = await postOnce(`${serve.url}/webhooks/shop`, d.body, signShop(d.body));
          restartedWhileFull[a.status] = (restartedWhileFull[a.status] ?? 0) + 1;
          expect(a.status).toBe(503);
          expect(a.retryAfter).not.toBeNull();
        }
        url = `${serve.url}/webhooks/shop`;

        // 4. Space freed: the refused deliveries, retried by their senders, and new ones are accepted.
        rmSync(filler);
        const after: Record<string, number> = {};
        for (const d of [...unavailable, delivery(16 * 1024), delivery(100)]) {
          const a = await send(d);
          after[a.status] = (after[a.status] ?? 0) + 1;
          expect(a.status).toBe(202);
        }
        // The drain, which also hit the full disk, catches up (bounded wait).
        const check = inspect(dbPath);
        const notDone = check.prepare(`SELECT count(*) AS n FROM events WHERE status <> 'done'`);
        for (let t = Date.now(); (notDone.get() as { n: number }).n > 0 && Date.now() - t < 20_000;) await sleep(100);
        const left = (notDone.get() as { n: number }).n;
        const stored = (check.prepare(`SELECT count(*) AS n FROM events`).get() as { n: number }).n;
        const afterwards = integrityCheck(check);
        check.close();
        const exit = await serve.stop();
        serve = undefined;
        printReport('full disk', {
          fillerBytes: filled,
          answersWhileFull: answers,
          healthzWhileFull: health.status,
          restartedWhileFull,
          answersAfterFreeing: after,
          acknowledged: acked.size,
          stored,
          notDone: left,
          integrityWhileFull: whileFull,
          integrityAfter: afterwards,
          exitCode: exit,
        });
        expect(stored).toBe(acked.size);
        expect(afterwards).toBe('ok');
        expect(left).toBe(0);
        expect(exit).toBe(0);
      } finally {
        await serve?.stop('SIGKILL');
        unmount(mnt);
      }
    },
    TEST_TIMEOUT_MS,
  );
});
