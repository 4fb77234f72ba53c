import { serve, type ServerType } from '@hono/node-server';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { spawn, type ChildProcess } from 'node:child_process';
import { resolveConfig, type Config } from '../src/config/load.js';
import { run } from '../src/cli/main.js';
import { createApp, type AppOptions } from '../src/http/app.js';
import { SqliteStore } from '../src/store/sqlite/index.js';
import type { ClaimedEvent, DrainStore } from '../src/store/drain-types.js';

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
  options: { env?: NodeJS.ProcessEnv; args?: string[]; cwd?: string; /** a command that execs serve, e.g. setpriv as another user */ wrap?: string[] } = {},
): Promise<ServeProcess> {
  return new Promise((resolve, reject) => {
    const run = receiverCommand(['serve', '-c', configFile, '--port', '0', ...(options.args ?? [])], options);
    const [file, ...args] = [...(options.wrap ?? []), run.file, ...run.args] as [string, ...string[]];
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

/** The drain's claim (claimEvents) of the one oldest due event; undefined when none is due. */
export async function claimOne(store: DrainStore, owner: string, now: number, leaseMs: number): Promise<ClaimedEvent | undefined> {
  return (await store.claimEvents(owner, now, leaseMs, 1))[0];
}
