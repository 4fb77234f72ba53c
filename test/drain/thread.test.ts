import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { post, startServe, tempDir, waitFor, writeConfig, type ServeProcess } from '../helpers.js';
import { WORKER_RESOURCE_LIMITS } from '../../src/threads.js';
import { inspect, lines } from './helpers.js';

const shop = { provider: 'none', deliveryId: '{body.id}', eventType: '{body.type}' };

/** serve runs its drain in a thread of its own; a new delivery wakes it without polling. */
describe("serve's drain thread", () => {
  let tmp: ReturnType<typeof tempDir>;
  let serve: ServeProcess | undefined;
  beforeEach(() => {
    tmp = tempDir('receiver-drain-thread-');
  });
  afterEach(async () => {
    await serve?.stop('SIGKILL');
    serve = undefined;
    tmp.cleanup();
  });

  it('wakes for each new delivery at once, though it would poll only once a minute, and reports outcomes to /metrics', async () => {
    const runs = join(tmp.dir, 'runs.txt');
    const file = writeConfig(tmp.dir, {
      sources: { shop },
      drain: { pollMs: 60_000 },
      routes: [{ name: 'licence', source: 'shop', key: '{body.order}', effect: { exec: ['/bin/sh', '-c', 'echo "$RECEIVER_KEY" >> "$1"', 'sh', runs] } }],
    });
    serve = await startServe(file);
    const db = inspect(join(tmp.dir, 'receiver.db'));
    try {
      // One at a time, each after the drain has gone back to sleep: every one needs a wake.
      for (let i = 1; i <= 8; i++) {
        const started = Date.now();
        expect((await post(`${serve.url}/webhooks/shop`, JSON.stringify({ id: `e${i}`, type: 'order.paid', order: `o${i}` }))).status).toBe(202);
        await waitFor(() => (db.event(i).status === 'done' ? true : undefined), `event ${i} to be done`, 10_000);
        expect(Date.now() - started).toBeLessThan(5000);
        await new Promise((r) => setTimeout(r, 20 + i * 5));
      }
      expect(lines(runs)).toEqual(['o1', 'o2', 'o3', 'o4', 'o5', 'o6', 'o7', 'o8']);
      // Outcomes reach the main thread's counters (in batches, within about 100 ms).
      let metrics = '';
      for (const until = Date.now() + 5000; Date.now() < until; await new Promise((r) => setTimeout(r, 50))) {
        metrics = await (await fetch(`${serve.url}/metrics`)).text();
        if (/receiver_events_settled_total\{status="done"\} 8/.test(metrics)) break;
      }
      expect(metrics).toMatch(/receiver_events_settled_total\{status="done"\} 8/);
      expect(metrics).toMatch(/receiver_effect_attempts_total\{[^}]*outcome="ok"[^}]*\} 8/);
    } finally {
      db.close();
    }
  });

  it("runs the ingest and drain threads with V8's young generation capped (WORKER_RESOURCE_LIMITS)", async () => {
    // Preloaded into every thread of serve: the ingest thread (its workerData names the
    // busy timeout) and the drain thread (its shared signals) write down their limits.
    const preload = join(tmp.dir, 'limits.cjs');
    writeFileSync(
      preload,
      `const { isMainThread, resourceLimits, workerData } = require('node:worker_threads');
const name = isMainThread || workerData === null || typeof workerData !== 'object' ? undefined : 'signals' in workerData ? 'drain' : 'busyTimeoutMs' in workerData ? 'ingest' : undefined;
if (name !== undefined) require('node:fs').writeFileSync(${JSON.stringify(tmp.dir)} + '/' + name + '.json', JSON.stringify(resourceLimits));
`,
    );
    const file = writeConfig(tmp.dir, {
      sources: { shop },
      routes: [{ name: 'licence', source: 'shop', key: '{body.order}', effect: { exec: ['/bin/true'] } }],
    });
    serve = await startServe(file, { env: { NODE_OPTIONS: `--require ${preload}` } });
    for (const thread of ['ingest', 'drain']) {
      const limits = JSON.parse(readFileSync(join(tmp.dir, `${thread}.json`), 'utf8')) as { maxYoungGenerationSizeMb: number };
      // V8's default is 48 MB.
      expect(limits.maxYoungGenerationSizeMb, thread).toBe(WORKER_RESOURCE_LIMITS.maxYoungGenerationSizeMb);
    }
  });
});
