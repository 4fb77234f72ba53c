import { afterAll, describe, expect, it } from 'vitest';
import { tempDir } from '../helpers.js';
import { LONG, printReport, printSeedOnFailure, seeded, SIZES, TEST_TIMEOUT_MS } from './harness.js';
import { powerCutLoop, powerCutUnavailable } from './power-cut.js';

const CUTS = LONG ? 100 : Number(process.env.RECEIVER_POWER_CUTS ?? 3);

describe('reliability: power cuts (unsynced writes lost)', () => {
  const tmp = tempDir('receiver-power-');
  afterAll(() => { if (process.env.KEEP !== "1") tmp.cleanup(); });

  it(
    `${CUTS} power cuts under load: nothing acknowledged is lost, every repeat follows a cut mid-effect, backups restore`,
    async (ctx) => {
      const unavailable = powerCutUnavailable();
      if (unavailable !== undefined) {
        console.warn(`\n*** SKIPPED the power-cut test: ${unavailable}. ***\n`);
        ctx.skip(unavailable);
        return;
      }
      printSeedOnFailure('test/reliability/power-cut.test.ts');
      const report = await powerCutLoop({
        dir: tmp.dir,
        cuts: CUTS,
        senders: 4,
        backlog: LONG ? 20 : 4,
        random: seeded(SIZES.seed),
        deadline: Date.now() + TEST_TIMEOUT_MS - 15_000,
        tear: true,
      });
      printReport(`power cuts (seed ${SIZES.seed}${LONG ? ', long' : ''})`, report);
      expect(report.violations).toEqual([]);
      expect(report.lost).toBe(0);
      expect(report.integrityFailures).toBe(0);
      expect(report.cuts).toBe(CUTS);
    },
    TEST_TIMEOUT_MS,
  );
});
