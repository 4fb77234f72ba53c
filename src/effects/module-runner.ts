import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { EffectDb } from '../store/drain-types.js';
import { describeThrown, type FromModuleHost, type ToModuleHost } from './module-host.js';
import { ModuleTimedOut, type ModuleContext, type ModuleEvent } from './module.js';
import { OutputTail } from './types.js';

/**
 * How the module host is started: arguments to this process's executable. From a checkout
 * or the npm package, node runs dist/effects/module-host-main.js (src/effects and
 * dist/effects are both two levels below the package root, as thread.ts finds the drain
 * worker). The single executable has no dist/: it runs itself in its hidden host mode
 * (useModuleHostArgs), and until it says so, starting a host fails saying why.
 */
let hostArgs: readonly string[] | undefined =
  typeof import.meta.url === 'string' ? [fileURLToPath(new URL('../../dist/effects/module-host-main.js', import.meta.url))] : undefined;

export function useModuleHostArgs(args: readonly string[]): void {
  hostArgs = args;
}

/**
 * Before a host is started again after `n` hosts in a row ended by themselves (crashed,
 * exited) without finishing a module effect: a module that ends its process at import
 * costs a process start per attempt, at most one a second.
 */
export function hostRestartDelayMs(n: number): number {
  return n < 2 ? 0 : Math.min(1000, 100 * 2 ** (n - 2));
}

export const SHUTDOWN = 'module aborted: the receiver is shutting down; its writes were rolled back';

/**
 * How long a new host may take to start (a process start; seconds on a busy machine). Not
 * part of a module's timeoutSeconds, which starts once the host is ready.
 */
const HOST_START_MS = 30_000;

/** The least time a module's import is given, whatever its timeoutSeconds (the bound check-config uses too). */
const IMPORT_MIN_MS = 10_000;

/** How long after the host's exit its last messages (why it crashed) are waited for. */
const LAST_WORDS_MS = 500;

interface Job {
  message(m: FromModuleHost): void;
  died(why: string): void;
}

interface Host {
  child: ChildProcess;
  job: Job | undefined;
  gone: boolean;
  /** Killed by the runner (a timeout, the receiver stopping): not counted as ending by itself. */
  killed: boolean;
  /** The modules it imported. */
  loaded: Set<string>;
  /** What the host said when it crashed (possibly between two module effects): why it ended. */
  crash?: string | undefined;
  output: OutputTail;
}

/**
 * The drain's side of one module host (module-host.ts): one host process at a time, one
 * module effect at a time in it (the pool gives a runner to one caller at a time, see
 * module-pool.ts). Each call is bounded by the effect's timeoutSeconds,
 * synchronous code included: past it the host is killed (SIGKILL), and so is it when the
 * receiver stops past its grace. A host that ends (killed, exited, crashed) fails the
 * module effect it was running with what happened, and the next module effect starts a new
 * one, after a pause that grows while hosts keep ending without finishing one.
 *
 * The host gets `env` as its whole environment (the minimal variables exec effects get):
 * none of serve's secrets. Its stdout and stderr are read and dropped, but for their last
 * bytes, quoted when the host ends unexpectedly.
 */
export class ModuleRunner {
  readonly #env: NodeJS.ProcessEnv;
  #host: Host | undefined;
  /** Hosts in a row that ended without finishing a module effect. */
  #ended = 0;

  constructor(env: NodeJS.ProcessEnv) {
    this.#env = env;
  }

  /** True when a host runs and has imported `path`: running it starts nothing and imports nothing. */
  ready(path: string): boolean {
    return this.#host !== undefined && !this.#host.gone && this.#host.loaded.has(path);
  }

