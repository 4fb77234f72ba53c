import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';

/**
 * Subprocess tests run bin/receiver.js, which runs dist/: compile once before the suite.
 * Type errors are reported by `npm run typecheck` (part of `npm test`); tsc still emits.
 */
export default function setup(): void {
  const root = new URL('..', import.meta.url).pathname;
  spawnSync('npx', ['tsc', '-p', 'tsconfig.build.json'], { cwd: root, stdio: 'ignore' });
  if (!existsSync(`${root}dist/cli/main.js`)) throw new Error('npm run build produced no dist/cli/main.js');
}
