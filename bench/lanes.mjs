// A licence while a deploy runs: how long after its receipt a paying customer's licence is
// issued while a slow deploy of the same shop is running, with each route in its own lane
// (the default) and, as the baseline in the same run, with both routes in one lane (how
// every effect ran before lanes: one after another).
//
//   npm run build && node bench/lanes.mjs [--deploy-seconds 5] [--orders 20]
//
// `receiver serve` on SQLite with two exec routes: `deploy` (a push; sleeps --deploy-seconds)
// and `licence` (an order; appends its key and the time to a file). One push first, then
// --orders orders, one every 200 ms while the deploy runs. Printed per configuration: the
// time from each order's 202 to its licence line, p50, p99 and max, and the ratio.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { startLogged, stop } from './proc.mjs';

const { values: args } = parseArgs({
  options: { 'deploy-seconds': { type: 'string', default: '5' }, orders: { type: 'string', default: '20' } },
});
const DEPLOY_SECONDS = Number(args['deploy-seconds']);
const ORDERS = Number(args.orders);
if (!(DEPLOY_SECONDS > 0 && DEPLOY_SECONDS <= 60) || !(ORDERS > 0 && ORDERS <= 200)) throw new Error('--deploy-seconds 1..60 and --orders 1..200');
const ROOT = new URL('..', import.meta.url).pathname;
const dir = mkdtempSync(join(tmpdir(), 'receiver-bench-lanes-'));
process.on('exit', () => rmSync(dir, { recursive: true, force: true }));

function config(name, lane) {
  const file = join(dir, `${name}.json`);
  const licences = join(dir, `${name}-licences.txt`);
  writeFileSync(licences, '');
  const shared = lane === undefined ? {} : { lane };
  writeFileSync(
    file,
    JSON.stringify({
      database: join(dir, `${name}.db`),
      port: 0,
      log: { level: 'info' },
      sources: { shop: { provider: 'none', deliveryId: '{body.id}', eventType: '{body.type}' } },
      routes: [
        {
          name: 'deploy',
          source: 'shop',
          events: ['push'],
          key: '{body.id}',
          ...shared,
          effect: { exec: ['/bin/sleep', String(DEPLOY_SECONDS)], timeoutSeconds: 120 },
        },
        {
          name: 'licence',
          source: 'shop',
          events: ['order.paid'],
          key: '{body.id}',
          ...shared,
          effect: { exec: ['/bin/sh', '-c', 'echo "$RECEIVER_KEY $(date +%s%3N)" >> "$1"', 'sh', licences] },
        },
      ],
      shutdownGraceSeconds: 1,
    }),
  );
  return { file, licences };
}

async function post(port, body) {
  const r = await globalThis.fetch(`http://127.0.0.1:${port}/webhooks/shop`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  await r.arrayBuffer();
  if (r.status !== 202) throw new Error(`answered ${r.status}`);
}

function percentile(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}

async function measure(name, lane) {
  const { file, licences } = config(name, lane);
  const { child, port } = await startLogged(process.execPath, [join(ROOT, 'bin/receiver.js'), 'serve', '-c', file], { cwd: dir, logDir: dir });
  try {
    await post(port, { id: 'push-1', type: 'push' });
    await sleep(300);
    const sent = new Map();
    for (let i = 0; i < ORDERS; i++) {
      const id = `ord_${i}`;
      await post(port, { id, type: 'order.paid' });
      sent.set(id, Date.now());
      await sleep(200);
    }
    const deadline = Date.now() + (DEPLOY_SECONDS + 30) * 1000;
    let done = new Map();
    while (done.size < ORDERS) {
      if (Date.now() > deadline) throw new Error(`${name}: ${done.size} of ${ORDERS} licences after the deadline`);
      await sleep(50);
      done = new Map(
        readFileSync(licences, 'utf8')
          .split('\n')
          .filter((l) => l !== '')
          .map((l) => l.split(' '))
          .map(([key, at]) => [key.replace(/^licence:/, ''), Number(at)]),
      );
    }
    const ms = [...sent].map(([id, at]) => done.get(id) - at).sort((a, b) => a - b);
    return { name, p50: percentile(ms, 50), p99: percentile(ms, 99), max: ms.at(-1) };
  } finally {
    await stop(child);
  }
}

console.log(`a licence while a ${DEPLOY_SECONDS} s deploy runs: ${ORDERS} orders, one every 200 ms (node ${process.version})`);
const rows = [await measure('own lanes (default)', undefined), await measure('one lane (baseline)', 'shop')];
console.log(`${'routes'.padEnd(22)}${'p50 ms'.padStart(9)}${'p99 ms'.padStart(9)}${'max ms'.padStart(9)}`);
for (const r of rows) console.log(`${r.name.padEnd(22)}${String(r.p50).padStart(9)}${String(r.p99).padStart(9)}${String(r.max).padStart(9)}`);
console.log(`ratio p99, own lanes / one lane: ${(rows[0].p99 / rows[1].p99).toFixed(3)}`);
