/**
 * Shared pieces of the reliability harness (see ./README.md): sizes for the short (CI) and
 * long runs, signed deliveries, a retrying sender, a raw-socket client, a seeded random,
 * percentiles and a read-only view of the database. Nothing here mocks the receiver: every
 * scenario drives a real HTTP server and a real SQLite file.
 */
import Database from 'better-sqlite3';
import { createHmac } from 'node:crypto';
import { connect } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { onTestFailed } from 'vitest';
import { startServe, type ServeProcess } from '../helpers.js';

/** `RECEIVER_LONG=1` selects the long run; single sizes can be overridden by environment. */
export const LONG = process.env.RECEIVER_LONG === '1';

function envInt(name: string, short: number, long: number): number {
  const v = process.env[name];
  if (v === undefined || v === '') return LONG ? long : short;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new Error(`${name} must be a whole number, got ${v}`);
  return n;
}

export const SIZES = {
  kills: envInt('RECEIVER_RELIABILITY_KILLS', 4, 50),
  deliveries: envInt('RECEIVER_RELIABILITY_DELIVERIES', 600, 20_000),
  fuzz: envInt('RECEIVER_RELIABILITY_FUZZ', 1000, 100_000),
  /** Deliveries sent by the slow-client and purge/replay scenarios. */
  load: envInt('RECEIVER_RELIABILITY_LOAD', 400, 10_000),
  seed: seedFrom(process.env),
};

/**
 * The run's random seed: RECEIVER_RELIABILITY_SEED when set (to replay a run), else one
 * taken from the clock. Every random choice of the harness (which delivery is re-sent,
 * when a kill lands, the generated fuzz cases) derives from it.
 */
export function seedFrom(env: NodeJS.ProcessEnv, now: number = Date.now()): number {
  const v = env.RECEIVER_RELIABILITY_SEED;
  if (v === undefined || v === '') return now % 2_147_483_647;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0 || n >= 2 ** 32) throw new Error(`RECEIVER_RELIABILITY_SEED must be a whole number from 0 to 4294967295, got ${v}`);
  return n;
}

/** Call first in a test that uses SIZES.seed: when it fails, the line to replay it is printed. */
export function printSeedOnFailure(file: string): void {
  onTestFailed(() => {
    console.error(
      `\nreliability run failed with seed ${SIZES.seed}; replay it with:\n  RECEIVER_RELIABILITY_SEED=${SIZES.seed}${LONG ? ' RECEIVER_LONG=1' : ''} npx vitest run ${file}\n`,
    );
  });
}

/** Per-test time bound: every loop in the harness also stops at its own deadline. */
export const TEST_TIMEOUT_MS = LONG ? 3 * 60 * 60_000 : 120_000;

/** A small seeded PRNG (mulberry32): a failing run is repeated with RECEIVER_RELIABILITY_SEED. */
export function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export const SECRET = 'reliability-secret-7d1c0e';
export const SECRET_ENV = { RELIABILITY_SECRET: SECRET };

/** The generic `hmac-sha256` source every scenario sends to; the delivery id lives in the body. */
export const shopSource = {
  provider: 'hmac-sha256',
  header: 'X-Signature',
  encoding: 'hex',
  secret: 'env:RELIABILITY_SECRET',
  deliveryId: '{body.id}',
  eventType: '{body.type}',
};

/** Signs like the sender would, independently of the receiver's own code. */
export function signShop(body: Buffer | string): Record<string, string> {
  return { 'content-type': 'application/json', 'x-signature': createHmac('sha256', SECRET).update(body).digest('hex') };
}

export interface Answer {
  status: number;
  text: string;
  retryAfter: string | null;
  ms: number;
}

