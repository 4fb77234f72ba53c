/**
 * The ingest connection, in a worker thread. A SQLite COMMIT with synchronous=FULL waits
 * for fsync; on the main thread that wait would stop every other request from being read
 * and verified. Here the main thread keeps parsing and verifying the next batch while this
 * thread commits the current one (see ingest-thread.ts). The worker may also block in
 * SQLite's own busy wait without stalling the server.
 */
import { parentPort, workerData } from 'node:worker_threads';
import type { IngestResult, NewEvent } from '../types.js';
import { isBusy } from './errors.js';
import { ingestWaitingFlag, waitingForLock } from './lock-priority.js';
import { ingestOne, ingestStatements } from './ingest.js';
import { inMemoryTemp, openSqlite } from './open.js';
import { WalSync } from './wal-sync.js';

export interface WorkerInit {
  path: string;
  busyTimeoutMs: number;
  /** Raised while this thread waits for the write lock (see lock-priority.ts). */
  ingestWaiting?: SharedArrayBuffer | undefined;
}

export type WorkerRequest = { type: 'batch'; seq: number; items: NewEvent[]; deadline: number } | { type: 'close' };
export type WorkerReply =
  | { type: 'ready' }
  | { type: 'open-failed'; error: SerializedError }
  | { type: 'batch'; seq: number; results: IngestResult[] }
  | { type: 'batch'; seq: number; error: SerializedError }
  | { type: 'closed' };

export interface SerializedError {
  message: string;
  code?: string;
  kind?: string;
  hint?: string;
}

function serialize(e: unknown): SerializedError {
  const err = e as { message?: string; code?: unknown; kind?: unknown; hint?: unknown };
  return {
    message: String(err.message ?? e),
    ...(typeof err.code === 'string' ? { code: err.code } : {}),
    ...(typeof err.kind === 'string' ? { kind: err.kind } : {}),
    ...(typeof err.hint === 'string' ? { hint: err.hint } : {}),
  };
}

if (parentPort !== null) {
  const port = parentPort;
  const init = workerData as WorkerInit;
  try {
    // SQLite's busy wait blocks only this thread: it may wait the whole busy timeout.
    const db = openSqlite(init.path, { busyTimeoutMs: init.busyTimeoutMs });
    // COMMIT releases the write lock without waiting for the disk; the fdatasync after it
    // (before any answer) gives the durability of synchronous=FULL, outside the lock, so the
    // drain's connection is not kept waiting on it (see wal-sync.ts).
    db.pragma('synchronous = NORMAL');
    inMemoryTemp(db);
    const wal = new WalSync(init.path);
    const statements = ingestStatements(db);
    const commit = db.transaction((items: NewEvent[]) => items.map((e) => ingestOne(statements, e)));
    // Waiting for the write lock: our own loop, not SQLite's busy handler, which sleeps at
    // least 1 ms (then 2, 5, 10 ...) whenever the lock is taken. The drain thread takes it
    // for a fraction of a millisecond at a time, so that would cost this thread a whole
    // millisecond per collision. Here: 50 us doubling to 2 ms, until the batch's deadline
    // (a request's whole wait for a lock stays within busyTimeoutMs from its arrival).
    db.pragma('busy_timeout = 0');
    const pause = new Int32Array(new SharedArrayBuffer(4));
    const flag = init.ingestWaiting === undefined ? undefined : ingestWaitingFlag(init.ingestWaiting);
    const commitBy = (items: NewEvent[], deadline: number): IngestResult[] => {
      try {
        for (let waitMs = 0.05; ; waitMs = Math.min(2, waitMs * 2)) {
          try {
            return commit.immediate(items);
          } catch (e) {
            if (!isBusy(e) || Date.now() >= deadline) throw e;
            // The drain thread gives way while this is up.
            waitingForLock(flag, true);
            Atomics.wait(pause, 0, 0, Math.min(waitMs, Math.max(0, deadline - Date.now())));
          }
        }
      } finally {
        waitingForLock(flag, false);
      }
    };
    port.on('message', (m: WorkerRequest) => {
      if (m.type === 'close') {
        clearInterval(checkpoints);
        db.close();
        port.postMessage({ type: 'closed' } satisfies WorkerReply);
        port.close();
        return;
      }
      // Structured clone turns Buffers into Uint8Arrays; better-sqlite3 binds both as BLOBs.
      try {
        const results = commitBy(m.items, m.deadline);
        wal.syncBlocking();
        port.postMessage({ type: 'batch', seq: m.seq, results } satisfies WorkerReply);
      } catch (e) {
        port.postMessage({ type: 'batch', seq: m.seq, error: serialize(e) } satisfies WorkerReply);
      }
    });
    // The drain's connection never checkpoints (a checkpoint fsyncs): this one does, when it
    // commits past the WAL's auto-checkpoint size, and here once a second in case only the
    // drain is writing. PASSIVE never waits for a lock.
    const checkpoints = setInterval(() => {
      try {
        db.pragma('wal_checkpoint(PASSIVE)');
      } catch {
        // Busy or closing: the next tick or commit checkpoints.
      }
    }, 1000);
    checkpoints.unref();
    port.postMessage({ type: 'ready' } satisfies WorkerReply);
  } catch (e) {
    port.postMessage({ type: 'open-failed', error: serialize(e) } satisfies WorkerReply);
  }
}
