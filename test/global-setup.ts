import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';

declare module 'vitest' {
  export interface ProvidedContext {
    /** A directory the run's workers share, removed when the run ends (see setup). */
    runDir: string;
  }
}

/**
 * Subprocess tests run bin/receiver.js, which runs dist/: compile before the suite unless
 * dist/ is newer than every source file (as right after `npm run build`, which `npm test`
 * runs first). Type errors are reported by `npm run typecheck` (part of `npm test`); tsc
 * still emits, and the programs are bundled after it (scripts/bundle.mjs).
 */
export default function setup(project: TestProject): () => void {
  const root = new URL('..', import.meta.url).pathname;
  const main = `${root}dist/cli/main.js`;
  if (!existsSync(main) || newestSource(root) >= statSync(main).mtimeMs) {
    spawnSync('npm', ['run', '-s', 'build'], { cwd: root, stdio: 'ignore' });
  }
  if (!existsSync(main)) throw new Error('npm run build produced no dist/cli/main.js');
  // What a worker makes once and keeps for the run (the copy of the CLI that nobody runs, 60
  // MB) goes here: a worker's exit handlers do not run when vitest ends it, and each run left
  // its copies in the temp directory. Readable by others, as those copies must be.
  const runDir = mkdtempSync(join(tmpdir(), 'receiver-test-run-'));
  chmodSync(runDir, 0o755);
  project.provide('runDir', runDir);
  return () => rmSync(runDir, { recursive: true, force: true });
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
