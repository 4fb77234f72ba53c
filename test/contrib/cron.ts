import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * Runs the jobs of a cron.d file as cron would: its variables (SHELL first) set, the
 * command given to SHELL -c. `logger` is a stub that appends "<tag>: <line>" to a file, so
 * a test sees what would reach the journal; `moved` moves the documented paths under a
 * scratch root, and `path` replaces the file's PATH (after the stub).
 */
export function runCronFile(text: string, moved: (s: string) => string, o: { tmp: string; path: string[]; env: NodeJS.ProcessEnv }) {
  const vars: Record<string, string> = {};
  const jobs: string[] = [];
  for (const line of text.split('\n')) {
    if (line.trim() === '' || line.startsWith('#')) continue;
    const v = /^([A-Z_]+)=(.*)$/.exec(line);
    if (v !== null) vars[v[1]!] = moved(v[2]!);
    // minute hour day month weekday user command
    else jobs.push(/^(?:\S+\s+){6}(.*)$/.exec(line)![1]!);
  }
  const bin = join(o.tmp, 'bin');
  mkdirSync(bin, { recursive: true });
  writeFileSync(join(bin, 'logger'), '#!/bin/sh\n[ "$1" = -t ] && tag=$2\nwhile IFS= read -r line; do printf \'%s: %s\\n\' "$tag" "$line" >> "$LOGGER_FILE"; done\n', {
    mode: 0o755,
  });
  const logFile = join(o.tmp, 'logged');
  return {
    /** Runs the job whose output goes to `logger -t <tag>`: its exit status, and what it logged. */
    run(tag: string): { status: number | null; logged: string } {
      const command = jobs.find((j) => j.includes(`logger -t ${tag}`));
      if (command === undefined) throw new Error(`no cron line logs as ${tag}`);
      rmSync(logFile, { force: true });
      const shell = vars.SHELL ?? '/bin/sh';
      const r = spawnSync(shell, ['-c', moved(command)], {
        env: { ...vars, ...o.env, PATH: [bin, ...o.path].join(':'), LOGGER_FILE: logFile },
        encoding: 'utf8',
      });
      let logged = '';
      try {
        logged = readFileSync(logFile, 'utf8');
      } catch {
        // nothing logged
      }
      return { status: r.status, logged: logged + r.stdout + r.stderr };
    },
  };
}
