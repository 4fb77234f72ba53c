import { catchUpOn as on } from '../catch-up-steps.js';
import type { CatchUpStore } from '../catch-up-types.js';
import type { Db } from './open.js';
import { stepRunner } from './ops.js';
import { dialect } from './steps.js';

/**
 * Catch-up's reads and writes on SQLite (../catch-up-steps.ts). In `serve` they share the
 * connection whose own busy wait is a few ms (the event loop must not block on another
 * writer): a busy database is waited for here, asynchronously, up to busyTimeoutMs.
 */
export function catchUpOn(db: Db, busyTimeoutMs: number): CatchUpStore {
  // One receiver runs on a SQLite file: its own schedule never overlaps a source's runs.
  return { ...on(dialect, stepRunner(db, busyTimeoutMs)), lockCatchUp: () => Promise.resolve({ release: () => Promise.resolve() }) };
}
