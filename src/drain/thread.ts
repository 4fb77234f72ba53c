import { Worker } from 'node:worker_threads';
import type { Config } from '../config/load.js';
import { effectEnvironment } from '../effects/exec.js';
import { revealHttpSecrets } from '../effects/http.js';
import { ReceiverError } from '../errors.js';
import { JSON_STYLE, stderrWriter, type Logger, type LogStyle } from '../log.js';
import { WORKER_RESOURCE_LIMITS } from '../threads.js';
import type { Drain, DrainOptions } from './loop.js';
import type { DrainWorkerInit, FromDrainWorker, ToDrainWorker } from './worker.js';

// src/drain and dist/drain are both two levels below the package root, so this finds the
// compiled worker from either (tests run src; the worker runs compiled JS). The single
// executable has no import.meta.url and no dist/: it sets the worker's source instead, and
// until it does, the thread fails saying so.
let WORKER_URL =
  typeof import.meta.url === 'string'
    ? new URL('../../dist/drain/worker.js', import.meta.url)
    : new URL(`data:text/javascript,${encodeURIComponent('throw new Error("no drain worker: useDrainWorkerSource was not called")')}`);

/**
 * How long a reload waits for the drain thread to take its configuration in: a loop that
 * waits on the database (busy past busyTimeoutMs, unavailable) takes it in later.
 */
const RECONFIGURE_WAIT_MS = 10_000;

/** The worker as one ES module's source; the single executable sets it (it has no dist/ beside it). Started from a data: URL. */
export function useDrainWorkerSource(source: string): void {
  WORKER_URL = new URL(`data:text/javascript;base64,${Buffer.from(source).toString('base64')}`);
}

/**
 * The configuration as the drain thread gets it: plain data that crosses to the thread as
 * is. The sources (providers and their secrets), the metrics and admin tokens and the
 * catch-up settings (API credentials, sender clients) stay in the main thread; the drain
 * reads none of them, and exec effects draw on the variables the main thread picked
 * (execEnv: the minimal ones and those listed in `effect.env`). The http effects' secrets,
 * which it does send, cross apart as plain text (httpSecrets in DrainWorkerInit) and are
 * wrapped again there.
 */
export type ThreadConfig = Omit<Config, 'sources' | 'metrics' | 'admin' | 'catchUp' | 'httpSecrets'>;

export function threadConfig(config: Config): ThreadConfig {
  const { sources: _sources, metrics: _metrics, admin: _admin, catchUp: _catchUp, httpSecrets: _httpSecrets, ...rest } = config;
  return rest;
}

export interface DrainThreadOptions {
  config: Config;
  logger: Logger;
  /** How the thread's lines look (resolved here: the thread cannot tell whether stderr is a terminal). */
  logStyle?: LogStyle;
  /**
   * The thread's log lines, in batches: it writes none itself, so they share the main
   * thread's writer (its bound, its order). Default: the process's stderr writer.
   */
  onLines?: (lines: string[]) => void;
  onAttempt?: DrainOptions['onAttempt'];
  onEvent?: DrainOptions['onEvent'];
  /** The thread failed after it started (a bug): serve logs it and exits for systemd to restart it. */
  onFailure: (e: Error) => void;
  /** SQLite: the ingest thread's "waiting for the write lock" flag (Store.ingestWaiting). */
  ingestWaiting?: SharedArrayBuffer | undefined;
  /** The environment the configuration was resolved against (exec effects draw on it); default process.env. */
  env?: NodeJS.ProcessEnv | undefined;
}

/** What crosses to the thread of a configuration: its plain part, the http effects' secrets as text, exec effects' environment. */
function forThread(config: Config, env: NodeJS.ProcessEnv): Pick<DrainWorkerInit, 'config' | 'httpSecrets' | 'execEnv'> {
  return { config: threadConfig(config), httpSecrets: revealHttpSecrets(config.httpSecrets), execEnv: effectEnvironment(config, env) };
}

