import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { userInfo } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { openSqlite } from '../../src/store/sqlite/open.js';
import { REPO, startServe, tempDir } from '../helpers.js';
import { runCronFile } from './cron.js';
import { commandBlock, debianRoot, envFileCommand, mover, runCommands, standIns } from './docs.js';

/**
 * The install path of docs/operations.md as a newcomer follows it: its commands, the env
 * file of step 2 and contrib/'s example configuration must agree, and the commands that
 * need neither root, systemd nor the network run in a scratch directory up to a passing
 * check-config.
 */

/** Every document whose commands an operator copies. */
const documents = ['README.md', 'docs/operations.md', 'docs/architecture.md', 'bench/README.md'].map((f) => readFileSync(join(REPO, f), 'utf8'));
const example = JSON.parse(readFileSync(join(REPO, 'contrib/receiver.shop-example.json'), 'utf8')) as unknown;
const installCommands = () => commandBlock('install-commands', 'Install');

/** NAME of every NAME=value line of the env file. */
function envNames(): string[] {
  return envFileCommand()
    .split('\n')
    .slice(1, -2)
    .map((l) => /^([A-Z_][A-Z0-9_]*)=/.exec(l)?.[1] ?? `(not NAME=value: ${l})`);
}

/** Every string in a JSON value. */
function strings(value: unknown): string[] {
  if (typeof value === 'string') return [value];
  if (value === null || typeof value !== 'object') return [];
  return Object.values(value).flatMap(strings);
}

