import { spawnSync } from 'node:child_process';
import { chmodSync, chownSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { nobodyCommand, receiverForNobodyOrSkip, runInProcess, startServe, tempDir, writeConfig } from '../helpers.js';

/**
 * check-config and serve say when a file receiver reads secrets from can be read by every
 * user on the machine (as ssh does for a key): each `file:` secret and the environment file
 * ($RECEIVER_ENV_FILE), naming the file, what it holds and the command that closes it.
 */
describe('secrets in files that every user can read', () => {
  const tmp = tempDir();
  afterAll(tmp.cleanup);
  let n = 0;
  const setup = (modes: { admin: number; hook: number; metrics: number; env: number }) => {
    const dir = join(tmp.dir, String(++n));
    const file = (name: string, content: string, mode: number) => {
      const path = join(dir, name);
      writeFileSync(path, content);
      chmodSync(path, mode);
      return path;
    };
    mkdirSync(dir);
    const admin = file('admin-token', `${'a'.repeat(64)}\n`, modes.admin);
    const hook = file('hook-secret', 'hook-secret-value\n', modes.hook);
    const metrics = file('metrics-token', 'metrics-token-value\n', modes.metrics);
    const env = file('env', 'UNRELATED=1\n', modes.env);
    const config = writeConfig(dir, {
      database: ':memory:',
      sources: { hook: { provider: 'hmac-sha256', header: 'X-Signature', secret: `file:${hook}`, deliveryId: '{body.id}' } },
      metrics: { token: `file:${metrics}` },
      admin: { token: `file:${admin}` },
    });
    return { dir, config, admin, hook, metrics, env };
  };

  it('check-config: a Warning line for each, with the chmod; exit 0 and the same output; none once they are 0640', async () => {
    const s = setup({ admin: 0o644, hook: 0o604, metrics: 0o600, env: 0o666 });
    const r = await runInProcess(['check-config', '-c', s.config], { env: { RECEIVER_ENV_FILE: s.env } });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('is valid');
    const lines = r.stderr.split('\n').filter((l) => l !== '');
    expect(lines).toHaveLength(3);
    const root = process.geteuid?.() === 0;
    // Read by root, root's alone (serve becomes the service's user after); by its owner, o-rwx is the fix.
    const fix = (path: string) => (root ? `chmod 0600 ${path}` : `chmod o-rwx ${path}`);
    expect(lines).toContain(
      `Warning: admin.token: ${s.admin} can be read by every user on this machine (mode 0644); only its owner and the service's group should: ${fix(s.admin)}`,
    );
    expect(lines).toContain(
      `Warning: sources.hook.secret: ${s.hook} can be read by every user on this machine (mode 0604); only its owner and the service's group should: ${fix(s.hook)}`,
    );
    expect(lines).toContain(
      `Warning: the environment file: ${s.env} can be read and changed by every user on this machine (mode 0666); only its owner and the service's group should: ${fix(s.env)}`,
    );
    // The secrets themselves are never printed.
    expect(r.stderr).not.toContain('hook-secret-value');

    for (const f of [s.admin, s.hook, s.env]) chmodSync(f, 0o640);
    const fixed = await runInProcess(['check-config', '-c', s.config], { env: { RECEIVER_ENV_FILE: s.env } });
    expect(fixed.stderr).toBe('');
    expect(fixed.code).toBe(0);
  });

  it('serve: one warn line at start for each, with the file, its mode and the fix', async () => {
    const s = setup({ admin: 0o644, hook: 0o640, metrics: 0o640, env: 0o640 });
    const file = writeConfig(s.dir, {
      sources: { hook: { provider: 'hmac-sha256', header: 'X-Signature', secret: `file:${s.hook}`, deliveryId: '{body.id}' } },
      admin: { token: `file:${s.admin}` },
    });
    const serve = await startServe(file, { env: { RECEIVER_ENV_FILE: s.env } });
    expect(await serve.stop()).toBe(0);
    const warns = serve
      .output()
      .stderr.split('\n')
      .filter((l) => l.includes('"level":"warn"'))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(warns).toHaveLength(1);
    expect(warns[0]).toMatchObject({ file: s.admin, mode: '0644' });
    expect(warns[0]!.msg).toMatch(/^admin\.token: .*admin-token can be read by every user on this machine \(mode 0644\)/);
    expect(warns[0]!.fix).toMatch(/chmod/);
  });

  it('run as a user that reads the file only through the bits for others, the fix gives the file its group first', (ctx) => {
    const bin = receiverForNobodyOrSkip(ctx);
    const s = setup({ admin: 0o644, hook: 0o640, metrics: 0o640, env: 0o640 });
    chmodSync(tmp.dir, 0o755);
    chmodSync(s.dir, 0o755);
    for (const f of [s.hook, s.metrics, s.env]) chownSync(f, 65534, 65534);
    chmodSync(s.config, 0o644);
    const group = spawnSync('id', ['-gn', 'nobody'], { encoding: 'utf8' }).stdout.trim();
    const run = nobodyCommand(bin, ['check-config', '-c', s.config]);
    const r = spawnSync(run.file, run.args, { encoding: 'utf8', cwd: s.dir });
    expect(r.stderr).toBe(
      `Warning: admin.token: ${s.admin} can be read by every user on this machine (mode 0644); only its owner and the service's group should: chgrp ${group} ${s.admin} && chmod 0640 ${s.admin}\n`,
    );
    expect(r.status).toBe(0);
  });
});
