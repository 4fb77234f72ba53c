import type { EffectStart, LedgerRow } from './drain-types.js';

/**
 * The effect ledger's one rule, applied by every store inside the transaction that records
 * the decision (so two processes cannot both decide to run one key).
 *
 * - no row, or a `failed` row: run.
 * - `running` for another event whose claim still holds a live lease: busy (retry later);
 *   running it here too would run it twice at once.
 * - `running` otherwise: a run that crashed or whose lease expired. Run again; `runs`
 *   shows the repeat.
 * - `done`: skipped, unless the event's version is newer than the applied one (run) or
 *   older (stale). A forced replay re-runs a done key but never applies an older version.
 */
export type Decision = 'run' | 'skipped' | 'stale' | 'busy';

export function decideEffect(row: LedgerRow | undefined, start: EffectStart): Decision {
  if (row === undefined) return 'run';
  if (isStale(row.version, start.version)) return 'stale';
  if (row.status === 'running' && row.heldElsewhere) return 'busy';
  if (row.status !== 'done') return 'run';
  if (start.force) return 'run';
  if (start.version !== undefined && row.version !== null && compareVersions(start.version, row.version) > 0) return 'run';
  return 'skipped';
}

/** Is `incoming` older than the newest version applied for the key? */
export function isStale(applied: string | null, incoming: string | undefined): boolean {
  return applied !== null && incoming !== undefined && compareVersions(incoming, applied) < 0;
}

const INTEGER = /^-?\d+$/;
const NUMERIC = /^-?\d+(\.\d+)?$/;

/** Numerically when both are numbers (`"9" < "10"`), else as strings (ISO timestamps sort as strings). */
export function compareVersions(a: string, b: string): number {
  if (INTEGER.test(a) && INTEGER.test(b)) {
    // BigInt: nanosecond timestamps and sequence numbers exceed 2^53.
    const d = BigInt(a) - BigInt(b);
    return d < 0n ? -1 : d > 0n ? 1 : 0;
  }
  if (NUMERIC.test(a) && NUMERIC.test(b)) {
    const d = Number(a) - Number(b);
    return d < 0 ? -1 : d > 0 ? 1 : 0;
  }
  return a < b ? -1 : a > b ? 1 : 0;
}

/** The newer of two versions, for the ledger's `version` column after a successful run. */
export function newerVersion(applied: string | null, incoming: string | undefined): string | null {
  if (incoming === undefined) return applied;
  if (applied === null) return incoming;
  return compareVersions(incoming, applied) >= 0 ? incoming : applied;
}