describe('the install path of docs/operations.md and contrib/', () => {
  const tmp = tempDir();
  afterAll(tmp.cleanup);

  it("the env file of step 2 names exactly the example configuration's env: secrets, and the example references none by file:", () => {
    const refs = strings(example)
      .filter((s) => s.startsWith('env:'))
      .map((s) => s.slice(4));
    expect(envNames().sort()).toEqual([...new Set(refs)].sort());
    expect(strings(example).filter((s) => s.startsWith('file:'))).toEqual([]);
  });

  it('creates the state directory, owned by the service user, before anything runs in it; installs only files that exist', () => {
    const commands = installCommands();
    const useradd = commands.findIndex((c) => c.startsWith('useradd ') && c.includes('--home-dir /var/lib/receiver'));
    const stateDir = commands.findIndex((c) => /^install -d .*-o receiver -g receiver \/var\/lib\/receiver(\s|$)/.test(c));
    expect(useradd).toBeGreaterThanOrEqual(0);
    expect(stateDir).toBeGreaterThan(useradd);
    // The build tools npm ci needs when it compiles the SQLite addon.
    expect(commands.some((c) => /apt-get install .*build-essential.*python3/.test(c))).toBe(true);
    for (const c of commands) for (const [, file] of c.matchAll(/\b(contrib\/[\w.-]+)/g)) expect(existsSync(join(REPO, file!)), file).toBe(true);
  });

  it('the operator recipes use neither sudo (absent from a minimal Debian) nor the sqlite3 program', () => {
    const code = documents.flatMap((d) => d.split('\n')).filter((l) => /^ {4,}\S/.test(l));
    expect(code.filter((l) => /\bsudo\b/.test(l))).toEqual([]);
    expect(code.filter((l) => /(^|[\s;&|(])sqlite3\s/.test(l))).toEqual([]);
    for (const f of ['receiver.cron', 'receiver.service', 'receiver-purge.service']) {
      expect(readFileSync(join(REPO, 'contrib', f), 'utf8')).not.toMatch(/\bsudo\b|\bsqlite3 /);
    }
  });

  /**
   * The install commands, the env file of step 2 and step 1's stubs for the example's
   * programs and module, run in a scratch root; the installed wrapper, as the service user
   * (here: this user), with the paths moved under the root.
   */
  function install(name: string) {
    const root = join(tmp.dir, name);
    mkdirSync(root, { recursive: true });
    chmodSync(tmp.dir, 0o755);
    debianRoot(root);
    // The clone is this repository.
    const moved = mover(root, REPO);
    runCommands(installCommands(), moved, { cwd: REPO });
    runCommands([envFileCommand()], moved, { cwd: REPO });
    const configFile = join(root, 'etc/receiver/receiver.config.json');
    standIns(configFile, moved);
    /** The wrapper's settings, moved: as the service user, with the service's files. */
    const wrapperEnv = {
      RECEIVER_USER: userInfo().username,
      RECEIVER_APP: REPO,
      RECEIVER_ENV_FILE: join(root, 'etc/receiver/env'),
      RECEIVER_HOME: join(root, 'var/lib/receiver'),
      RECEIVER_CONFIG: configFile,
    };
    const receiver = (args: string[]) =>
      spawnSync(join(root, 'usr/local/bin/receiver'), args, { env: { PATH: `${dirname(process.execPath)}:/usr/bin:/bin`, ...wrapperEnv }, encoding: 'utf8' });
    return { root, moved, configFile, wrapperEnv, receiver };
  }

  it('the install commands, the env file and the example configuration give a passing check-config through contrib/receiver.sh, in a scratch root', () => {
    const { root, receiver } = install('root');
    // Step 3: `receiver check-config`, the installed wrapper. No warning either: the
    // documented commands make the env file readable by root and the service only.
    const check = receiver(['check-config']);
    expect(check.stderr).toBe('');
    expect(check.status).toBe(0);
    expect(check.stdout).toContain(`database: ${root}/var/lib/receiver/receiver.db`);
    for (const source of ['stripe', 'github', 'polar', 'shop']) expect(check.stdout).toMatch(new RegExp(`^ {2}${source}: `, 'm'));
    expect(check.stdout).toMatch(/^ {2}github: github, 2 secret\(s\)/m);
    expect(statSync(join(root, "etc/receiver/env")).mode & 0o777).toBe(0o600);

    // What the newcomer met: without the state directory, the wrapper cannot even start.
    rmSync(join(root, 'var/lib/receiver'), { recursive: true });
    const without = receiver(['check-config']);
    expect(without.status).not.toBe(0);
    expect(without.stderr).toMatch(/can't cd to .*var\/lib\/receiver|No such file or directory/);
  });

  it("serve started with the example configuration writes its pid file; `receiver reload` through the wrapper finds serve by it and prints serve's outcome", async () => {
    const { root, configFile, wrapperEnv, receiver } = install('reload');
    const pidFile = join(root, 'var/lib/receiver/receiver.pid');
    // As the unit runs it: in the state directory, reading the environment file itself.
    const serve = await startServe(configFile, { env: wrapperEnv, cwd: join(root, 'var/lib/receiver') });
    try {
      expect(readFileSync(pidFile, 'utf8')).toBe(`${serve.child.pid}\n`);
      const reloaded = receiver(['reload']);
      expect(reloaded.stderr).toBe('');
      expect(reloaded.stdout).toBe(`serve ${serve.child.pid} reloaded ${configFile}: nothing changed\n`);
      expect(reloaded.status).toBe(0);
    } finally {
      expect(await serve.stop()).toBe(0);
    }
    expect(existsSync(pidFile)).toBe(false);
  }, 60_000);

  it("the cron lines, as installed: a failed purge or backup is the line's exit status and its Error line reaches logger; a good one exits 0", () => {
    const { root, moved, wrapperEnv } = install('cron');
    const cron = runCronFile(readFileSync(join(root, 'etc/cron.d/receiver'), 'utf8'), moved, {
      tmp: join(tmp.dir, 'cron-stubs'),
      path: [join(root, 'usr/local/bin'), dirname(process.execPath), '/usr/bin', '/bin'],
      env: wrapperEnv,
    });
    // No database yet (serve has never run; the commands never create one): both fail.
    for (const job of ['receiver-purge', 'receiver-backup']) {
      const r = cron.run(job);
      expect(r.status, `${job}: ${r.logged}`).not.toBe(0);
      expect(r.logged).toMatch(new RegExp(`^${job}: Error: no database at .*receiver\\.db$`, 'm'));
    }
    openSqlite(join(root, 'var/lib/receiver/receiver.db'), { busyTimeoutMs: 0 }).close();
    const purge = cron.run('receiver-purge');
    expect(purge.status, purge.logged).toBe(0);
    expect(purge.logged).toMatch(/^receiver-purge: Purged 0 done event/m);
    const backup = cron.run('receiver-backup');
    expect(backup.status, backup.logged).toBe(0);
    expect(backup.logged).toMatch(/^receiver-backup: wrote .*\/var\/backups\/receiver\/receiver-\d{4}-\d{2}-\d{2}\.db \(/m);
  });
});
