import { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { forExecutable } from '../../src/cli/contrib.js';
import { REPO, runInProcess, tempDir } from '../helpers.js';

/**
 * `receiver contrib`: contrib/'s files from the program. From a clone as they are; from the
 * single executable naming it (forExecutable; test/contrib/one-file-install.test.ts runs
 * the executable itself).
 */
describe('receiver contrib', () => {
  const tmp = tempDir();
  afterAll(tmp.cleanup);
  const contrib = (name: string) => readFileSync(join(REPO, 'contrib', name), 'utf8');
  const names = readdirSync(join(REPO, 'contrib')).sort();

  it('list names every file of contrib/, and where install puts the three it installs; print gives one as it is', async () => {
    const list = await runInProcess(['contrib', 'list']);
    expect(list.code).toBe(0);
    expect(list.stdout.split('\n').filter((l) => l !== '')).toEqual(
      names.map(
        (n) =>
          n +
          ({
            'receiver.service': '  -> /etc/systemd/system/receiver.service',
            'receiver.cron': '  -> /etc/cron.d/receiver',
            'receiver.sh': '  -> /usr/local/bin/receiver',
          }[n] ?? ''),
      ),
    );
    for (const name of names) {
      const r = await runInProcess(['contrib', 'print', name]);
      expect(r.stdout).toBe(contrib(name));
    }
    const unknown = await runInProcess(['contrib', 'print', 'nginx.conf']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/^Error: no file nginx\.conf in contrib\/\nTry: receiver contrib list names them: receiver-purge\.service, /);
  });

  it('for the single executable, every file that runs the clone runs the executable instead, with no Node option; nothing else changes', () => {
    const program = '/usr/local/lib/receiver/receiver';
    for (const name of names) {
      const out = forExecutable(name, contrib(name), program);
      // No line but comments still runs node or the clone (the wrapper's RECEIVER_APP, the
      // clone's directory, stays: set, passed on, unused).
      for (const line of out.split('\n').filter((l) => !l.trimStart().startsWith('#') && !l.startsWith('RECEIVER_APP='))) {
        expect(line).not.toMatch(/\bnode\b|bin\/receiver\.js|\/opt\/receiver/);
      }
      // Only the lines that named the clone's program differ (and the unit's Documentation=).
      const before = contrib(name)
        .split('\n')
        .filter((l) => !/bin\/receiver\.js/.test(l) && !l.startsWith('Documentation='));
      expect(out.split('\n').filter((l) => !l.includes(program))).toEqual(before);
    }
    expect(forExecutable('receiver.service', contrib('receiver.service'), program)).toMatch(/^ExecStart=\/usr\/local\/lib\/receiver\/receiver serve$/m);
    expect(forExecutable('receiver-purge.service', contrib('receiver-purge.service'), program)).toMatch(
      /^ExecStart=\/usr\/local\/lib\/receiver\/receiver purge --days 30$/m,
    );
    expect(forExecutable('receiver.sh', contrib('receiver.sh'), program)).toMatch(/^exec \/usr\/local\/lib\/receiver\/receiver "\$@"$/m);
    // A path a unit or a crontab would take apart is refused.
    expect(() => forExecutable('receiver.service', contrib('receiver.service'), '/opt/my receiver/receiver')).toThrow(
      /characters a unit or a crontab would take apart/,
    );
    // A file whose program line the rewrite does not know is an error, not a file that needs a clone.
    expect(() => forExecutable('x.service', 'ExecStart=/usr/local/bin/node /srv/receiver/bin/receiver.js serve\n', program)).toThrow(/still runs the clone/);
  });

  it('install writes the unit, the cron file and the wrapper under --dir with their modes; again: unchanged; a file with other contents is refused, nothing written, unless --force', async () => {
    const root = join(tmp.dir, 'root');
    const r = await runInProcess(['contrib', 'install', '--dir', root]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const files = {
      'etc/systemd/system/receiver.service': ['receiver.service', 0o644],
      'etc/cron.d/receiver': ['receiver.cron', 0o644],
      'usr/local/bin/receiver': ['receiver.sh', 0o755],
    } as const;
    for (const [path, [name, mode]] of Object.entries(files)) {
      expect(r.stdout).toContain(`wrote ${join(root, path)}`);
      expect(readFileSync(join(root, path), 'utf8')).toBe(contrib(name));
      expect(statSync(join(root, path)).mode & 0o777).toBe(mode);
    }
    const again = await runInProcess(['contrib', 'install', '--dir', root]);
    expect(again.stdout).toBe(
      `${Object.keys(files)
        .map((p) => `unchanged ${join(root, p)}`)
        .join('\n')}\n`,
    );

    writeFileSync(join(root, 'etc/cron.d/receiver'), '# my own\n');
    const refused = await runInProcess(['contrib', 'install', '--dir', root]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toBe(
      `Error: ${join(root, 'etc/cron.d/receiver')} exists with other contents; nothing was written\nTry: compare with \`receiver contrib print receiver.cron\`; keep your own settings in a drop-in (systemctl edit receiver) and pass --force to replace it\n`,
    );
    expect(readFileSync(join(root, 'etc/cron.d/receiver'), 'utf8')).toBe('# my own\n');
    const forced = await runInProcess(['contrib', 'install', '--dir', root, '--force']);
    expect(forced.code).toBe(0);
    expect(forced.stdout).toContain(`replaced ${join(root, 'etc/cron.d/receiver')}`);
    expect(readFileSync(join(root, 'etc/cron.d/receiver'), 'utf8')).toBe(contrib('receiver.cron'));
    // No temporary file is left anywhere.
    for (const dir of ['etc/systemd/system', 'etc/cron.d', 'usr/local/bin']) expect(readdirSync(join(root, dir)).filter((f) => f.endsWith('.tmp'))).toEqual([]);
  });

  it('install into a directory it cannot write: Error naming the file, exit 1', async () => {
    const root = join(tmp.dir, 'blocked');
    mkdirSync(join(root, 'etc'), { recursive: true });
    writeFileSync(join(root, 'etc/systemd'), 'a file where a directory should be');
    const r = await runInProcess(['contrib', 'install', '--dir', root]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(new RegExp(`^Error: cannot write ${join(root, 'etc/systemd/system/receiver.service')}: (ENOTDIR|EEXIST)`));
  });
});
