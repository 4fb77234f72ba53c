import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openSqlite } from '../../src/store/sqlite/open.js';
import { BIN, runCli, runInProcess, tempDir, writeConfig } from '../helpers.js';
import { FakeStripe, STRIPE_KEY, STRIPE_WHSEC } from './fakes.js';

const SCRIPT = '/usr/bin/script';

describe('receiver catch-up on a terminal and in a pipe', () => {
  let tmp: ReturnType<typeof tempDir>;
  let stripe: FakeStripe;
  let file: string;

  beforeEach(async () => {
    tmp = tempDir('receiver-catchup-cli-');
    stripe = await new FakeStripe().start();
    file = writeConfig(tmp.dir, {
      sources: { shop: { provider: 'stripe', secret: STRIPE_WHSEC, catchUp: { apiKey: 'env:STRIPE_API_KEY', apiBase: stripe.base } } },
    });
    // The database serve created (operator commands never create one).
    openSqlite(join(tmp.dir, 'receiver.db'), { busyTimeoutMs: 1000 }).close();
  });
  afterEach(async () => {
    await stripe.close();
    tmp.cleanup();
  });

  it('in a pipe: the counts on stdout, nothing on stderr; the first run stores nothing from before it', async () => {
    await stripe.create();
    const r = await runCli(['catch-up', '-c', file], { env: { STRIPE_API_KEY: STRIPE_KEY } });
    expect(r.code).toBe(0);
    expect(r.stderr).toBe('');
    expect(r.stdout).toMatch(/^shop \(stripe, from \S+\): listed 0, already stored 0, stored now 0, failed 0\n$/);
  });

  it('in-process, on its CliIo: its clock and environment; a refused credential is reported in the counts and exits 1', async () => {
    const now = Date.parse('2030-01-02T03:04:05Z');
    const ok = await runInProcess(['catch-up', '-c', file, '--dry-run', '--json'], { env: { STRIPE_API_KEY: STRIPE_KEY }, now: () => now });
    expect(ok.code).toBe(0);
    expect(ok.stderr).toBe('');
    expect(JSON.parse(ok.stdout)).toMatchObject({ dryRun: true, sources: [{ source: 'shop', from: '2030-01-02T03:04:05.000Z', error: null }] });
    const refused = await runInProcess(['catch-up', '-c', file], { env: { STRIPE_API_KEY: 'rk_test_wrong' } });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toBe('');
    expect(refused.stdout).toMatch(/^shop \(stripe, from \S+\): .*\n {2}error: .+\n/);
    expect(refused.stdout).not.toContain('rk_test_wrong');
  });

  it.skipIf(!existsSync(SCRIPT))('on a terminal: a progress line on stderr, cleared before the counts', async () => {
    await stripe.create();
    // Async: the fake API answers from this process while the command runs.
    const r = await new Promise<{ status: number | null; stdout: string }>((resolve) => {
      const child = spawn(SCRIPT, ['-qec', `${process.execPath} ${BIN} catch-up --since 1h -c ${file}`, '/dev/null'], {
        env: { ...process.env, STRIPE_API_KEY: STRIPE_KEY },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stdout = '';
      child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
      child.on('close', (status) => resolve({ status, stdout }));
    });
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('\r\x1b[Kshop: listing');
    expect(r.stdout).toContain('\r\x1b[Kshop: 1 listed, 0 already stored, 1 stored, 0 asked, 0 failed');
    // eslint-disable-next-line no-control-regex -- the terminal escape that clears the progress line
    expect(r.stdout).toMatch(/\r\x1b\[Kshop \(stripe, from \S+\): listed 1, already stored 0, stored now 1, failed 0\r?\n/);
  });
});