  /** Imports the module in the host (its top level runs there), bounded by `timeoutMs` or 10 s, whichever is longer. */
  async load(path: string, timeoutMs: number, signal?: AbortSignal): Promise<void> {
    if (this.ready(path)) return;
    await this.#job({ type: 'load', path }, Math.max(timeoutMs, IMPORT_MIN_MS), signal, undefined);
    if (this.#host !== undefined) this.#host.loaded.add(path);
  }

  /**
   * Runs the handler in the host with `db` (the effect transaction's handle) behind its
   * `ctx.db`. Rejects with ModuleTimedOut past `timeoutMs`, with the handler's error as text
   * when it throws, or with what ended the host.
   */
  call(path: string, event: ModuleEvent, ctx: Omit<ModuleContext, 'event' | 'db'>, db: EffectDb, timeoutMs: number, signal?: AbortSignal): Promise<void> {
    const { json, body, ...rest } = event;
    // The body crosses as bytes; json too (absent when the body does not parse).
    const crossing = { ...rest, body: new Uint8Array(body.buffer, body.byteOffset, body.byteLength), json };
    return this.#job({ type: 'run', path, event: crossing, ctx, dialect: db.dialect }, timeoutMs, signal, db);
  }

  /** Kills the host, if one runs (the drain stops). */
  close(): void {
    if (this.#host !== undefined) this.#kill(this.#host);
  }

  async #job(msg: ToModuleHost, timeoutMs: number, signal: AbortSignal | undefined, db: EffectDb | undefined): Promise<void> {
    if (signal?.aborted === true) throw new Error(SHUTDOWN);
    const host = await this.#start(signal);
    // The host's messages go to the one job it runs: a second would take the first's replies.
    if (host.job !== undefined)
      throw new Error('the module host is already running a module effect (module effects run one at a time in a host: see ModulePool)');
    return new Promise<void>((resolve, reject) => {
      let over = false;
      const finish = (e?: Error) => {
        if (over) return;
        over = true;
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        host.job = undefined;
        if (e === undefined) resolve();
        else reject(e);
      };
      const timer = setTimeout(() => {
        this.#kill(host);
        finish(new ModuleTimedOut(`module timed out after ${timeoutMs / 1000}s; its writes were rolled back`));
      }, timeoutMs);
      const onAbort = () => {
        this.#kill(host);
        finish(new Error(SHUTDOWN));
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      host.job = {
        message: (m) => {
          if (m.type === 'done') {
            this.#ended = 0;
            finish();
          } else if (m.type === 'failed') {
            this.#ended = 0;
            finish(new Error(typeof m.error === 'string' ? m.error : 'the module failed'));
          } else if (m.type === 'crashed') {
            finish(new Error(host.crash));
          } else if (m.type === 'db') this.#statement(host, db, m);
        },
        died: (why) => finish(new Error(why)),
      };
      if (host.gone) return host.job.died('the module host ended before it could run the module');
      host.child.send(msg, (e) => {
        if (e !== null) {
          this.#kill(host);
          finish(new Error(`cannot pass the event to the module host: ${describeThrown(e)}`));
        }
      });
    });
  }

  /** A `ctx.db` statement from the running handler, run in the effect's transaction; its result goes back. */
  #statement(host: Host, db: EffectDb | undefined, m: Extract<FromModuleHost, { type: 'db' }>): void {
    const reply = (r: Omit<Extract<ToModuleHost, { type: 'db-result' }>, 'type' | 'call'>) => {
      if (!host.gone && host.child.connected) host.child.send({ type: 'db-result', call: m.call, ...r } satisfies ToModuleHost, () => {});
    };
    const fail = (e: unknown) => {
      const code = (e as { code?: unknown } | null)?.code;
      reply({ error: { message: describeThrown(e), code: typeof code === 'string' ? code : undefined } });
    };
    if (db === undefined) return fail(new Error('ctx.db is only open while the handler runs'));
    if (typeof m.sql !== 'string' || !Array.isArray(m.params)) return fail(new TypeError('ctx.db: the SQL must be a string and the parameters an array'));
    const result = m.want === 'rows' ? db.query(m.sql, m.params).then((rows) => ({ rows })) : db.run(m.sql, m.params);
    result.then(reply, fail);
  }

  async #start(signal: AbortSignal | undefined): Promise<Host> {
    // A host that crashed is dropped at once (#kill), even before its exit is seen.
    if (this.#host !== undefined && !this.#host.gone) return this.#host;
    const wait = hostRestartDelayMs(this.#ended);
    if (wait > 0) await pause(wait, signal);
    if (signal?.aborted === true) throw new Error(SHUTDOWN);
    if (hostArgs === undefined) throw new Error('no module host: useModuleHostArgs was not called');
    const child = spawn(process.execPath, [...hostArgs], {
      env: this.#env,
      stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
      serialization: 'advanced',
    });
    const host: Host = { child, job: undefined, gone: false, killed: false, loaded: new Set(), output: new OutputTail(500) };
    this.#host = host;
    child.stdout?.on('data', (d: Buffer) => host.output.push(d));
    child.stderr?.on('data', (d: Buffer) => host.output.push(d));
    let started: { resolve(): void; reject(e: Error): void } | undefined;
    const ready = new Promise<void>((resolve, reject) => (started = { resolve, reject }));
    ready.catch(() => {});
    child.on('message', (m: FromModuleHost) => {
      if (typeof m !== 'object' || m === null) return;
      if (m.type === 'ready') started?.resolve();
      if (m.type === 'crashed') {
        host.crash = typeof m.error === 'string' ? m.error : 'the module crashed';
        this.#kill(host, false);
      }
      host.job?.message(m);
    });
    let lastWords: NodeJS.Timeout | undefined;
    const ended = (why: string) => {
      if (host.gone) return;
      host.gone = true;
      clearTimeout(lastWords);
      if (this.#host === host) this.#host = undefined;
      if (!host.killed) this.#ended += 1;
      const output = host.output.toString()?.trim();
      started?.reject(
        new Error(`the module host did not start: ${why}${output === undefined || output === '' ? '' : `; its last output: ${output.replace(/\s+/g, ' ')}`}`),
      );
      if (host.crash !== undefined) host.job?.died(host.crash);
      else host.job?.died(output === undefined || output === '' ? why : `${why}; its last output: ${output.replace(/\s+/g, ' ')}`);
    };
    child.on('error', (e) => ended(`cannot run the module host: ${describeThrown(e)}`));
    child.on('exit', (code, sig) => {
      const why = sig === null ? `the module ended its process (exit code ${code ?? 'unknown'})` : `the module's process was killed (${sig})`;
      // A crash is said on the channel just before the exit: read it first.
      if (!child.connected) ended(why);
      else {
        lastWords = setTimeout(() => ended(why), LAST_WORDS_MS);
        child.once('disconnect', () => ended(why));
      }
    });
    // The host never keeps the drain's process alive by itself.
    child.unref();
    (child as { channel?: { unref?(): void } }).channel?.unref?.();
    const slow = setTimeout(() => {
      this.#kill(host);
      started?.reject(new Error(`the module host did not start within ${HOST_START_MS / 1000} s`));
    }, HOST_START_MS);
    const onAbort = () => {
      this.#kill(host);
      started?.reject(new Error(SHUTDOWN));
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      await ready;
    } finally {
      clearTimeout(slow);
      signal?.removeEventListener('abort', onAbort);
    }
    return host;
  }

  /** SIGKILL; `byRunner` false when the host already said it crashed (it ended by itself). */
  #kill(host: Host, byRunner = true): void {
    if (host.gone) return;
    if (byRunner) host.killed = true;
    if (this.#host === host) this.#host = undefined;
    try {
      host.child.kill('SIGKILL');
    } catch {
      // Already gone.
    }
  }
}

function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}