/**
 * The drain in a thread of its own (`serve`). Its work per event (a claim, a transaction or
 * two, a module handler or a child process, JSON of the body for templates) used to share
 * the one event loop with ingest: with a backlog the drain took most of it, and deliveries
 * waited. In its own thread, with its own database connection, it takes the second core
 * and the event loop keeps reading and answering deliveries.
 *
 * New deliveries wake it without a message each: the main thread counts them in shared
 * memory, and posts a wake only when the drain has said it is about to sleep (Atomics;
 * sequentially consistent, so either the drain sees the new count or the main thread sees
 * "sleeping"). Attempt and event outcomes come back in batches for the metrics.
 */
export function startDrainThread(o: DrainThreadOptions): Promise<Drain> {
  const signals = new SharedArrayBuffer(8);
  const counts = new Int32Array(signals);
  const init: DrainWorkerInit = {
    ...forThread(o.config, o.env ?? process.env),
    signals,
    ingestWaiting: o.ingestWaiting,
    logStyle: o.logStyle ?? JSON_STYLE,
  };
  const onLines =
    o.onLines ??
    ((lines: string[]) => {
      for (const line of lines) stderrWriter().write(line);
    });
  const worker = new Worker(WORKER_URL, { workerData: init, resourceLimits: WORKER_RESOURCE_LIMITS });
  let started = false;
  let stopped: (() => void) | undefined;
  const post = (m: ToDrainWorker) => worker.postMessage(m);

  return new Promise<Drain>((resolve, reject) => {
    const fail = (e: Error) => {
      if (!started) reject(e);
      else if (stopped === undefined) o.onFailure(e);
    };
    worker.on('message', (m: FromDrainWorker) => {
      if (m.type === 'started') {
        started = true;
        resolve(drain);
      } else if (m.type === 'failed')
        fail(new ReceiverError('runtime', `the drain could not start: ${m.message}`, m.hint === undefined ? {} : { hint: m.hint }));
      else if (m.type === 'outcomes') {
        for (const a of m.attempts) o.onAttempt?.(a);
        for (const e of m.events) o.onEvent?.(e);
      } else if (m.type === 'lines') onLines(m.lines);
      else if (m.type === 'reconfigured') reconfigured(m.seq);
      else if (m.type === 'stopped') stopped?.();
    });
    worker.on('error', (e) => fail(e));
    worker.on('exit', (code) => {
      reconfigured(Infinity);
      stopped?.();
      if (stopped === undefined) fail(new Error(`the drain thread exited (code ${code})`));
    });

    /** Reloads posted and not yet answered, by sequence number. */
    const waiting = new Map<number, () => void>();
    let reconfigures = 0;
    /** The thread took in reload `seq` (and every earlier one). */
    function reconfigured(seq: number) {
      for (const [s, done] of waiting) {
        if (s > seq) continue;
        waiting.delete(s);
        done();
      }
    }

    const drain: Drain = {
      wake() {
        Atomics.add(counts, 0, 1);
        // 1 -> 2: one wake per sleep, however many deliveries arrive meanwhile.
        if (Atomics.compareExchange(counts, 1, 1, 2) === 1) post({ type: 'wake' });
      },
      reconfigure(config: Config, env: NodeJS.ProcessEnv) {
        const seq = ++reconfigures;
        return new Promise<void>((resolve) => {
          // A thread that does not answer (its loop waiting on the database) takes it in later.
          const timer = setTimeout(() => reconfigured(seq), RECONFIGURE_WAIT_MS);
          waiting.set(seq, () => {
            clearTimeout(timer);
            resolve();
          });
          post({ type: 'reconfigure', seq, ...forThread(config, env) });
        });
      },
      stop(graceMs: number) {
        return new Promise<void>((done) => {
          // The thread answers once the running effect finished or the grace ran out, and
          // its connection is closed; a thread that does not is ended a little later.
          const kill = setTimeout(() => void worker.terminate(), graceMs + 5000);
          stopped = () => {
            clearTimeout(kill);
            stopped = () => {};
            done();
          };
          post({ type: 'stop', graceMs });
        });
      },
    };
  });
}
