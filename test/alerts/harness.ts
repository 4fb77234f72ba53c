import Database from 'better-sqlite3';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, afterEach } from 'vitest';
import type { Receiver } from '../../src/server.js';
import { tempDir } from '../helpers.js';
import { createTestDatabase, postgresAvailable } from '../postgres-helpers.js';

/** The sender every alerts test delivers as: no signature, id and type from the body. */
export const shop = { provider: 'none', deliveryId: '{body.id}', eventType: '{body.type}' };

/** A route that fails until `flag` exists. */
export const flaky = (name: string, flag: string) => ({
  name,
  source: 'shop',
  key: '{body.id}',
  effect: { exec: ['/bin/sh', '-c', `test -f ${flag}`], timeoutSeconds: 5 },
});

/** What one test started; stopped after it. */
export interface Started {
  receiver?: Receiver;
  db?: OpenDatabase;
  catcher?: Catcher;
}

/**
 * A test file's temp directory and its clean-up: `started` is stopped after each test (the
 * receiver first, then its catcher and database), the directory removed after the file;
 * `freshDir()` is a new directory in it for one test.
 */
export function alertsFile(prefix: string): { started: Started[]; freshDir: () => string } {
  const tmp = tempDir(prefix);
  afterAll(tmp.cleanup);
  const started: Started[] = [];
  afterEach(async () => {
    for (const r of started.splice(0)) {
      await r.receiver?.stop(1000).catch(() => {});
      await r.catcher?.close();
      await r.db?.close();
    }
  });
  let n = 0;
  const freshDir = () => {
    const dir = join(tmp.dir, `t${++n}`);
    mkdirSync(dir);
    return dir;
  };
  return { started, freshDir };
}

/** One request an alert destination got. */
export interface Caught {
  headers: IncomingMessage['headers'];
  body: string;
  json: Record<string, unknown> | undefined;
}

/**
 * A real HTTP server on port 0 standing in for a chat's webhook: it records every request
 * and answers what `answer` says (a status, later when it is a promise, or `hang` to never answer).
 */
export class Catcher {
  readonly caught: Caught[] = [];
  answer: (c: Caught, n: number) => number | 'hang' | Promise<number> = () => 200;
  readonly #server: Server;
  readonly #hanging = new Set<ServerResponse>();
  url = '';

  constructor() {
    this.#server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (d: Buffer) => chunks.push(d));
      req.on('end', () => {
        const body = Buffer.concat(chunks).toString();
        let json: Record<string, unknown> | undefined;
        try {
          json = JSON.parse(body) as Record<string, unknown>;
        } catch {
          json = undefined;
        }
        const c = { headers: req.headers, body, json };
        this.caught.push(c);
        const a = this.answer(c, this.caught.length);
        if (a === 'hang') this.#hanging.add(res);
        else if (typeof a === 'number') res.writeHead(a).end('ok');
        else void a.then((status) => res.writeHead(status).end('ok'));
      });
    });
  }

  async start(): Promise<this> {
    await new Promise<void>((r) => this.#server.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}/hook`;
    return this;
  }

  /** The json-format alerts caught, as `kind status key-ish` lines for comparing. */
  alerts(): Record<string, unknown>[] {
    return this.caught.map((c) => c.json ?? {});
  }

  async close(): Promise<void> {
    for (const r of this.#hanging) r.destroy();
    this.#server.closeAllConnections();
    await new Promise<void>((r) => this.#server.close(() => r()));
  }
}

/** A real exec destination: each alert's stdin and RECEIVER_ALERT_* variables in files of `dir`. */
export function execDestination(dir: string): { argv: string[]; runs: () => { text: string; env: Record<string, string> }[] } {
  const script = join(dir, 'alert.sh');
  writeFileSync(script, `#!/bin/sh\nf="${dir}/run-$(date +%s%N)-$$"\nenv > "$f.env"\ncat > "$f.txt"\n`, { mode: 0o755 });
  return {
    argv: [script],
    runs: () =>
      readdirSync(dir)
        .filter((n) => n.startsWith('run-') && n.endsWith('.txt'))
        .sort()
        .map((n) => ({
          text: readFileSync(join(dir, n), 'utf8'),
          env: Object.fromEntries(
            readFileSync(join(dir, n.replace(/\.txt$/, '.env')), 'utf8')
              .split('\n')
              .filter((l) => l.includes('='))
              .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
          ),
        })),
  };
}

/** A database for a test: a SQLite file in `dir`, or a fresh PostgreSQL database; `sql` moves time. */
export interface Backend {
  name: 'sqlite' | 'postgres';
  database(dir: string): Promise<string>;
}

export interface OpenDatabase {
  url: string;
  sql(text: string, params?: unknown[]): Promise<Record<string, unknown>[]>;
  close(): Promise<void>;
}

export async function openDatabase(backend: 'sqlite' | 'postgres', dir: string): Promise<OpenDatabase> {
  if (backend === 'postgres') {
    const db = await createTestDatabase();
    // The tests write `?` placeholders, as SQLite takes them.
    const numbered = (text: string) => {
      let n = 0;
      return text.replace(/\?/g, () => `$${++n}`);
    };
    return { url: db.url, sql: (text, params) => db.query(numbered(text), params), close: () => db.drop() };
  }
  const file = join(dir, `receiver-${Math.random().toString(36).slice(2)}.db`);
  let handle: Database.Database | undefined;
  return {
    url: file,
    sql: async (text, params = []) => {
      handle ??= new Database(file, { timeout: 5000 });
      const s = handle.prepare(text);
      return s.reader ? (s.all(...params) as Record<string, unknown>[]) : (s.run(...params), []);
    },
    close: async () => {
      handle?.close();
    },
  };
}

/** The backends to run on: SQLite always, PostgreSQL when it answers. */
export async function backends(): Promise<('sqlite' | 'postgres')[]> {
  return (await postgresAvailable()) ? ['sqlite', 'postgres'] : ['sqlite'];
}

/** Polls until `check` returns true (or a value), failing after `ms`. */
export async function until<T>(check: () => Promise<T | undefined | false> | T | undefined | false, what: string, ms = 15_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}
