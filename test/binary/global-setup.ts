import { spawnSync } from 'node:child_process';

/** The binary project runs the single executable: build it once, before its tests (about 10 s). */
export default function setup(): void {
  const root = new URL('../..', import.meta.url).pathname;
  const t = Date.now();
  const run = spawnSync(process.execPath, ['scripts/build-binary.mjs'], { cwd: root, encoding: 'utf8' });
  if (run.status !== 0) throw new Error(`npm run build:binary failed (exit ${run.status}):\n${run.stdout}${run.stderr}`);
  process.stderr.write(`${run.stdout.trim()} (global setup: ${Date.now() - t} ms)\n`);
}
