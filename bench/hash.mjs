// SHA-256 in hex of a signed-delivery-sized body (1.5 KB), as ingest computes it for every
// delivery: the one-shot crypto.hash against createHash().update().digest(), in the same run.
//
//   node bench/hash.mjs [--calls 200000]
//
// Prints microseconds per call for each, after a warm-up of a tenth of the calls.
import { createHash, hash, randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';

const { values: args } = parseArgs({ options: { calls: { type: 'string', default: '200000' } } });
const CALLS = Number(args.calls);
if (!(CALLS > 0)) throw new Error('--calls must be a positive number');
const body = randomBytes(1536);
const ways = [
  ['crypto.hash', () => hash('sha256', body, 'hex')],
  ['createHash', () => createHash('sha256').update(body).digest('hex')],
];
const us = {};
for (const [name, f] of ways) {
  for (let i = 0; i < CALLS / 10; i++) f();
  const start = process.hrtime.bigint();
  for (let i = 0; i < CALLS; i++) f();
  us[name] = Number(process.hrtime.bigint() - start) / CALLS / 1000;
  console.log(`${name.padEnd(12)} ${us[name].toFixed(2)} us a call`);
}
console.log(`crypto.hash / createHash: ${(us['crypto.hash'] / us.createHash).toFixed(2)}`);
