/**
 * Runs hostile requests (the corpus, then generated cases) against a live server, with a
 * valid signed delivery interleaved every few cases, and checks what the contract promises:
 * no 5xx, no hang, no acceptance without a valid signature, valid deliveries still 202,
 * and no stored row that was not validly signed.
 */
import fc from 'fast-check';
import { createHash, randomUUID } from 'node:crypto';
import { caseArbitrary, corpus, type FuzzCase, type Signer } from './fuzz-cases.js';
import { inspect, integrityCheck, percentile, postOnce, rawRequest, round1, signShop } from './harness.js';

export interface FuzzTarget {
  url: string;
  port: number;
  dbPath: string;
  /** The server process is still running (in-process: always true unless the worker died). */
  alive: () => boolean;
}

export interface FuzzOptions {
  generated: number;
  seed: number;
  sign: Signer;
  maxBodyBytes: number;
  concurrency: number;
  /** One valid signed delivery after every this many cases (per lane). */
  validEvery: number;
  deadline: number;
}

export interface FuzzReport {
  cases: number;
  corpusCases: number;
  generatedCases: number;
  statuses: Record<string, number>;
  noAnswer: number;
  validSent: number;
  validAccepted: number;
  validP50Ms: number;
  validP99Ms: number;
  signedCases: number;
  stored: number;
  integrity: string;
  alive: boolean;
  tookMs: number;
  violations: string[];
}

const CHUNK = 500;

export async function runFuzz(target: FuzzTarget, o: FuzzOptions): Promise<FuzzReport> {
  const started = Date.now();
  const violations: string[] = [];
  const statuses = new Map<string, number>();
  const signed = new Set<string>();
  const validLatencies: number[] = [];
  let cases = 0;
  let noAnswer = 0;
  let validSent = 0;
  let validAccepted = 0;
  let signedCases = 0;
  const violation = (v: string) => {
    if (violations.length < 50) violations.push(v);
  };

  const valid = async () => {
    const id = `valid-${randomUUID()}`;
    const body = JSON.stringify({ id, type: 'order.paid', n: validSent });
    validSent += 1;
    signed.add(`shop|${id}`);
    try {
      const a = await postOnce(`${target.url}/webhooks/shop`, body, signShop(body), 10_000);
      validLatencies.push(a.ms);
      if (a.status === 202 && a.text.includes('"accepted"')) validAccepted += 1;
      else violation(`a valid delivery got ${a.status}: ${a.text.slice(0, 120)}`);
    } catch (e) {
      violation(`a valid delivery failed: ${(e as Error).message}`);
    }
  };

  const one = async (c: FuzzCase) => {
    if (c.signedFor !== undefined) {
      signedCases += 1;
      signed.add(`${c.signedFor.source}|sha:${c.signedFor.bodySha256}`);
    }
    const a = await rawRequest(target.port, c.bytes, {
      endAfterWrite: c.endAfterWrite,
      resetAfterWrite: c.resetAfterWrite === true,
      timeoutMs: 10_000,
      headOnly: c.method === 'HEAD',
    });
    cases += 1;
    const key = a.status === undefined ? (a.timedOut ? 'hang' : 'closed') : String(a.status);
    statuses.set(key, (statuses.get(key) ?? 0) + 1);
    if (a.status === undefined) noAnswer += 1;
    if (a.timedOut) violation(`${c.name}: no answer and no close within 10 s`);
    if (a.status !== undefined && a.status >= 500) violation(`${c.name}: ${a.status} ${a.head.slice(0, 200)}`);
    // The ingest answer, not just the word (GET /metrics has outcome="accepted" labels).
    if (a.status !== undefined && a.status < 300 && c.signedFor === undefined && a.head.includes('{"status":"accepted"'))
      violation(`${c.name}: accepted without a valid signature`);
    if (c.allowed !== undefined && a.status !== undefined && !c.allowed.includes(a.status))
      violation(`${c.name}: ${a.status}, expected one of ${c.allowed.join(', ')}: ${a.head.slice(0, 200)}`);
  };

  const runAll = async (list: readonly FuzzCase[]) => {
    let next = 0;
    const lane = async () => {
      let sinceValid = 0;
      while (next < list.length && Date.now() < o.deadline) {
        await one(list[next++]!);
        if (++sinceValid >= o.validEvery) {
          sinceValid = 0;
          await valid();
        }
      }
    };
    await Promise.all(Array.from({ length: o.concurrency }, lane));
  };

  const nasty = corpus(o.sign, o.maxBodyBytes);
  await runAll(nasty);
  const corpusCases = cases;
  const arb = caseArbitrary(o.sign, o.maxBodyBytes);
  // Generated in chunks: 100,000 cases with bodies up to twice the limit do not fit in memory at once.
  for (let done = 0; done < o.generated && Date.now() < o.deadline; done += CHUNK) {
    await runAll(fc.sample(arb, { numRuns: Math.min(CHUNK, o.generated - done), seed: o.seed + done }));
  }
  if (cases < nasty.length + o.generated) violation(`only ${cases} of ${nasty.length + o.generated} cases ran before the deadline`);
  // After all that, the server still takes a valid delivery.
  await valid();
  const alive = target.alive();
  if (!alive) violation('the server process died');

  // Every stored row carries a valid signature: it is one of the deliveries signed above.
  const db = inspect(target.dbPath);
  // The raw body, hashed here: body_sha256 is the provider's content hash (Stripe leaves out pending_webhooks).
  const rows = (
    db.prepare(`SELECT source, delivery_id AS deliveryId, body FROM events`).all() as { source: string; deliveryId: string; body: Buffer | null }[]
  ).map((r) => ({
    ...r,
    sha: createHash('sha256')
      .update(r.body ?? Buffer.alloc(0))
      .digest('hex'),
  }));
  const integrity = integrityCheck(db);
  db.close();
  for (const r of rows) {
    if (!signed.has(`${r.source}|${r.deliveryId}`) && !signed.has(`${r.source}|sha:${r.sha}`))
      violation(`stored without a valid signature: ${r.source}/${r.deliveryId.slice(0, 60)}`);
  }
  if (integrity !== 'ok') violation(`integrity_check: ${integrity}`);

  return {
    cases,
    corpusCases,
    generatedCases: cases - corpusCases,
    statuses: Object.fromEntries([...statuses].sort()),
    noAnswer,
    validSent,
    validAccepted,
    validP50Ms: round1(percentile(validLatencies, 50)),
    validP99Ms: round1(percentile(validLatencies, 99)),
    signedCases,
    stored: rows.length,
    integrity,
    alive,
    tookMs: Date.now() - started,
    violations,
  };
}
