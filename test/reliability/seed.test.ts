import { describe, expect, it } from 'vitest';
import { seeded, seedFrom } from './harness.js';

describe('reliability harness: a run is replayable from its seed', () => {
  it('RECEIVER_RELIABILITY_SEED sets the seed; without it the seed comes from the clock', () => {
    expect(seedFrom({ RECEIVER_RELIABILITY_SEED: '1234' })).toBe(1234);
    expect(seedFrom({ RECEIVER_RELIABILITY_SEED: '0' })).toBe(0);
    expect(seedFrom({}, 2_147_483_647 + 42)).toBe(42);
    expect(seedFrom({ RECEIVER_RELIABILITY_SEED: '' }, 7)).toBe(7);
    for (const bad of ['-1', '1.5', 'abc', String(2 ** 32)])
      expect(() => seedFrom({ RECEIVER_RELIABILITY_SEED: bad })).toThrow(/RECEIVER_RELIABILITY_SEED must be a whole number/);
  });

  it('the same seed gives the same random sequence; another seed another one', () => {
    const take = (seed: number) => {
      const r = seeded(seed);
      return Array.from({ length: 8 }, () => r());
    };
    expect(take(1234)).toEqual(take(1234));
    expect(take(1234)).not.toEqual(take(1235));
    for (const x of take(99)) {
      expect(x).toBeGreaterThanOrEqual(0);
      expect(x).toBeLessThan(1);
    }
  });
});
