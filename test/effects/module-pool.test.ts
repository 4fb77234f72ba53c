import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { ModulePool } from '../../src/effects/module-pool.js';
import type { ModuleRunner } from '../../src/effects/module-runner.js';

/** How the pool hands out runners (host processes start only when a runner loads or calls, which these tests never do). */
describe('ModulePool', () => {
  it('gives each caller a runner of its own, up to max at once; the next waits for one to come back', async () => {
    const pool = new ModulePool({}, 2);
    let running = 0;
    let most = 0;
    const seen = new Set<ModuleRunner>();
    const job = () =>
      pool.exclusive(undefined, 'm.mjs', async (runner) => {
        seen.add(runner);
        most = Math.max(most, ++running);
        await sleep(50);
        running -= 1;
      });
    await Promise.all([job(), job(), job(), job(), job()]);
    expect(most).toBe(2);
    expect(seen.size).toBe(2);
    expect(pool.size).toBe(2);
    pool.close();
  });

  it('hands back the same runner to callers one after another (no second host without a need)', async () => {
    const pool = new ModulePool({}, 8);
    const seen = new Set<ModuleRunner>();
    for (let i = 0; i < 5; i++) await pool.exclusive(undefined, 'm.mjs', async (runner) => void seen.add(runner));
    expect(seen.size).toBe(1);
    expect(pool.size).toBe(1);
    pool.close();
  });

  it('ends spare runners once idle long enough, keeping one', async () => {
    const pool = new ModulePool({}, 4, { spareIdleMs: 100 });
    const hold = () => pool.exclusive(undefined, 'm.mjs', () => sleep(30));
    await Promise.all([hold(), hold(), hold()]);
    expect(pool.size).toBe(3);
    await sleep(50);
    expect(pool.size).toBe(3);
    await sleep(200);
    expect(pool.size).toBe(1);
    pool.close();
  });

  it('a caller waiting for a runner is let go when the drain stops (signal aborted), and never gets one', async () => {
    const pool = new ModulePool({}, 1);
    let release!: () => void;
    const first = pool.exclusive(undefined, 'm.mjs', () => new Promise<void>((r) => (release = r)));
    const stop = new AbortController();
    let ran = false;
    const second = pool.exclusive(stop.signal, 'm.mjs', async () => void (ran = true));
    stop.abort();
    await expect(second).rejects.toThrow(/shutting down/);
    release();
    await first;
    expect(ran).toBe(false);
    pool.close();
  });
});
