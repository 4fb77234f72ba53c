import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parseEnvFile, withEnvFile } from '../../src/config/env-file.js';
import { runInProcess, tempDir, writeConfig } from '../helpers.js';

/** The environment file receiver reads itself (--env-file, $RECEIVER_ENV_FILE, `envFile`): its lines, and the real environment winning. */
describe('environment file', () => {
  const tmp = tempDir();
  afterAll(tmp.cleanup);

  it("reads NAME=value lines as systemd's EnvironmentFile does", () => {
    const text = '# a comment\n; another\n\nA=plain value  \nexport B=\'single $quoted\'\nC="double \\"quoted\\" \\$x"\nD=\nE=a=b\n';
    expect(parseEnvFile(text, '/etc/receiver/env')).toEqual({ A: 'plain value', B: 'single $quoted', C: 'double "quoted" $x', D: '', E: 'a=b' });
  });

  it('a variable of the real environment wins over the file; an unset one does not hide it', () => {
    const env = join(tmp.dir, 'wins');
    writeFileSync(env, 'A=file\nB=file\nC=file\n');
    const merged = withEnvFile({}, { envFile: env }, { A: 'real', B: undefined });
    expect(merged).toEqual({ path: env, env: { A: 'real', B: 'file', C: 'file' } });
  });

  it('names the file and line of a line that is not NAME=value, never its text', () => {
    expect(() => parseEnvFile('A=1\nthis-is-a-secret-0000\n', '/etc/receiver/env')).toThrow(/^\/etc\/receiver\/env:2: not a NAME=value line$/);
    try {
      parseEnvFile('A=1\nthis-is-a-secret-0000\n', '/etc/receiver/env');
    } catch (e) {
      expect(JSON.stringify(e)).not.toContain('this-is-a-secret');
    }
  });

  it('check-config reads it from --env-file, $RECEIVER_ENV_FILE or envFile; the real environment wins; an unreadable one is named', async () => {
    const env = join(tmp.dir, 'env');
    writeFileSync(env, 'ENVFILE_TEST_SECRET=from-the-file-0000\n', { mode: 0o600 });
    const other = join(tmp.dir, 'other');
    writeFileSync(other, 'ENVFILE_TEST_SECRET=from-the-other-0000\n', { mode: 0o600 });
    const config = writeConfig(tmp.dir, { envFile: other, sources: { gh: { provider: 'github', secret: 'env:ENVFILE_TEST_SECRET' } } });
    const json = async (args: string[], vars: NodeJS.ProcessEnv = {}) => {
      const r = await runInProcess(['check-config', '-c', config, '--json', ...args], {
        env: { ENVFILE_TEST_SECRET: undefined, RECEIVER_ENV_FILE: undefined, ...vars },
      });
      return r.code === 0 ? (JSON.parse(r.stdout) as { envFile?: string }) : r;
    };
    expect(await json(['--env-file', env])).toMatchObject({ sources: [{ name: 'gh', secrets: 1 }] });
    expect(await json([], { RECEIVER_ENV_FILE: env })).toMatchObject({ sources: [{ name: 'gh' }] });
    expect(await json([])).toMatchObject({ sources: [{ name: 'gh' }] });
    const missing = await runInProcess(['check-config', '-c', config, '--env-file', join(tmp.dir, 'nope')], { env: { RECEIVER_ENV_FILE: undefined } });
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain(`Error: --env-file: cannot read the environment file ${join(tmp.dir, 'nope')} (ENOENT)`);
  });
});
