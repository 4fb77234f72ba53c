import { describe, expect, it } from 'vitest';
import { compareVersions, decideEffect, newerVersion } from '../../src/store/drain/ledger.js';
import type { EffectStart, LedgerRow } from '../../src/store/drain-types.js';

const start = (o: Partial<EffectStart> = {}): EffectStart => ({ route: 'r', businessKey: 'k', effectKey: 'r:k', runToken: 't', force: false, ...o });
const row = (o: Partial<LedgerRow> = {}): LedgerRow => ({ status: 'done', eventId: 1, version: null, runs: 1, forcedRuns: 0, heldElsewhere: false, ...o });

describe('the effect ledger rule', () => {
  it('runs a new key, a failed key and a crashed run; skips a done key', () => {
    expect(decideEffect(undefined, start())).toBe('run');
    expect(decideEffect(row({ status: 'failed' }), start())).toBe('run');
    expect(decideEffect(row({ status: 'running' }), start())).toBe('run');
    expect(decideEffect(row(), start())).toBe('skipped');
  });

  it('is busy while another event runs the key under a live lease', () => {
    expect(decideEffect(row({ status: 'running', heldElsewhere: true }), start())).toBe('busy');
    expect(decideEffect(row({ status: 'running', heldElsewhere: true }), start({ force: true }))).toBe('busy');
  });

  it('versions: newer runs, equal is done, older is stale, even when forced', () => {
    expect(decideEffect(row({ version: '10' }), start({ version: '11' }))).toBe('run');
    expect(decideEffect(row({ version: '10' }), start({ version: '10' }))).toBe('skipped');
    expect(decideEffect(row({ version: '10' }), start({ version: '9' }))).toBe('stale');
    expect(decideEffect(row({ version: '10', status: 'failed' }), start({ version: '9' }))).toBe('stale');
    expect(decideEffect(row({ version: '10' }), start({ version: '9', force: true }))).toBe('stale');
    expect(decideEffect(row({ version: '10' }), start({ version: '10', force: true }))).toBe('run');
    expect(decideEffect(row({ version: null }), start({ version: '1' }))).toBe('skipped');
  });

  it('forced: a done key runs again', () => {
    expect(decideEffect(row(), start({ force: true }))).toBe('run');
  });

  it('compares numerically when both are numbers, else as strings', () => {
    expect(compareVersions('9', '10')).toBe(-1);
    expect(compareVersions('10', '9')).toBe(1);
    expect(compareVersions('1.5', '1.25')).toBe(1);
    expect(compareVersions('1700000000000000001', '1700000000000000000')).toBe(1); // beyond 2^53
    expect(compareVersions('2026-01-02T00:00:00Z', '2026-01-01T23:59:59Z')).toBe(1);
    expect(compareVersions('b', 'a10')).toBe(1);
    expect(compareVersions('7', '7')).toBe(0);
    expect(newerVersion('10', '9')).toBe('10');
    expect(newerVersion('9', '10')).toBe('10');
    expect(newerVersion(null, '3')).toBe('3');
    expect(newerVersion('3', undefined)).toBe('3');
  });
});