/** One POST; throws on a network error (refused, reset: the server is down or was killed). */
export async function postOnce(url: string, body: Buffer | string, headers: Record<string, string>, timeoutMs = 15_000): Promise<Answer> {
  const t = performance.now();
  const res = await fetch(url, {
    method: 'POST',
    headers,
    body: typeof body === 'string' ? body : new Uint8Array(body),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await res.text();
  return { status: res.status, text, retryAfter: res.headers.get('retry-after'), ms: performance.now() - t };
}

export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? 0;
}

export const round1 = (n: number) => Math.round(n * 10) / 10;

/**
 * The harness's own connection to the database file, beside `serve`: to look (never holding
 * a read transaction open), and for the SQL a scenario runs on purpose (aging rows in time,
 * holding the write lock, a table for a module effect).
 */
export function inspect(path: string): Database.Database {
  return new Database(path, { fileMustExist: true, timeout: 5000 });
}

export function integrityCheck(db: Database.Database): string {
  return (db.pragma('integrity_check') as { integrity_check: string }[]).map((r) => r.integrity_check).join('; ');
}

/**
 * A `receiver serve` child that can be killed and restarted; senders wait for the next one
 * while it is down. `current()` resolves to the running process.
 */
export class RestartableServe {
  #serve: ServeProcess | undefined;
  #waiters: { resolve: (s: ServeProcess) => void; reject: (e: unknown) => void }[] = [];
  /** A start that failed: every sender waiting for a server fails with it, at once. */
  #failed: unknown;
  starts = 0;
  /** stderr of every process so far (the crash loop inspects it on failure). */
  readonly logs: string[] = [];

  constructor(
    readonly configFile: string,
    readonly env: NodeJS.ProcessEnv,
  ) {}

  async start(): Promise<ServeProcess> {
    let s: ServeProcess;
    try {
      s = await startServe(this.configFile, { env: this.env });
    } catch (e) {
      this.#failed = e;
      for (const w of this.#waiters.splice(0)) w.reject(e);
      throw e;
    }
    this.starts += 1;
    this.#serve = s;
    // An exit nobody asked for (a crash, or a signal from outside the harness) fails the run
    // at once, with what the process said, instead of leaving senders retrying a dead port.
    s.child.once('exit', (code, signal) => {
      if (this.#serve !== s) return;
      this.#serve = undefined;
      const tail = s.output().stderr.split('\n').slice(-20).join('\n');
      this.#failed = new Error(`receiver serve (pid ${s.child.pid}) exited unexpectedly: code ${code}, signal ${signal}\n${tail}`);
      for (const w of this.#waiters.splice(0)) w.reject(this.#failed);
    });
    for (const w of this.#waiters.splice(0)) w.resolve(s);
    return s;
  }

  /** Set when a start failed or the process exited on its own. */
  get failure(): unknown {
    return this.#failed;
  }

  current(): Promise<ServeProcess> {
    if (this.#failed !== undefined) return Promise.reject(this.#failed);
    if (this.#serve !== undefined) return Promise.resolve(this.#serve);
    return new Promise((resolve, reject) => this.#waiters.push({ resolve, reject }));
  }

  /** kill -9: no shutdown code runs; returns once the process is gone. */
  async kill(): Promise<void> {
    const s = this.#serve;
    if (s === undefined) return;
    this.#serve = undefined;
    await s.stop('SIGKILL');
    this.logs.push(s.output().stderr);
  }

  /** SIGTERM; returns the exit code. */
  async stop(): Promise<number | null> {
    const s = this.#serve;
    if (s === undefined) return null;
    this.#serve = undefined;
    const code = await s.stop('SIGTERM');
    this.logs.push(s.output().stderr);
    return code;
  }

  alive(): boolean {
    const c = this.#serve?.child;
    return c !== undefined && c.exitCode === null && c.signalCode === null;
  }
}

/** For a scenario with one `serve`: senders fail at once if it is gone, instead of retrying a dead port. */
export function liveTarget(serve: ServeProcess): () => Promise<ServeProcess> {
  return () =>
    serve.child.exitCode === null && serve.child.signalCode === null
      ? Promise.resolve(serve)
      : Promise.reject(
          new Error(
            `receiver serve exited (code ${serve.child.exitCode}, signal ${serve.child.signalCode}):\n${serve.output().stderr.split('\n').slice(-20).join('\n')}`,
          ),
        );
}

export interface SendTally {
  /** POSTs made, retries included. */
  requests: number;
  /** Connection refused or reset (the server was down or killed mid-request). */
  networkErrors: number;
  /** Answers by status. */
  byStatus: Map<number, number>;
  /** Delivery id -> event id of the 2xx answer. */
  acked: Map<string, number>;
  /** Deliveries that got an answer the harness did not expect (never retried). */
  unexpected: { deliveryId: string; status: number; text: string }[];
  latenciesMs: number[];
}

export function newTally(): SendTally {
  return { requests: 0, networkErrors: 0, byStatus: new Map(), acked: new Map(), unexpected: [], latenciesMs: [] };
}

/**
 * Sends one delivery like a webhook sender: retried on a network error or a 503 until a 2xx
 * (bounded by `deadline`). Any other answer is recorded as unexpected and not retried.
 */
export async function deliverUntilAcked(
  target: () => Promise<{ url: string }>,
  path: string,
  d: { deliveryId: string; body: string },
  tally: SendTally,
  deadline: number,
  onAnswer?: (a: Answer) => void,
): Promise<boolean> {
  const headers = signShop(d.body);
  while (Date.now() < deadline) {
    const { url } = await target();
    let a: Answer;
    try {
      tally.requests += 1;
      a = await postOnce(`${url}${path}`, d.body, headers);
    } catch {
      tally.networkErrors += 1;
      await sleep(20);
      continue;
    }
    tally.byStatus.set(a.status, (tally.byStatus.get(a.status) ?? 0) + 1);
    tally.latenciesMs.push(a.ms);
    onAnswer?.(a);
    if (a.status >= 200 && a.status < 300) {
      tally.acked.set(d.deliveryId, (JSON.parse(a.text) as { id: number }).id);
      return true;
    }
    if (a.status === 503 && a.retryAfter !== null) {
      await sleep(50);
      continue;
    }
    tally.unexpected.push({ deliveryId: d.deliveryId, status: a.status, text: a.text.slice(0, 200) });
    return false;
  }
  return false;
}

/** Runs `worker` on `concurrency` lanes over `items`, stopping at `deadline`. */
export async function pool<T>(items: readonly T[], concurrency: number, deadline: number, worker: (item: T, index: number) => Promise<void>): Promise<void> {
  let next = 0;
  const lane = async () => {
    while (next < items.length && Date.now() < deadline) {
      const i = next++;
      await worker(items[i] as T, i);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, concurrency) }, lane));
}

export interface RawAnswer {
  /** The status of the first response, if one arrived. */
  status: number | undefined;
  /** Up to 4 KB of what came back. */
  head: string;
  /** The client gave up waiting (the server neither answered nor closed). */
  timedOut: boolean;
  ms: number;
}

/**
 * Writes raw bytes on a fresh TCP connection to 127.0.0.1 and reads the first response
 * (by Content-Length or chunked end), or until the server closes, or `timeoutMs`.
 * `endAfterWrite` half-closes the connection: a body shorter than its Content-Length is then truncated;
 * `resetAfterWrite` resets it instead.
 */
export function rawRequest(
  port: number,
  bytes: Buffer,
  options: { endAfterWrite?: boolean; resetAfterWrite?: boolean; timeoutMs?: number; headOnly?: boolean } = {},
): Promise<RawAnswer> {
  return new Promise((resolve) => {
    const started = performance.now();
    const socket = connect(port, '127.0.0.1');
    let buf = Buffer.alloc(0);
    let done = false;
    const finish = (timedOut: boolean) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      // The answer, past any interim 1xx (100 Continue).
      const head = buf
        .toString('latin1')
        .replace(/^(HTTP\/1\.[01] 1\d\d[^\r]*\r\n(?:[^\r]+\r\n)*\r\n)+/, '')
        .slice(0, 4096);
      const m = /^HTTP\/1\.[01] (\d{3})/.exec(head);
      resolve({ status: m === null ? undefined : Number(m[1]), head, timedOut, ms: performance.now() - started });
    };
    const timer = setTimeout(() => finish(true), options.timeoutMs ?? 5000);
    socket.on('error', () => finish(false));
    socket.on('close', () => finish(false));
    socket.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      if (responseComplete(buf, options.headOnly === true)) finish(false);
    });
    socket.on('connect', () => {
      socket.write(bytes, () => {
        if (options.endAfterWrite === true) socket.end();
        // A sender that vanishes mid-body: TCP RST, no answer possible.
        if (options.resetAfterWrite === true) setTimeout(() => socket.resetAndDestroy(), 5);
      });
    });
  });
}

function responseComplete(buf: Buffer, headOnly: boolean): boolean {
  const end = buf.indexOf('\r\n\r\n');
  if (end < 0) return false;
  const head = buf.subarray(0, end).toString('latin1');
  // 1xx (100 Continue) is not the answer: wait for the next one.
  if (/^HTTP\/1\.[01] 1\d\d/.test(head)) return responseComplete(buf.subarray(end + 4), headOnly);
  if (headOnly || /^HTTP\/1\.[01] (204|304)/.test(head)) return true;
  const len = /\r\ncontent-length: *(\d+)/i.exec(head);
  if (len !== null) return buf.length - (end + 4) >= Number(len[1]);
  if (/\r\ntransfer-encoding: *chunked/i.test(head)) return buf.subarray(end + 4).includes('0\r\n\r\n');
  return false;
}

/** A report table for the console: one `name: value` per line under a title. */
export function printReport(title: string, rows: object): void {
  const width = Math.max(...Object.keys(rows).map((k) => k.length));
  const lines = Object.entries(rows).map(([k, v]) => `  ${k.padEnd(width)}  ${typeof v === 'object' && v !== null ? JSON.stringify(v) : String(v)}`);
  console.log(`\n${title}\n${lines.join('\n')}\n`);
}
