#!/usr/bin/env node
/**
 * `npm test`'s static checks, on two cores at once: eslint (the longest, with types) beside
 * typecheck and prettier --check, which run one after the other. The build is not among
 * them: `npm ci` builds (prepare), and the suite's global setup builds again when src/ is
 * newer than dist/; typecheck reports what would fail it. Each group's output
 * is printed whole when it ends (not interleaved); the exit status is 1 if any check failed.
 * The suite (vitest) runs after this, when every check passed.
 */
import { spawn } from 'node:child_process';

const groups = [['lint'], ['typecheck', 'format:check']];

/** Runs `npm run <script>`, collecting its output; resolves with its exit code and output. */
function run(script) {
  return new Promise((resolve) => {
    const child = spawn('npm', ['run', script], { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (d) => (output += d));
    child.stderr.on('data', (d) => (output += d));
    child.on('close', (code) => resolve({ code: code ?? 1, output }));
  });
}

const results = await Promise.all(
  groups.map(async (scripts) => {
    for (const script of scripts) {
      const started = Date.now();
      const { code, output } = await run(script);
      process.stdout.write(
        `${output.trimEnd()}\n[check] ${script}: ${code === 0 ? 'ok' : `failed (exit ${code})`} in ${((Date.now() - started) / 1000).toFixed(1)} s\n`,
      );
      if (code !== 0) return false;
    }
    return true;
  }),
);
process.exit(results.every(Boolean) ? 0 : 1);
