/**
 * The module host: the process module effects run in (module-runner.ts starts it). The
 * drain's process never runs a module's code, so nothing a module does (throw in a timer,
 * reject at import, call process.exit, loop forever, emit 'error' without a listener) can
 * end it or block it, and nothing of serve's memory or environment is in reach. The host
 * imports each module once, runs one handler at a time as the drain asks, and forwards
 * `ctx.db` statements to the drain, which runs them in the effect's transaction. Anything
 * thrown outside a handler's promise ends the host: its state is unknown from then on, and
 * the drain starts a fresh one for the next module effect.
 */
import { Worker } from 'node:worker_threads';
import type { EffectDb } from '../store/drain-types.js';
import { loadHandler, type ModuleContext, type ModuleEvent } from './module.js';

/** The single executable's hidden mode: started with this argument (and an IPC channel), it is a module host. */
export const MODULE_HOST_ARG = 'receiver-module-host';

/** The event as it crosses to the host: the body as bytes (advanced serialization gives a Uint8Array). */
export type HostEvent = Omit<ModuleEvent, 'body'> & { body: Uint8Array };

export type ToModuleHost =
  /** Import the module (its top level runs); answered `done` or `failed`. */
  | { type: 'load'; path: string }
  /** Run its handler; answered `done` or `failed`, with `db` requests meanwhile. */
  | { type: 'run'; path: string; event: HostEvent; ctx: Omit<ModuleContext, 'event' | 'db'>; dialect: EffectDb['dialect'] }
  | { type: 'db-result'; call: number; rows?: unknown[]; changes?: number; error?: { message: string; code?: string | undefined } };

export type FromModuleHost =
  /** Started and listening: the drain's timers for a module start from here. */
  | { type: 'ready' }
  | { type: 'db'; call: number; sql: string; params: unknown[]; want: 'rows' | 'changes' }
  | { type: 'done' }
  | { type: 'failed'; error: string }
  /** Thrown or rejected outside a handler's promise: the host ends right after saying so. */
  | { type: 'crashed'; error: string };

/** The most of a module's error text that is kept (it goes to the attempt and the log). */
const ERROR_MAX = 1000;

/**
 * What a module threw, as text, whatever it threw: an Error whose `message` or `name` getter
 * throws, a Proxy, a value without toString. Never throws.
 */
export function describeThrown(e: unknown): string {
  let text: string;
  try {
    if (e instanceof Error) {
      const m: unknown = e.message;
      text = typeof m === 'string' ? m : String(m);
    } else if (typeof e === 'string') text = e;
    else text = String(e);
  } catch {
    try {
      text = `a thrown ${Object.prototype.toString.call(e)} that cannot be described (its message or toString throws)`;
    } catch {
      text = 'a thrown value that cannot be described';
    }
  }
  return text.length > ERROR_MAX ? `${text.slice(0, ERROR_MAX)}...` : text;
}

/**
 * Ends this process when its parent is gone, even while a module blocks the main thread
 * (a thread of its own looks every second): a host left behind by a killed serve never
 * loops on.
 */
const ORPHAN_WATCH = `
const { workerData } = require('node:worker_threads');
setInterval(() => { if (process.ppid !== workerData) process.kill(process.pid, 'SIGKILL'); }, 1000);
`;

/** Runs this process as the module host; it ends when the drain disconnects. */
export function runModuleHost(): void {
  const channel = process.send?.bind(process);
  if (channel === undefined) throw new Error('the module host is started by the receiver, with an IPC channel');
  // Bound now: a module cannot redirect the channel or the exit by replacing them later.
  const exit = process.exit.bind(process);
  const kill = process.kill.bind(process);
  const send = (m: FromModuleHost) => {
    try {
      channel(m);
    } catch {
      // The drain is gone or the message cannot be sent: the drain's timer ends the run.
    }
  };
  new Worker(ORPHAN_WATCH, { eval: true, workerData: process.ppid }).unref();

  let crashed = false;
  const crash = (what: string, e: unknown) => {
    if (crashed) return;
    crashed = true;
    channel({ type: 'crashed', error: `${what}: ${describeThrown(e)}` } satisfies FromModuleHost, undefined, {}, () => exit(70));
    // The drain kills the host when it reads the message; this is in case it cannot.
    setTimeout(() => kill(process.pid, 'SIGKILL'), 1000).unref();
  };
  process.on('uncaughtException', (e) => crash('the module threw outside its handler', e));
  process.on('unhandledRejection', (e) => crash('the module left a promise rejection unhandled', e));
  process.on('disconnect', () => exit(0));

  let calls = 0;
  const pending = new Map<number, { resolve: (r: { rows?: unknown[]; changes?: number }) => void; reject: (e: Error) => void }>();
  const statement = (sql: unknown, params: unknown, want: 'rows' | 'changes') =>
    new Promise<{ rows?: unknown[]; changes?: number }>((resolve, reject) => {
      if (typeof sql !== 'string') return reject(new TypeError('ctx.db: the SQL must be a string'));
      if (params !== undefined && !Array.isArray(params)) return reject(new TypeError('ctx.db: the parameters must be an array'));
      const call = ++calls;
      pending.set(call, { resolve, reject });
      try {
        channel({ type: 'db', call, sql, params: (params as unknown[] | undefined) ?? [], want } satisfies FromModuleHost);
      } catch (e) {
        pending.delete(call);
        reject(new Error(`ctx.db: cannot pass the parameters to the database: ${describeThrown(e)}`));
      }
    });

  const run = async (m: Extract<ToModuleHost, { type: 'load' | 'run' }>) => {
    try {
      const handler = await loadHandler(m.path);
      if (m.type === 'run') {
        const body = Buffer.from(m.event.body.buffer, m.event.body.byteOffset, m.event.body.byteLength);
        const event: ModuleEvent = { ...m.event, body };
        const db: EffectDb = {
          dialect: m.dialect,
          query: async <T>(sql: string, params?: readonly unknown[]) => (await statement(sql, params, 'rows')).rows as T[],
          run: async (sql: string, params?: readonly unknown[]) => ({ changes: (await statement(sql, params, 'changes')).changes ?? 0 }),
        };
        await handler(event, { ...m.ctx, event, db });
      }
      // One turn more: a rejection the run left unhandled is reported before its outcome.
      await new Promise((r) => setImmediate(r));
      if (!crashed) send({ type: 'done' });
    } catch (e) {
      if (!crashed) send({ type: 'failed', error: describeThrown(e) });
    }
  };

  process.on('message', (m: ToModuleHost) => {
    if (m.type === 'db-result') {
      const p = pending.get(m.call);
      pending.delete(m.call);
      if (p === undefined) return;
      if (m.error === undefined) p.resolve(m);
      else p.reject(Object.assign(new Error(m.error.message), m.error.code === undefined ? {} : { code: m.error.code }));
    } else if (m.type === 'load' || m.type === 'run') void run(m);
  });
  send({ type: 'ready' });
}
