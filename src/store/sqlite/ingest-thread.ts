import { Worker } from 'node:worker_threads';
import { ReceiverError, type ErrorKind } from '../../errors.js';
import { WORKER_RESOURCE_LIMITS } from '../../threads.js';
import type { IngestResult, NewEvent } from '../types.js';
import { sqliteError } from './errors.js';
import type { SerializedError, WorkerInit, WorkerReply, WorkerRequest } from './ingest-worker.js';

// src/store/sqlite and dist/store/sqlite are both three levels below the package root, so
// this finds the compiled worker from either (tests run src; the worker runs compiled JS).
// A function: the single executable has no import.meta.url and runs its own worker source.
const workerUrl = () => new URL('../../../dist/store/sqlite/ingest-worker.js', import.meta.url);

/** The worker's whole source as one script; the single executable sets it (it has no dist/ beside it). */
let workerSource: string | undefined;

export function useIngestWorkerSource(source: string): void {
  workerSource = source;
}

function revive(e: SerializedError): ReceiverError {
  if (e.kind !== undefined) return new ReceiverError(e.kind as ErrorKind, e.message, e.hint === undefined ? {} : { hint: e.hint });
  return sqliteError(Object.assign(new Error(e.message), e.code === undefined ? {} : { code: e.code }), 'ingest');
}

/** The main thread's side of the ingest worker. The worker commits batches one after another in the order posted; GroupCommit keeps up to INGEST_BATCHES_IN_FLIGHT of them posted. */
export class IngestThread {
  readonly #worker: Worker;
  readonly #pending = new Map<number, { resolve: (r: IngestResult[]) => void; reject: (e: unknown) => void }>();
  #seq = 0;
  #dead: ReceiverError | undefined;
  readonly ready: Promise<void>;

  constructor(path: string, busyTimeoutMs: number, ingestWaiting?: SharedArrayBuffer) {
    const options = { workerData: { path, busyTimeoutMs, ingestWaiting } satisfies WorkerInit, resourceLimits: WORKER_RESOURCE_LIMITS };
    this.#worker = workerSource === undefined ? new Worker(workerUrl(), options) : new Worker(workerSource, { ...options, eval: true });
    let failOpen: (e: ReceiverError) => void = () => undefined;
    this.ready = new Promise((resolve, reject) => {
      failOpen = reject;
      this.#worker.on('message', (m: WorkerReply) => {
        if (m.type === 'ready') resolve();
        else if (m.type === 'open-failed') reject(revive(m.error));
        else if (m.type === 'batch') {
          const p = this.#pending.get(m.seq);
          this.#pending.delete(m.seq);
          if ('error' in m) p?.reject(revive(m.error));
          else p?.resolve(m.results);
        }
      });
    });
    // A worker that dies answers every waiting request 503; nothing was acknowledged for them.
    const die = (why: string) => {
      this.#dead = new ReceiverError('unavailable', `ingest worker stopped: ${why}`);
      for (const p of this.#pending.values()) p.reject(this.#dead);
      this.#pending.clear();
      // A worker that dies before it opened the database (its script missing, out of
      // memory) must fail ready, not leave serve waiting forever half-started.
      failOpen(
        new ReceiverError('runtime', `the ingest worker stopped before it opened the database: ${why}`, {
          hint: 'run `npm run build` (the worker runs from dist/), then start again',
        }),
      );
    };
    this.#worker.on('error', (e) => die(e.message));
    this.#worker.on('exit', (code) => die(`exit ${code}`));
  }

  /** `deadline` (Date.now() time): the worker waits for another process's write lock until then. */
  commit(items: NewEvent[], deadline: number): Promise<IngestResult[]> {
    if (this.#dead !== undefined) return Promise.reject(this.#dead);
    const seq = ++this.#seq;
    return new Promise((resolve, reject) => {
      this.#pending.set(seq, { resolve, reject });
      this.#worker.postMessage({ type: 'batch', seq, items, deadline } satisfies WorkerRequest);
    });
  }

  async close(): Promise<void> {
    if (this.#dead !== undefined) return;
    const exited = new Promise<void>((r) => this.#worker.once('exit', () => r()));
    this.#worker.postMessage({ type: 'close' } satisfies WorkerRequest);
    await exited;
  }
}
