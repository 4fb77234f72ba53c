import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { userInfo } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { REPO, tempDir } from '../helpers.js';

/**
 * The install path of docs/operations.md as a newcomer follows it: its commands, the env
 * file of step 2 and contrib/'s example configuration must agree, and the commands that
 * need neither root, systemd nor the network run in a scratch directory up to a passing
 * check-config.
 */

const operations = readFileSync(join(REPO, 'docs/operations.md'), 'utf8');
/** Every document whose commands an operator copies. */
const documents = ['README.md', 'docs/operations.md', 'docs/architecture.md', 'bench/README.md'].map((f) => readFileSync(join(REPO, f), 'utf8'));
const example = JSON.parse(readFileSync(join(REPO, 'contrib/receiver.shop-example.json'), 'utf8')) as unknown;

/** The Install section of docs/operations.md, up to the next heading. */
function installSection(): string {
  const start = operations.indexOf('\n## Install\n');
  expect(start).toBeGreaterThan(0);
  return operations.slice(start, operations.indexOf('\n## ', start + 1));
}

/** The indented shell lines between the install-commands markers, unindented. */
function installCommands(): string[] {
  const m = /<!-- install-commands: begin[^>]*-->\n([\s\S]*?)<!-- install-commands: end -->/.exec(installSection());
  expect(m).not.toBeNull();
  return m![1]!
    .split('\n')
    .filter((l) => l.startsWith('    '))
    .map((l) => l.trim());
}

/** Step 2's heredoc that writes /etc/receiver/env, as a shell command. */
function envFileCommand(): string {
  const m = /^( +)cat > \/etc\/receiver\/env <<'EOF'\n([\s\S]*?)^\1EOF$/m.exec(installSection());
  expect(m).not.toBeNull();
  const indent = m![1]!;
  return `cat > /etc/receiver/env <<'EOF'\n${m![2]!
    .split('\n')
    .map((l) => l.slice(indent.length))
    .join('\n')}EOF\n`;
}

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

  it('the install commands, the env file and the example configuration give a passing check-config through contrib/receiver.sh, in a scratch root', () => {
    const root = join(tmp.dir, 'root');
    mkdirSync(root, { recursive: true });
    chmodSync(tmp.dir, 0o755);
    // What a Debian system has already.
    for (const d of ['etc/systemd/system', 'etc/cron.d', 'usr/local/bin', 'var/lib', 'var/backups']) mkdirSync(join(root, d), { recursive: true });
    // The documented paths, moved under the scratch root (the clone is this repository).
    const moved = (text: string) =>
      text.replace(/(^|[\s'"=])\/(etc|var|usr|srv)\//g, `$1${root}/$2/`).replace(/(^|[\s'"=])\/opt\/receiver\b/g, `$1${REPO.replace(/\/$/, '')}`);
    // Neither root, the receiver user, systemd nor the network here: ownership options go,
    // and the commands that need those are skipped (their effect is not what is checked).
    const skipped = /^(apt-get|useradd|git clone|cd \/opt\/receiver|systemctl)\b/;
    const sh = (command: string) => execFileSync('/bin/sh', ['-ec', command], { cwd: REPO, stdio: ['ignore', 'pipe', 'pipe'] });
    for (const c of installCommands()) {
      if (skipped.test(c)) continue;
      sh(moved(c.replace(/ -[og] \w+/g, '').replace(/\s+#.*$/, '')));
    }
    sh(moved(envFileCommand()));

    // Step 1, the operator's part: the example's programs and module are the operator's own;
    // here, stubs where the (moved) configuration says.
    const configFile = join(root, 'etc/receiver/receiver.config.json');
    const config = JSON.parse(moved(readFileSync(configFile, 'utf8'))) as { routes: { effect: { exec?: string[]; module?: string } }[] };
    writeFileSync(configFile, JSON.stringify(config, null, 2));
    for (const r of config.routes) {
      const program = r.effect.exec?.[0];
      if (program !== undefined) {
        mkdirSync(dirname(program), { recursive: true });
        writeFileSync(program, '#!/bin/sh\nexit 0\n', { mode: 0o755 });
      }
      if (r.effect.module !== undefined) {
        const file = join(dirname(configFile), r.effect.module);
        mkdirSync(dirname(file), { recursive: true });
        writeFileSync(file, 'module.exports = async function (event, ctx) {};\n');
      }
    }

    // Step 3: `receiver check-config`, the installed wrapper, as the service user (here: this user).
    const receiver = (args: string[]) =>
      spawnSync(join(root, 'usr/local/bin/receiver'), args, {
        env: {
          PATH: `${dirname(process.execPath)}:/usr/bin:/bin`,
          RECEIVER_USER: userInfo().username,
          RECEIVER_APP: REPO,
          RECEIVER_ENV_FILE: join(root, 'etc/receiver/env'),
          RECEIVER_HOME: join(root, 'var/lib/receiver'),
          RECEIVER_CONFIG: configFile,
        },
        encoding: 'utf8',
      });
    const check = receiver(['check-config']);
    expect(check.stderr).toBe('');
    expect(check.status).toBe(0);
    expect(check.stdout).toContain(`database: ${root}/var/lib/receiver/receiver.db`);
    for (const source of ['stripe', 'github', 'polar', 'shop']) expect(check.stdout).toMatch(new RegExp(`^ {2}${source}: `, 'm'));
    expect(check.stdout).toMatch(/^ {2}github: github, 2 secret\(s\)/m);

    // What the newcomer met: without the state directory, the wrapper cannot even start.
    rmSync(join(root, 'var/lib/receiver'), { recursive: true });
    const without = receiver(['check-config']);
    expect(without.status).not.toBe(0);
    expect(without.stderr).toMatch(/can't cd to .*var\/lib\/receiver|No such file or directory/);
  });
});
