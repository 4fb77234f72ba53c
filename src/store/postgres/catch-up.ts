import { catchUpOn as on } from '../catch-up-steps.js';
import type { CatchUpStore } from '../catch-up-types.js';
import type { Conn } from './conn.js';
import { stepRunner } from './ops.js';
import { dialect } from './steps.js';

/** Catch-up's reads and writes on PostgreSQL (../catch-up-steps.ts). */
export function catchUpOn(c: Conn): CatchUpStore {
  return on(dialect, stepRunner(c));
}
