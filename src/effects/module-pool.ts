import { ModuleRunner, SHUTDOWN } from './module-runner.js';

/** How long a host beyond the first stays idle before it ends, giving its memory back. */
const SPARE_IDLE_MS = 30_000;

/**
 * The drain's module hosts: one per module effect running at once, up to `max`, so a module
 * lane that is slow (an API call) or hostile (a busy loop, a process that exits) holds only
 * its own host, and module effects of other lanes run meanwhile in hosts of their own. Each
 * host still runs one module effect at a time (ModuleRunner), so a host that crashes or is
 * killed fails only the effect that ran in it. An idle host is handed out before a new one
 * starts (one that has the module imported first); hosts beyond the first end once idle
 * for SPARE_IDLE_MS. Callers past `max` wait in order, holding nothing.
 */
export class ModulePool {
  readonly #env: NodeJS.ProcessEnv;
  readonly #max: number;
  readonly #spareIdleMs: number;
  /** Every host's runner, busy or idle. */
  readonly #all = new Set<ModuleRunner>();
  /** Idle runners, the most recently used last, each with when it became idle. */
  #idle: { runner: ModuleRunner; since: number }[] = [];
  #waiting: { give: (runner: ModuleRunner) => void }[] = [];
  #trim: NodeJS.Timeout | undefined;
  #closed = false;

  constructor(env: NodeJS.ProcessEnv, max: number, options: { spareIdleMs?: number } = {}) {
    this.#env = env;
    this.#max = Math.max(1, max);
    this.#spareIdleMs = options.spareIdleMs ?? SPARE_IDLE_MS;
  }

  /** How many hosts' runners exist now (busy or idle). */
  get size(): number {
    return this.#all.size;
  }

  /**
   * Runs `fn` (a module effect: its load, its transaction, its call) with a runner of its
   * own. Rejects with the shutdown error when `signal` aborts while it waits for one.
   */
  async exclusive<T>(signal: AbortSignal | undefined, path: string, fn: (runner: ModuleRunner) => Promise<T>): Promise<T> {
    const runner = await this.#take(signal, path);
    try {
      return await fn(runner);
    } finally {
      this.#give(runner);
    }
  }

  /** Kills every host (the drain stops); runners in use are dropped when given back. */
  close(): void {
    this.#closed = true;
    clearTimeout(this.#trim);
    for (const runner of this.#all) runner.close();
    this.#idle = [];
  }

  #take(signal: AbortSignal | undefined, path: string): Promise<ModuleRunner> {
    if (signal?.aborted === true || this.#closed) return Promise.reject(new Error(SHUTDOWN));
    if (this.#idle.length > 0) {
      const ready = this.#idle.findIndex((i) => i.runner.ready(path));
      const [taken] = this.#idle.splice(ready === -1 ? this.#idle.length - 1 : ready, 1);
      return Promise.resolve(taken!.runner);
    }
    if (this.#all.size < this.#max) {
      const runner = new ModuleRunner(this.#env);
      this.#all.add(runner);
      return Promise.resolve(runner);
    }
    return new Promise((resolve, reject) => {
      const waiter = {
        give: (runner: ModuleRunner) => {
          signal?.removeEventListener('abort', onAbort);
          resolve(runner);
        },
      };
      const onAbort = () => {
        this.#waiting = this.#waiting.filter((w) => w !== waiter);
        reject(new Error(SHUTDOWN));
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#waiting.push(waiter);
    });
  }

  #give(runner: ModuleRunner): void {
    if (this.#closed) {
      runner.close();
      this.#all.delete(runner);
      return;
    }
    const next = this.#waiting.shift();
    if (next !== undefined) return next.give(runner);
    this.#idle.push({ runner, since: Date.now() });
    this.#scheduleTrim();
  }

  /** Ends spare hosts (all idle ones but the most recently used) once idle long enough. */
  #scheduleTrim(): void {
    if (this.#trim !== undefined || this.#idle.length < 2) return;
    const oldest = Math.min(...this.#idle.slice(0, -1).map((i) => i.since));
    this.#trim = setTimeout(
      () => {
        this.#trim = undefined;
        const now = Date.now();
        const keep = this.#idle.slice(-1);
        const spare = this.#idle.slice(0, -1);
        const ending = spare.filter((i) => now - i.since >= this.#spareIdleMs);
        for (const { runner } of ending) {
          runner.close();
          this.#all.delete(runner);
        }
        this.#idle = [...spare.filter((i) => now - i.since < this.#spareIdleMs), ...keep];
        this.#scheduleTrim();
      },
      Math.max(0, oldest + this.#spareIdleMs - Date.now()),
    );
    this.#trim.unref();
  }
}
