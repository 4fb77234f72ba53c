import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

/**
 * Subprocess tests run bin/receiver.js, which runs dist/: compile before the suite unless
 * dist/ is newer than every source file (as right after `npm run build`, which `npm test`
 * runs first). Type errors are reported by `npm run typecheck` (part of `npm test`); tsc
 * still emits, and the programs are bundled after it (scripts/bundle.mjs).
 */
export default function setup(): void {
  const root = new URL('..', import.meta.url).pathname;
  const main = `${root}dist/cli/main.js`;
  if (!existsSync(main) || newestSource(root) >= statSync(main).mtimeMs) {
    spawnSync('npm', ['run', '-s', 'build'], { cwd: root, stdio: 'ignore' });
  }
  if (!existsSync(main)) throw new Error('npm run build produced no dist/cli/main.js');
}

/** The newest modification time among src/ and the files that configure the build. */
function newestSource(root: string): number {
  let newest = Math.max(
    ...['tsconfig.json', 'tsconfig.build.json', 'package.json', 'scripts/bundle.mjs', 'scripts/ascii.mjs'].map((f) => statSync(join(root, f)).mtimeMs),
  );
  const visit = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) visit(path);
      else newest = Math.max(newest, statSync(path).mtimeMs);
    }
  };
  visit(join(root, 'src'));
  return newest;
}
