import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runCli, tempDir, writeConfig } from '../helpers.js';

describe('operator commands never create a database', () => {
  const tmp = tempDir();
  afterAll(tmp.cleanup);

  const copy = join(tmp.dir, 'copy.db');
  it.each([['events', 'list'], ['stats'], ['replay', '1'], ['purge', '--days', '90'], ['backup', copy]])(
    '%s %s on a missing file: exit 1, names the path, creates nothing',
    async (...args) => {
      const config = writeConfig(tmp.dir, { sources: {} });
      const missing = join(tmp.dir, 'elsewhere', 'receiver.db');
      const r = await runCli([...args, '-c', config, '--db', missing]);
      expect(r.code).toBe(1);
      expect(r.stderr).toContain(`Error: no database at ${missing}`);
      expect(r.stderr).toMatch(/^Try: pass --db/m);
      expect(existsSync(missing)).toBe(false);
      expect(existsSync(copy)).toBe(false);
    },
  );
});
