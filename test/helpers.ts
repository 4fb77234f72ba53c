import { serve, type ServerType } from '@hono/node-server';
import { chmodSync, cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { inject } from 'vitest';
import { resolveConfig, type Config } from '../src/config/load.js';
import { run } from '../src/cli/main.js';
import { createApp, type AppOptions } from '../src/http/app.js';
import { SqliteStore } from '../src/store/sqlite/index.js';
import type { ClaimedUnit, DrainStore } from '../src/store/drain-types.js';

export const REPO = new URL('..', import.meta.url).pathname;
export const BIN = join(REPO, 'bin/receiver.js');

/**
 * RECEIVER_TEST_BINARY: the single executable (npm run build:binary) that runCli and
 * startServe run instead of `node bin/receiver.js`, from a directory with no node_modules
 * and with a PATH on which there is no node (test/binary/ runs a subset of the suite so).
 */
export const BINARY = process.env.RECEIVER_TEST_BINARY ? resolve(REPO, process.env.RECEIVER_TEST_BINARY) : undefined;

let sandbox: { cwd: string; env: NodeJS.ProcessEnv } | undefined;

/** The binary's surroundings: an empty working directory, and the system's tools on PATH except node. */
export function binarySandbox(): { cwd: string; env: NodeJS.ProcessEnv } {
  if (sandbox !== undefined) return sandbox;
  const dir = mkdtempSync(join(tmpdir(), 'receiver-binary-'));
  const bin = join(dir, 'bin');
  mkdirSync(bin);
  mkdirSync(join(dir, 'work'));
  const seen = new Set<string>();
  for (const from of ['/usr/local/bin', '/usr/bin', '/bin', '/usr/sbin', '/sbin']) {
    let names: string[];
    try {
      names = readdirSync(from);
    } catch {
      continue;
    }
    for (const name of names) {
      if (seen.has(name) || /^(node|nodejs|npm|npx|corepack)$/.test(name)) continue;
      seen.add(name);
      symlinkSync(join(from, name), join(bin, name));
    }
  }
  process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
  // XDG_CACHE_HOME: the addon is written below the sandbox, not into this user's ~/.cache.
  sandbox = { cwd: join(dir, 'work'), env: { PATH: bin, XDG_CACHE_HOME: join(dir, 'cache') } };
  return sandbox;
}

/** The command, arguments, working directory and environment that run `receiver <args>` (bin/receiver.js, or RECEIVER_TEST_BINARY). */
export function receiverCommand(
  args: string[],
  options: { env?: NodeJS.ProcessEnv; cwd?: string },
): { file: string; args: string[]; cwd: string; env: NodeJS.ProcessEnv } {
  if (BINARY === undefined) return { file: process.execPath, args: [BIN, ...args], cwd: options.cwd ?? REPO, env: { ...process.env, ...options.env } };
  const box = binarySandbox();
  return { file: BINARY, args, cwd: options.cwd ?? box.cwd, env: { ...process.env, ...box.env, ...options.env } };
}

/** The unprivileged user the permission tests run the CLI as (root only). */
export const NOBODY = 'nobody';

/** `cmd args...` as `nobody` (setpriv), or undefined when this process cannot switch user. */
function asNobodyArgs(cmd: string[]): string[] {
  return ['--reuid=nobody', '--regid=nogroup', '--clear-groups', ...cmd];
}

/** Whether `nobody` can read every path (setpriv runs `test` as that user). */
function nobodyReaches(paths: string[]): boolean {
  const tests = paths.flatMap((p, i) => [...(i > 0 ? ['-a'] : []), '-r', p]);
  return spawnSync('setpriv', asNobodyArgs(['test', ...tests])).status === 0;
}

/** The runtime packages bin/receiver.js loads: package.json's dependencies and theirs, as node resolves them. */
function runtimePackages(): string[] {
  const found = new Set<string>();
  const visit = (from: string, names: string[]) => {
    for (const name of names) {
      // Node's lookup: <dir>/node_modules/<name>, from the requiring package up to the root.
      let dir = from;
      let at: string | undefined;
      for (;;) {
        const candidate = join(dir, 'node_modules', name);
        if (existsSync(join(candidate, 'package.json'))) {
          at = candidate;
          break;
        }
        if (resolve(dir) === resolve(REPO)) break;
        dir = dirname(dir);
      }
      if (at === undefined || found.has(at)) continue;
      found.add(at);
      const pkg = JSON.parse(readFileSync(join(at, 'package.json'), 'utf8')) as { dependencies?: object; optionalDependencies?: object };
      visit(at, Object.keys({ ...pkg.dependencies, ...pkg.optionalDependencies }));
    }
  };
  const root = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as { dependencies?: object };
  visit(REPO, Object.keys(root.dependencies ?? {}));
  return [...found];
}

let nobodyBin: { bin: string } | { skip: string } | undefined;

/**
 * bin/receiver.js as `nobody` can run it, for the tests that run the CLI as an unprivileged
 * service user (root only): the checkout's own when `nobody` can reach it, else a copy of
 * bin/, dist/, package.json and the runtime packages in a temp directory every user can
 * enter (a checkout below root's 0700 home is out of its reach). `skip` says why it cannot
 * be done here; a test reports itself skipped with it (`ctx.skip(reason)`).
 */
export function receiverForNobody(): { bin: string } | { skip: string } {
  if (nobodyBin !== undefined) return nobodyBin;
  nobodyBin = findReceiverForNobody();
  return nobodyBin;
}

function findReceiverForNobody(): { bin: string } | { skip: string } {
  if (process.getuid?.() !== 0) return { skip: 'running the CLI as nobody needs root (this run is not root)' };
  if (spawnSync('setpriv', ['--version']).status !== 0) return { skip: 'running the CLI as nobody needs util-linux setpriv, not found' };
  if (!nobodyReaches([process.execPath])) return { skip: `nobody cannot run node at ${process.execPath}` };
  if (nobodyReaches([BIN, join(REPO, 'dist/cli/main.js'), join(REPO, 'node_modules/better-sqlite3/package.json')])) return { bin: BIN };
  // In the run's directory, which the global setup removes when the run ends.
  const dir = mkdtempSync(join(inject('runDir'), 'receiver-as-nobody-'));
  chmodSync(dir, 0o755);
  for (const part of ['bin', 'dist', 'package.json', ...runtimePackages().map((p) => relative(REPO, p))]) {
    // Not the single executable or its build directory (dist/receiver-*): only what node runs.
    cpSync(join(REPO, part), join(dir, part), { recursive: true, filter: (from) => !/^dist\/(receiver-|binary-build)/.test(relative(REPO, from)) });
  }
  const bin = join(dir, 'bin/receiver.js');
  if (!nobodyReaches([bin, join(dir, 'dist/cli/main.js')]))
    return { skip: `nobody cannot reach a copy of the CLI in ${dir} (is ${tmpdir()} closed to other users?)` };
  return { bin };
}

/** receiverForNobody's bin/receiver.js; else the test ends here, reported as skipped with the reason. */
export function receiverForNobodyOrSkip(ctx: { skip: (note: string) => never }): string {
  const receiver = receiverForNobody();
  if ('skip' in receiver) return ctx.skip(receiver.skip);
  return receiver.bin;
}

/** setpriv's arguments that run `receiver <args>` as `nobody` with `bin` (from receiverForNobody). */
export function nobodyCommand(bin: string, args: string[]): { file: string; args: string[] } {
  return { file: 'setpriv', args: asNobodyArgs([process.execPath, bin, ...args]) };
}

/** A fresh temp directory, removed by the returned cleanup. */
export function tempDir(prefix = 'receiver-test-'): { dir: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** A resolved config from a plain object (no file on disk), database in `dir`. */
export function makeConfig(json: Record<string, unknown>, dir: string, env: NodeJS.ProcessEnv = {}): Config {
  return resolveConfig({ database: join(dir, 'receiver.db'), ...json }, join(dir, 'receiver.config.json'), {}, env);
}

export function writeConfig(dir: string, json: Record<string, unknown>): string {
  const file = join(dir, 'receiver.config.json');
  writeFileSync(file, JSON.stringify({ database: join(dir, 'receiver.db'), ...json }, null, 2));
  return file;
}

export interface RunningApp {
  url: string;
  store: SqliteStore;
  config: Config;
  close: () => Promise<void>;
}

/** The real app on a real HTTP server on port 0, on a real SQLite file. */
export async function startApp(config: Config, extra: Partial<AppOptions> = {}): Promise<RunningApp> {
  // The same store as `serve`: ingest commits in its worker thread.
  const store = new SqliteStore(config.database, { busyTimeoutMs: config.busyTimeoutMs, blockingBusyMs: 5, ingestThread: true });
  await store.ready();
  const app = createApp({ sources: config.sources, store, maxBodyBytes: config.maxBodyBytes, ...extra });
  const server: ServerType = await new Promise((resolve) => {
    const s = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(s));
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    store,
    config,
    close: async () => {
      await new Promise<void>((r) => {
        server.close(() => r());
        (server as unknown as { closeAllConnections?: () => void }).closeAllConnections?.();
      });
      await store.close();
    },
  };
}

export async function post(
  url: string,
  body: Buffer | string,
  headers: Record<string, string> = {},
): Promise<{ status: number; text: string; headers: Headers }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : new Uint8Array(body),
  });
  return { status: res.status, text: await res.text(), headers: res.headers };
}

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs bin/receiver.js (or RECEIVER_TEST_BINARY) as a subprocess (tests the CLI by exit code and output). */
export function runCli(
  args: string[],
  options: { env?: NodeJS.ProcessEnv; cwd?: string; timeoutMs?: number; input?: string | Buffer } = {},
): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const run = receiverCommand(args, options);
    const child = spawn(run.file, run.args, { cwd: run.cwd, env: run.env, stdio: [options.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'] });
    if (options.input !== undefined) child.stdin!.end(options.input);
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 20_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/**
 * Runs a command in this process, as bin/receiver.js would run it: the same parsing, the
 * same Error/Try reporting and exit code, with stdout and stderr captured and its own
 * environment (this process's plus `env`) and clock. Much cheaper than a subprocess; a few
 * tests per command still use runCli, so the exit codes of the real binary stay honest.
 */
export async function runInProcess(
  args: string[],
  options: { env?: NodeJS.ProcessEnv; now?: () => number; /** stderr says it is a terminal */ tty?: boolean } = {},
): Promise<CliResult> {
  let stdout = '';
  let stderr = '';
  const code = await run(['node', 'receiver', ...args], {
    stdout: { write: (text: string) => (stdout += text) },
    stderr: { write: (text: string) => (stderr += text), ...(options.tty === true ? { isTTY: true } : {}) },
    now: options.now ?? Date.now,
    env: { ...process.env, ...options.env },
  });
  return { code, stdout, stderr };
}

export interface ServeProcess {
  child: ChildProcess;
  url: string;
  port: number;
  /** Everything written so far. */
  output: () => { stdout: string; stderr: string };
  stop: (signal?: NodeJS.Signals) => Promise<number | null>;
}

/** Starts `receiver serve` (or RECEIVER_TEST_BINARY's) as a real child process on port 0 and waits for its "listening" log line. */
export function startServe(
  configFile: string,
  options: {
    env?: NodeJS.ProcessEnv;
    args?: string[];
    cwd?: string;
    /** a command that execs serve, e.g. setpriv as another user */
    wrap?: string[];
    /** bin/receiver.js elsewhere (receiverForNobody's), or the single executable's copy elsewhere */
    bin?: string;
    /** false: no `--port 0`, the configuration's port is used */
    portFlag?: boolean;
  } = {},
): Promise<ServeProcess> {
  return new Promise((resolve, reject) => {
    const run = receiverCommand(['serve', '-c', configFile, ...(options.portFlag === false ? [] : ['--port', '0']), ...(options.args ?? [])], options);
    const runArgs = options.bin === undefined ? run.args : run.args.map((a) => (a === BIN ? options.bin! : a));
    const runFile = options.bin !== undefined && run.file === BINARY ? options.bin : run.file;
    const [file, ...args] = [...(options.wrap ?? []), runFile, ...runArgs] as [string, ...string[]];
    const child = spawn(file, args, { cwd: run.cwd, env: run.env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    let started = false;
    const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => {
      stderr += d.toString();
      const m = /"port":(\d+)[^\n]*"msg":"listening"/.exec(stderr);
      if (!started && m !== null) {
        started = true;
        const port = Number(m[1]);
        resolve({
          child,
          port,
          url: `http://127.0.0.1:${port}`,
          output: () => ({ stdout, stderr }),
          stop: async (signal = 'SIGTERM') => {
            if (child.exitCode === null && child.signalCode === null) child.kill(signal);
            return exited;
          },
        });
      }
    });
    void exited.then((code) => {
      if (!started) reject(new Error(`serve exited with ${code} before listening:\n${stderr}`));
    });
  });
}

/** Polls `get` every 5 ms until it returns something other than undefined, or fails after timeoutMs. */
export function waitFor<T>(get: () => T | undefined, what: string, timeoutMs = 5000): Promise<T> {
  const until = Date.now() + timeoutMs;
  return new Promise((resolve, reject) => {
    const tick = () => {
      const v = get();
      if (v !== undefined) return resolve(v);
      if (Date.now() > until) return reject(new Error(`timed out waiting for ${what}`));
      setTimeout(tick, 5);
    };
    tick();
  });
}

/**
 * Plans every stored event not planned yet as one unit of route `r` in a lane of its own
 * (`e<id>`), so each event is claimed on its own as a whole, as the store tests expect.
 */
export async function planEach(store: DrainStore, now: number): Promise<void> {
  for (;;) {
    const events = await store.unplannedEvents(100);
    if (events.length === 0) return;
    await store.planEvents(
      events.map((e) => ({ eventId: e.id, units: [{ route: 'r', lane: `e${e.id}` }], decisions: 'r: applies' })),
      now,
    );
  }
}

/** The drain's claim of the one oldest due unit (events planned by planEach); undefined when none is due. */
export async function claimOne(store: DrainStore, owner: string, now: number, leaseMs: number): Promise<ClaimedUnit | undefined> {
  await planEach(store, now);
  return (await store.claimUnits(owner, now, leaseMs, { busyLanes: [], lanes: 1, perLane: 1 }))[0];
}

/** Up to `limit` due units of as many lanes (events planned by planEach), oldest first. */
export async function claimMany(store: DrainStore, owner: string, now: number, leaseMs: number, limit: number): Promise<ClaimedUnit[]> {
  await planEach(store, now);
  return store.claimUnits(owner, now, leaseMs, { busyLanes: [], lanes: limit, perLane: 1 });
}
