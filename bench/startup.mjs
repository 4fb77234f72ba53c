// Start-up benchmark: what one command and one `serve` cost to start, for the bundled
// programs `npm run build` writes to dist/ (scripts/bundle.mjs) against tsc's output alone
// (one file per module), compiled to a temp directory in the same run.
//
//   npm run build && node bench/startup.mjs [--runs 5]
//
// For each: `receiver --version` (wall time, and the process's CPU time, user + system, from
// /proc/PID/stat, last read as it ends; the checkout's `git describe` is a process of its
// own, so only the wall time counts it, and only for the bundled build, which runs from the
// clone), and `receiver serve` with the embedded SQLite, one exec route and logs at info:
// wall time until it logs "listening", then its CPU time (every thread) and RSS 300 ms
// later. Medians of --runs, the two builds alternated.
import { spawn, spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { cpuMs, rssMb } from './proc.mjs';

const { values: args } = parseArgs({ options: { runs: { type: 'string', default: '5' } } });
const RUNS = Number(args.runs);
const ROOT = new URL('..', import.meta.url).pathname;

const work = mkdtempSync(join(tmpdir(), 'receiver-bench-startup-'));
process.on('exit', () => rmSync(work, { recursive: true, force: true }));

// tsc's output alone, beside the same package.json and node_modules.
const modules = join(work, 'modules');
cpSync(join(ROOT, 'bin'), join(modules, 'bin'), { recursive: true });
cpSync(join(ROOT, 'package.json'), join(modules, 'package.json'));
symlinkSync(join(ROOT, 'node_modules'), join(modules, 'node_modules'));
const tsc = spawnSync(join(ROOT, 'node_modules/.bin/tsc'), ['-p', join(ROOT, 'tsconfig.build.json'), '--outDir', join(modules, 'dist')], { encoding: 'utf8' });
if (tsc.status !== 0) throw new Error(`tsc failed:\n${tsc.stdout}${tsc.stderr}`);

const config = join(work, 'receiver.json');
writeFileSync(
  config,
  JSON.stringify({
    database: join(work, 'receiver.db'),
    port: 0,
    log: { level: 'info' },
    sources: { shop: { provider: 'none', deliveryId: '{body.id}' } },
    routes: [{ name: 'crm', source: 'shop', key: '{body.id}', effect: { exec: ['/bin/true'] } }],
  }),
);

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** `--version`: wall time, and CPU time as last read from /proc before the process is reaped. */
async function version(bin) {
  const t = performance.now();
  const c = spawn(process.execPath, [bin, '--version'], { stdio: 'ignore' });
  let cpu = 0;
  await new Promise((resolve) => {
    const poll = setInterval(() => {
      try {
        const state = readFileSync(`/proc/${c.pid}/stat`, 'utf8').split(') ')[1].split(' ')[0];
        cpu = cpuMs(c.pid);
        if (state === 'Z') clearInterval(poll);
      } catch {
        clearInterval(poll);
      }
    }, 2);
    c.on('exit', () => {
      clearInterval(poll);
      resolve();
    });
  });
  return { wallMs: performance.now() - t, cpuMs: cpu };
}

async function serve(bin) {
  const t = performance.now();
  const c = spawn(process.execPath, [bin, 'serve', '-c', config], { stdio: ['ignore', 'pipe', 'pipe'] });
  await new Promise((resolve, reject) => {
    let out = '';
    const look = (d) => {
      out += d;
      if (out.includes('"msg":"listening"')) resolve();
    };
    c.stdout.on('data', look);
    c.stderr.on('data', look);
    c.on('exit', (code) => reject(new Error(`serve exited ${code}:\n${out}`)));
  });
  const wallMs = performance.now() - t;
  await new Promise((r) => setTimeout(r, 300));
  const result = { wallMs, cpuMs: cpuMs(c.pid), rssMb: rssMb(c.pid) };
  c.removeAllListeners('exit');
  c.kill('SIGTERM');
  await new Promise((r) => c.on('exit', r));
  return result;
}

const builds = { bundled: join(ROOT, 'bin/receiver.js'), modules: join(modules, 'bin/receiver.js') };
const results = {};
for (const name of Object.keys(builds)) results[name] = { version: [], serve: [] };
// Alternated, so that a machine whose speed drifts affects both alike.
for (let i = 0; i < RUNS; i++) {
  for (const [name, bin] of Object.entries(builds)) {
    results[name].version.push(await version(bin));
    results[name].serve.push(await serve(bin));
  }
}

const row = (name) => {
  const r = results[name];
  return {
    versionCpuMs: median(r.version.map((x) => x.cpuMs)),
    versionWallMs: median(r.version.map((x) => x.wallMs)),
    serveReadyMs: median(r.serve.map((x) => x.wallMs)),
    serveCpuMs: median(r.serve.map((x) => x.cpuMs)),
    serveRssMb: median(r.serve.map((x) => x.rssMb)),
  };
};
const b = row('bundled');
const m = row('modules');
console.log(`start-up, medians of ${RUNS} (node ${process.version}, ${process.arch})`);
console.log(`${''.padEnd(16)}${'bundled'.padStart(10)}${'modules'.padStart(10)}${'ratio'.padStart(8)}`);
for (const k of Object.keys(b))
  console.log(`${k.padEnd(16)}${b[k].toFixed(0).padStart(10)}${m[k].toFixed(0).padStart(10)}${(b[k] / m[k]).toFixed(2).padStart(8)}`);
