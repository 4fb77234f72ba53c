import { connect } from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { startServe, tempDir, writeConfig } from '../helpers.js';
import { deliverUntilAcked, liveTarget, newTally, percentile, pool, printReport, round1, SECRET_ENV, shopSource, SIZES, TEST_TIMEOUT_MS } from './harness.js';

/**
 * Slow clients: connections that trickle their headers or their body, a byte every 100 ms,
 * must not delay other senders, and are cut off by the server's request timeout.
 */

interface Trickle {
  closedAfterMs: number;
  bytesSent: number;
  answer: string;
}

/** One raw connection that trickles its headers (`headers`) or its 1000-byte body, a byte every 100 ms. */
function trickle(port: number, what: 'headers' | 'body', maxMs: number): Promise<Trickle> {
  return new Promise((resolve) => {
    const started = Date.now();
    const socket = connect(port, '127.0.0.1');
    const head = 'POST /webhooks/shop HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n';
    const rest = what === 'headers' ? `X-Slow: ${'s'.repeat(2000)}\r\n\r\n` : '\r\n' + 'b'.repeat(1000);
    let i = 0;
    let bytesSent = 0;
    let answer = '';
    socket.write(what === 'headers' ? 'POST /webhooks/shop HTTP/1.1\r\n' : head);
    const timer = setInterval(() => {
      if (!socket.writable || i >= rest.length) return;
      socket.write(rest[i++]!);
      bytesSent += 1;
    }, 100);
    // Bounded: a server that never cuts it off fails the test, not the run.
    const guard = setTimeout(() => socket.destroy(), maxMs);
    socket.on('data', (d: Buffer) => (answer += d.toString('latin1')));
    socket.on('error', () => undefined);
    socket.on('close', () => {
      clearInterval(timer);
      clearTimeout(guard);
      resolve({ closedAfterMs: Date.now() - started, bytesSent, answer });
    });
  });
}

describe('reliability: slow clients', () => {
  const tmp = tempDir('receiver-slow-');
  afterAll(tmp.cleanup);

  it(
    "tricklers do not raise other senders' p99 and are cut off at requestTimeoutSeconds",
    async () => {
      const requestTimeoutSeconds = 2;
      const file = writeConfig(tmp.dir, { sources: { shop: shopSource }, requestTimeoutSeconds, drain: { enabled: false } });
      const serve = await startServe(file, { env: SECRET_ENV });
      const target = liveTarget(serve);
      const deadline = Date.now() + TEST_TIMEOUT_MS - 10_000;
      let n = 0;
      const next = () => {
        const id = `slow-${n++}`;
        return { deliveryId: id, body: JSON.stringify({ id, type: 'order.paid' }) };
      };
      try {
        // Baseline: the same senders with no trickler.
        const baseline = newTally();
        await pool(
          Array.from({ length: 200 }, next),
          8,
          deadline,
          async (d) => void (await deliverUntilAcked(target, '/webhooks/shop', d, baseline, deadline)),
        );

        // 100 tricklers (50 on headers, 50 on the body) while 8 senders keep delivering until every trickler is gone.
        const tricklers = Array.from({ length: 100 }, (_, i) => trickle(serve.port, i % 2 === 0 ? 'headers' : 'body', 30_000));
        let open = tricklers.length;
        for (const t of tricklers) void t.then(() => (open -= 1));
        const during = newTally();
        await Promise.all(
          Array.from({ length: 8 }, async () => {
            for (let k = 0; open > 0 && k < SIZES.load && Date.now() < deadline; k++)
              await deliverUntilAcked(target, '/webhooks/shop', next(), during, deadline);
          }),
        );
        const results = await Promise.all(tricklers);
        const report = {
          baselineDeliveries: baseline.acked.size,
          baselineP50Ms: round1(percentile(baseline.latenciesMs, 50)),
          baselineP99Ms: round1(percentile(baseline.latenciesMs, 99)),
          deliveriesWhileTrickling: during.acked.size,
          whileTricklingP50Ms: round1(percentile(during.latenciesMs, 50)),
          whileTricklingP99Ms: round1(percentile(during.latenciesMs, 99)),
          whileTricklingMaxMs: round1(Math.max(...during.latenciesMs)),
          answers: Object.fromEntries(during.byStatus),
          tricklersCutOffAfterMs: { min: Math.min(...results.map((r) => r.closedAfterMs)), max: Math.max(...results.map((r) => r.closedAfterMs)) },
          tricklerBytesSentMax: Math.max(...results.map((r) => r.bytesSent)),
          tricklerAnswers: [...new Set(results.map((r) => r.answer.split('\r\n')[0] || '(closed)'))],
        };
        printReport(`slow clients (requestTimeoutSeconds ${requestTimeoutSeconds})`, report);
        expect(baseline.unexpected).toEqual([]);
        expect(during.unexpected).toEqual([]);
        expect([...during.byStatus.keys()]).toEqual([202]);
        expect(during.acked.size).toBeGreaterThan(50);
        // A sender stuck behind a trickler would wait for its cut-off (2 s): the p99 stays far below.
        expect(report.whileTricklingP99Ms).toBeLessThan(Math.max(500, 3 * report.baselineP99Ms));
        for (const r of results) {
          expect(r.closedAfterMs).toBeGreaterThanOrEqual(requestTimeoutSeconds * 1000 - 100);
          expect(r.closedAfterMs).toBeLessThan(requestTimeoutSeconds * 1000 + 3000);
          expect(r.bytesSent).toBeLessThan(1000);
          // The contract's answer: 408, then the connection closed.
          expect(r.answer).toMatch(/^HTTP\/1\.1 408 /);
        }
      } finally {
        await serve.stop();
      }
      expect(serve.child.exitCode).toBe(0);
    },
    TEST_TIMEOUT_MS,
  );
});
