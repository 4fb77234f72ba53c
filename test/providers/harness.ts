import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'vitest';
import { resolveConfig } from '../../src/config/load.js';
import { isReceiverError } from '../../src/errors.js';
import { makeConfig, post, REPO, startApp, tempDir, type RunningApp } from '../helpers.js';

/** Shared helpers for the provider tests: a real server on port 0 over a real SQLite file. */

/** Known-good signatures from the providers' own libraries, one case per sender. */
export const VECTORS_FILE = join(REPO, 'test/fixtures/provider-vectors.json');
export const VECTORS = JSON.parse(readFileSync(VECTORS_FILE, 'utf8')) as Record<string, Record<string, unknown>>;

export function vector(name: string): Record<string, unknown> {
  const v = VECTORS[name];
  if (v === undefined) throw new Error(`no vector named ${name}`);
  return v;
}

/** The exact bytes of a fixture file (never re-serialised). */
export function fixture(name: string): Buffer {
  return readFileSync(join(REPO, 'test/fixtures', name));
}

export interface Harness {
  app: RunningApp;
  /** Base URL of a source: http://127.0.0.1:<port>/webhooks/<source>. */
  url: (source: string) => string;
  /** The injected clock, in milliseconds; tests move it instead of sleeping. */
  clock: { now: number };
  rows: (source?: string) => number;
  event: (source: string) => { delivery_id: string; event_type: string; extra_ids: string | null; duplicates: number; body: Buffer } | undefined;
  send: (source: string, body: Buffer | string, headers: Record<string, string>, query?: string) => Promise<{ status: number; text: string; headers: Headers }>;
  close: () => Promise<void>;
}

/** Starts the real app with these sources and an injected clock. */
export async function startSources(sources: Record<string, Record<string, unknown>>, nowMs: number): Promise<Harness> {
  const tmp = tempDir('receiver-providers-');
  const config = makeConfig({ sources }, tmp.dir);
  const clock = { now: nowMs };
  const app = await startApp(config, { now: () => clock.now });
  const count = app.store.db.prepare('SELECT count(*) AS n FROM events');
  const countSource = app.store.db.prepare('SELECT count(*) AS n FROM events WHERE source = ?');
  const one = app.store.db.prepare('SELECT delivery_id, event_type, extra_ids, duplicates, body FROM events WHERE source = ? ORDER BY id LIMIT 1');
  return {
    app,
    clock,
    url: (source) => `${app.url}/webhooks/${source}`,
    rows: (source) => ((source === undefined ? count.get() : countSource.get(source)) as { n: number }).n,
    event: (source) => one.get(source) as ReturnType<Harness['event']>,
    send: (source, body, headers, query = '') => post(`${app.url}/webhooks/${source}${query}`, body, headers),
    close: async () => {
      await app.close();
      tmp.cleanup();
    },
  };
}

/** One byte changed: XOR 1, kept printable for header values (a header cannot carry control bytes). */
export function mutateByte(buf: Buffer, i: number, printable = false): Buffer {
  const out = Buffer.from(buf);
  const b = out[i] as number;
  let m = b ^ 0x01;
  if (printable && (m < 0x21 || m > 0x7e)) m = b ^ 0x02;
  if (printable && (m < 0x21 || m > 0x7e)) m = b === 0x41 ? 0x42 : 0x41;
  out[i] = m;
  return out;
}

export function mutateString(s: string, i: number): string {
  return mutateByte(Buffer.from(s, 'latin1'), i, true).toString('latin1');
}

/** Every position of a short value; for long ones, evenly spread samples including both ends. */
export function positions(length: number, max = 160): number[] {
  if (length <= max) return [...Array(length).keys()];
  const out = new Set<number>([0, length - 1]);
  for (let k = 0; k < max; k++) out.add(Math.floor((k * (length - 1)) / (max - 1)));
  return [...out].sort((a, b) => a - b);
}

