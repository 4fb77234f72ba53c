import { execFileSync } from 'node:child_process';

/** Subprocess tests run bin/receiver.js, which runs dist/: compile once before the suite. */
export default function setup(): void {
  execFileSync('npx', ['tsc', '-p', 'tsconfig.build.json'], { cwd: new URL('..', import.meta.url).pathname, stdio: 'inherit' });
}
