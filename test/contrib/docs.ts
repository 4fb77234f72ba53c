import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { REPO } from '../helpers.js';

/**
 * docs/operations.md's install commands as the tests run them in a scratch root: the
 * blocks between `<!-- <name>: begin -->` and `<!-- <name>: end -->`, step 2's env file,
 * the documented paths moved under the root, and step 1's stand-ins for the example
 * configuration's programs and module.
 */

export const operations = readFileSync(join(REPO, 'docs/operations.md'), 'utf8');

/** A `## ` section of docs/operations.md, up to the next one. */
export function section(heading: string): string {
  const start = operations.indexOf(`\n## ${heading}\n`);
  if (start < 0) throw new Error(`docs/operations.md has no "## ${heading}"`);
  const end = operations.indexOf('\n## ', start + 1);
  return operations.slice(start, end < 0 ? undefined : end);
}

/** The indented shell lines between the `name` markers, unindented. */
export function commandBlock(name: string, heading: string): string[] {
  const m = new RegExp(`<!-- ${name}: begin[^>]*-->\\n([\\s\\S]*?)<!-- ${name}: end -->`).exec(section(heading));
  if (m === null) throw new Error(`no ${name} block in "## ${heading}"`);
  return m[1]!
    .split('\n')
    .filter((l) => l.startsWith('    '))
    .map((l) => l.trim());
}

/** Step 2's heredoc that writes /etc/receiver/env, as a shell command. */
export function envFileCommand(): string {
  const m = /^( +)cat > \/etc\/receiver\/env <<'EOF'\n([\s\S]*?)^\1EOF$/m.exec(section('Install'));
  if (m === null) throw new Error('no env file heredoc in "## Install"');
  const indent = m[1]!;
  return `cat > /etc/receiver/env <<'EOF'\n${m[2]!
    .split('\n')
    .map((l) => l.slice(indent.length))
    .join('\n')}EOF\n`;
}

/** The documented paths moved under `root`; /opt/receiver (the clone) is `clone` when given. */
export function mover(root: string, clone?: string): (text: string) => string {
  return (text) => {
    const moved = text.replace(/(^|[\s'"=])\/(etc|var|usr|srv)\//g, `$1${root}/$2/`);
    return clone === undefined ? moved : moved.replace(/(^|[\s'"=])\/opt\/receiver\b/g, `$1${clone.replace(/\/$/, '')}`);
  };
}

/** What a Debian system has already, under `root`. */
export function debianRoot(root: string): void {
  for (const d of ['etc/systemd/system', 'etc/cron.d', 'usr/local/bin', 'usr/local/lib', 'var/lib', 'var/backups']) mkdirSync(join(root, d), { recursive: true });
}

/**
 * Runs documented commands, moved, in `cwd`. Neither root, the receiver user, systemd nor
 * the network here: ownership options go, comments go, and the commands that need those
 * (or a clone's directory) are skipped; `edit` may change a command further.
 */
export function runCommands(commands: string[], moved: (s: string) => string, o: { cwd: string; env?: NodeJS.ProcessEnv; edit?: (c: string) => string }): void {
  const skipped = /^(apt-get|useradd|git clone|cd \/opt\/receiver|systemctl)\b/;
  for (const c of commands) {
    if (skipped.test(c)) continue;
    const command = moved(c.replace(/ -[og] \w+/g, '').replace(/\s+#.*$/, ''));
    execFileSync('/bin/sh', ['-ec', o.edit?.(command) ?? command], { cwd: o.cwd, env: o.env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'] });
  }
}

/**
 * Step 1, the operator's part: the example's programs and module are the operator's own;
 * here stand-ins (exit 0, a handler doing nothing) where the configuration, its paths
 * moved, says. Returns the moved configuration's file.
 */
export function standIns(configFile: string, moved: (s: string) => string): void {
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
}