export interface SignedCase {
  /** Source options without the secret, e.g. `{ provider: 'slack' }`. */
  options: Record<string, unknown>;
  secret: string;
  body: Buffer;
  headers: Record<string, string>;
  /** Request query string (`?a=b`), for senders that sign the URL. */
  query?: string;
  /** Headers whose every byte is signed (signature, timestamp, signed ids). */
  signedHeaders: string[];
  /** Body positions to mutate; default every position (sampled when long). */
  bodyPositions?: number[];
  /** Mutate the query string too (Twilio signs the URL). */
  mutateQuery?: boolean;
  expectStatus: number;
}

/**
 * The vector passes, and every one-byte mutation of body, secret and signed headers
 * (signature, timestamp) is refused with 401 and stores nothing. Ends with the
 * unmodified delivery accepted, so the refusals are not an artefact of a broken setup.
 */
export async function expectVectorAndMutations(c: SignedCase, nowMs: number): Promise<{ refused: number }> {
  const sources: Record<string, Record<string, unknown>> = { v: { ...c.options, secret: c.secret } };
  // A mutated secret that gives no usable key (a Standard Webhooks secret no longer
  // base64) is refused when the configuration loads: refused, before any request.
  const secretPositions = positions(c.secret.length).filter((i) => {
    const options = { ...c.options, secret: mutateString(c.secret, i) };
    if (refusedByConfig(options)) return false;
    sources[`s${i}`] = options;
    return true;
  });
  const refusedAtLoad = positions(c.secret.length).length - secretPositions.length;
  const h = await startSources(sources, nowMs);
  const tries: { what: string; source: string; body: Buffer; headers: Record<string, string>; query: string }[] = [];
  const q = c.query ?? '';
  for (const i of c.bodyPositions ?? positions(c.body.length))
    tries.push({ what: `body byte ${i}`, source: 'v', body: mutateByte(c.body, i), headers: c.headers, query: q });
  for (const name of c.signedHeaders) {
    const value = c.headers[name];
    if (value === undefined) throw new Error(`case has no header ${name}`);
    for (const i of positions(value.length))
      tries.push({ what: `header ${name} byte ${i}`, source: 'v', body: c.body, headers: { ...c.headers, [name]: mutateString(value, i) }, query: q });
  }
  if (c.mutateQuery === true && c.query !== undefined) {
    // Position 0 is the `?` itself; from 1 on, every byte of the signed query.
    for (const i of positions(q.length).filter((i) => i > 0))
      tries.push({ what: `query byte ${i}`, source: 'v', body: c.body, headers: c.headers, query: mutateString(q, i) });
  }
  for (const i of secretPositions) tries.push({ what: `secret byte ${i}`, source: `s${i}`, body: c.body, headers: c.headers, query: q });
  try {
    // A few requests in flight at a time: the refusals do not depend on order.
    const answers: { what: string; status: number; text: string }[] = [];
    for (let k = 0; k < tries.length; k += 8) {
      const batch = tries.slice(k, k + 8);
      answers.push(...(await Promise.all(batch.map(async (t) => ({ what: t.what, ...(await h.send(t.source, t.body, t.headers, t.query)) })))));
    }
    expect(answers.filter((a) => a.status !== 401).map((a) => `${a.what}: ${a.status} ${a.text}`)).toEqual([]);
    expect(h.rows()).toBe(0);
    const ok = await h.send('v', c.body, c.headers, q);
    expect(ok.status, ok.text).toBe(c.expectStatus);
    expect(h.rows()).toBe(1);
  } finally {
    await h.close();
  }
  return { refused: tries.length + refusedAtLoad };
}

/** True when loading a source with these options is a config error naming its secret. */
function refusedByConfig(options: Record<string, unknown>): boolean {
  try {
    resolveConfig({ sources: { m: options } }, 'mutation.json', {}, {});
    return false;
  } catch (e) {
    if (isReceiverError(e, 'config') && /sources\.m\.secret: /.test(e.message)) return true;
    throw e;
  }
}
