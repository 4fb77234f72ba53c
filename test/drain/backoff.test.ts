import { describe, expect, it } from 'vitest';
import { backoffMs, nextAttemptAt } from '../../src/drain/backoff.js';

const policy = { baseSeconds: 10, maxSeconds: 3600 };

describe('backoff', () => {
  it('is full jitter under a ceiling that doubles per attempt and is capped', () => {
    expect([1, 2, 3, 4, 9, 10, 30].map((n) => backoffMs(n, policy, () => 1))).toEqual([10_000, 20_000, 40_000, 80_000, 2_560_000, 3_600_000, 3_600_000]);
    expect(backoffMs(3, policy, () => 0)).toBe(0);
    expect(backoffMs(3, policy, () => 0.25)).toBe(10_000);
  });

  it('spreads retries: many draws fill the range [0, ceiling)', () => {
    const draws = Array.from({ length: 2000 }, () => backoffMs(4, policy));
    expect(Math.min(...draws)).toBeGreaterThanOrEqual(0);
    expect(Math.max(...draws)).toBeLessThanOrEqual(80_000);
    expect(Math.max(...draws) - Math.min(...draws)).toBeGreaterThan(60_000);
  });

  it('takes Retry-After when it is later than the backoff, capped at maxSeconds', () => {
    expect(nextAttemptAt(1000, 1, policy, () => 1, 2000)).toBe(1000 + 10_000);
    expect(nextAttemptAt(1000, 1, policy, () => 1, 60_000)).toBe(1000 + 60_000);
    expect(nextAttemptAt(1000, 1, policy, () => 0, 10 * 3600_000)).toBe(1000 + 3600_000);
    expect(nextAttemptAt(1000, 1, policy, () => 0.5)).toBe(1000 + 5000);
  });
});
