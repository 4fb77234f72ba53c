import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { REPO, runCli } from '../helpers.js';

/** `receiver --version`: the package's version, and the commit in a git clone (bin/receiver.js and the executable alike). */
describe('receiver --version', () => {
  const { version } = JSON.parse(readFileSync(`${REPO}package.json`, 'utf8')) as { version: string };

  it('prints the version and the commit, exit 0, nothing on stderr', async () => {
    const r = await runCli(['--version']);
    expect(r.code).toBe(0);
    expect(r.stderr).toBe('');
    if (!existsSync(`${REPO}.git`)) {
      expect(r.stdout).toBe(`${version}\n`);
      return;
    }
    const commit = execFileSync('git', ['describe', '--always', '--dirty', '--abbrev=12', '--exclude=*'], { cwd: REPO }).toString().trim();
    expect(r.stdout).toBe(`${version} (commit ${commit})\n`);
  });

  it('-V is the same', async () => {
    const a = await runCli(['-V']);
    const b = await runCli(['--version']);
    expect(a).toEqual(b);
  });
});
