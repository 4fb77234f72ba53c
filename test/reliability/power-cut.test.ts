import Database from 'better-sqlite3';
import { spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { tempDir } from '../helpers.js';
import { LONG, printReport, printSeedOnFailure, seeded, SIZES } from './harness.js';
import { PowerFs, powerCutLoop, powerCutUnavailable } from './power-cut.js';

// Each cut restarts serve on a FUSE file system served by Python (about 17 s a cut on a
// loaded 2-core machine): two in the suite, RECEIVER_POWER_CUTS=<n> for more, 100 with
// RECEIVER_LONG=1. A budget of its own.
const TEST_TIMEOUT_MS = LONG ? 3 * 60 * 60_000 : 240_000;
const CUTS = LONG ? 100 : Number(process.env.RECEIVER_POWER_CUTS ?? 2);

describe('reliability: power cuts (unsynced writes lost)', () => {
  const tmp = tempDir('receiver-power-');
  afterAll(tmp.cleanup);

  it(
    `${CUTS} power cuts under load: nothing acknowledged is lost, every repeat follows a cut mid-effect, backups restore`,
    async (ctx) => {
      const unavailable = powerCutUnavailable();
      if (unavailable !== undefined) {
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

  for (const mode of ['sync', 'blocking'] as const) {
    it(`WalSync.${mode === 'sync' ? 'sync()' : 'syncBlocking()'} makes a commit survive a power cut: in a new WAL, after a checkpoint that truncated it, in a WAL created after the last connection closed`, async (ctx) => {
      const unavailable = powerCutUnavailable();
      if (unavailable !== undefined) {
        ctx.skip(unavailable);
        return;
      }
      const dir = join(tmp.dir, `wal-${mode}`);
      mkdirSync(join(dir, 'empty'), { recursive: true });
      mkdirSync(join(dir, 'mnt'));
      const fs = new PowerFs(join(dir, 'empty'), join(dir, 'mnt'), join(dir, 'after'), 1, false, false);
      await fs.mounted();
      try {
        const child = spawn(process.execPath, [new URL('./wal-file.mjs', import.meta.url).pathname, join(dir, 'mnt', 'r.db'), mode], {
          stdio: ['ignore', 'pipe', 'pipe'],
        });
        let out = '';
        child.stdout.on('data', (d: Buffer) => (out += d.toString()));
        child.stderr.on('data', (d: Buffer) => (out += d.toString()));
        const exited = new Promise((r) => child.once('exit', r));
        while (!out.includes('synced') && child.exitCode === null) await new Promise((r) => setTimeout(r, 10));
        expect(out).toContain('synced');
        child.kill('SIGKILL');
        await exited;
      } finally {
        const cut = await fs.unmount();
        const db = new Database(join(cut.out, 'r.db'));
        const rows = (db.prepare('SELECT x FROM t').all() as { x: string }[]).map((r) => r.x);
        db.close();
        expect(rows).toEqual(['in a new WAL', 'after a checkpoint that truncated the WAL', 'in the WAL created after the last connection closed']);
      }
    });
  }
});
