/**
 * Deliveries before the drain, for SQLite's one write lock inside `serve`.
 *
 * The ingest thread and the drain thread both write. SQLite's lock is not fair: the drain,
 * with a backlog, takes it again right after it lets go, and the ingest thread, which only
 * sees that the lock is taken, would rarely find it free. So the ingest thread raises a
 * flag in shared memory while it waits, and the drain thread looks at it before it takes
 * the lock: while the flag is up it waits (up to MAX_YIELD_MS each time, so the drain is
 * slowed, never stopped), and a group of drain steps holding the lock commits at its next
 * step.
 */

/** Index 0: 1 while the ingest thread waits for the write lock, else 0. */
export function ingestWaitingFlag(buffer = new SharedArrayBuffer(4)): Int32Array {
  return new Int32Array(buffer);
}

/** The ingest thread: the flag is up for the whole wait. */
export function waitingForLock(flag: Int32Array | undefined, waiting: boolean): void {
  if (flag === undefined) return;
  Atomics.store(flag, 0, waiting ? 1 : 0);
  if (!waiting) Atomics.notify(flag, 0);
}

/** The longest the drain waits for ingest at one step. */
const MAX_YIELD_MS = 20;

/** The drain thread, before it takes the write lock: true when it waited. */
export function yieldToIngest(flag: Int32Array | undefined): boolean {
  if (flag === undefined || Atomics.load(flag, 0) === 0) return false;
  Atomics.wait(flag, 0, 1, MAX_YIELD_MS);
  return true;
}

/** Is the ingest thread waiting now? */
export function ingestIsWaiting(flag: Int32Array | undefined): boolean {
  return flag !== undefined && Atomics.load(flag, 0) === 1;
}
