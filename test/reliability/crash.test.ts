import { afterAll, describe, expect, it } from 'vitest';
import { tempDir } from '../helpers.js';
import { crashLoop } from './crash-loop.js';
import { LONG, printReport, seeded, SIZES, TEST_TIMEOUT_MS, printSeedOnFailure } from './harness.js';

describe('reliability: kill -9 under load', () => {
  const tmp = tempDir('receiver-crash-');
  afterAll(tmp.cleanup);

  it(
    `${SIZES.kills} kills over ${SIZES.deliveries} signed deliveries: nothing acknowledged is lost, every repeat is in the ledger`,
    async () => {
      printSeedOnFailure('test/reliability/crash.test.ts');
      const report = await crashLoop({
        dir: tmp.dir,
        kills: SIZES.kills,
        deliveries: SIZES.deliveries,
        duplicateShare: 0.15,
        senders: 8,
        random: seeded(SIZES.seed),
        deadline: Date.now() + TEST_TIMEOUT_MS - 15_000,
      });
      printReport(`crash loop (seed ${SIZES.seed}${LONG ? ', long' : ''})`, report);
      expect(report.violations).toEqual([]);
      expect(report.lost).toBe(0);
      expect(report.kills).toBe(SIZES.kills);
      expect(report.acknowledged).toBe(report.uniqueDeliveries);
      expect(report.done).toBe(report.stored);
    },
    TEST_TIMEOUT_MS,
  );
});
