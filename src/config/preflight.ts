import { accessSync, constants, existsSync, statSync } from 'node:fs';
import { delimiter, dirname, isAbsolute, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { modulePath } from '../effects/module.js';
import { ReceiverError } from '../errors.js';
import { redactUrl } from '../log.js';
import { assertWritableFiles, processUser } from '../store/sqlite/open.js';
import { isPostgresUrl } from './database.js';
import type { Config } from './load.js';

/**
 * What `check-config` checks beyond the configuration's own shape, without running any
 * effect: each exec effect's program exists and this user may execute it, each module
 * effect's file exists and imports with a default export function, the SQLite
 * database's directory exists (or can be created) and is writable, a PostgreSQL server
 * answers, the pid file's directory is writable. Each of these would
 * otherwise surface only at the first event (a dead event, or a retried one) or at start.
 *
 * Checked for the user running check-config: run it as the service's user
 * (contrib/receiver.sh does), since another user's permissions cannot be asked of the
 * kernel. Returns one line per problem, naming the route or field.
 */
export async function preflight(config: Config, where: { cwd: string; env: NodeJS.ProcessEnv }): Promise<string[]> {
  const problems: string[] = [];
  for (const [i, route] of config.routes.entries()) {
    const field = `routes.${i} (${route.name}).effect`;
    const program = route.effect.exec?.[0];
    if (program !== undefined) {
      const p = programProblem(program, where);
      if (p !== undefined) problems.push(`${field}.exec.0: ${p}`);
    }
    if (route.effect.module !== undefined) {
      const p = await moduleProblem(route.effect.module, config.file);
      if (p !== undefined) problems.push(`${field}.module: ${p}`);
    }
  }
  const db = isPostgresUrl(config.database) ? await postgresProblem(config.database, config.busyTimeoutMs) : databaseProblem(config.database);
  if (db !== undefined) problems.push(`database: ${db}`);
  const pid = config.pidFile === undefined ? undefined : pidFileProblem(resolve(where.cwd, config.pidFile));
  if (pid !== undefined) problems.push(`pidFile: ${pid}`);
  return problems;
}

/** Why serve could not write its pid file (and its reload record beside it) once it listens. */
function pidFileProblem(path: string): string | undefined {
  const dir = dirname(path);
  let isDir: boolean;
  try {
    isDir = statSync(dir).isDirectory();
  } catch (e) {
    return `the directory ${dir} ${(e as NodeJS.ErrnoException).code === 'ENOENT' ? 'does not exist' : `cannot be read (${(e as NodeJS.ErrnoException).code ?? 'error'})`}`;
  }
  if (!isDir) return `${dir} is not a directory`;
  const dirProblem = writableDirProblem(dir, `serve writes ${path} and its reload record there`);
  if (dirProblem !== undefined) return dirProblem;
  if (existsSync(path) && statSync(path).isDirectory()) return `${path} is a directory`;
  return undefined;
}

/** A directory this user cannot create files in: said with why it must (`why`). */
function writableDirProblem(dir: string, why: string): string | undefined {
  try {
    accessSync(dir, constants.W_OK | constants.X_OK);
    return undefined;
  } catch {
    return `the directory ${dir} is not writable by ${processUser()} (${why})`;
  }
}

/** Why spawn could not run `program`, as it resolves it: a path with a slash against the working directory, a bare name through PATH. */
function programProblem(program: string, where: { cwd: string; env: NodeJS.ProcessEnv }): string | undefined {
  const user = processUser();
  if (program.includes('/')) {
    const path = isAbsolute(program) ? program : resolve(where.cwd, program);
    const relative = isAbsolute(program) ? '' : ` (relative to the working directory ${where.cwd}, where serve runs too)`;
    if (!existsSync(path)) return `${path} does not exist${relative}`;
    return executableProblem(path, user);
  }
  // spawn searches the child's PATH, which is the service's own (exec effects inherit it);
  // without PATH, the system's default search path.
  const path = where.env.PATH ?? '/usr/bin:/bin';
  let found: string | undefined;
  for (const dir of path.split(delimiter)) {
    const candidate = join(dir === '' ? where.cwd : dir, program);
    if (!existsSync(candidate)) continue;
    const p = executableProblem(candidate, user);
    if (p === undefined) return undefined;
    found ??= p;
  }
  return found ?? `${program} is not found on PATH (${path}); give its absolute path, or add its directory to PATH in the service's environment`;
}

function executableProblem(path: string, user: string): string | undefined {
  let isFile: boolean;
  try {
    isFile = statSync(path).isFile();
  } catch (e) {
    return `${path} cannot be read by ${user} (${(e as NodeJS.ErrnoException).code ?? 'error'})`;
  }
  if (!isFile) return `${path} is not a file`;
  try {
    accessSync(path, constants.X_OK);
  } catch {
    return `${path} is not executable by ${user} (chmod +x ${path}, or check the directories above it)`;
  }
  return undefined;
}

/** How long a module effect's file may take to import (its top level may await). */
const MODULE_IMPORT_TIMEOUT_MS = 10_000;

/**
 * Imports a module effect's file in a thread of its own, as serve's drain thread does (its
 * top level runs; the handler is never called), then ends the thread: what the module
 * starts at its top level (a timer, a connection) cannot keep check-config running, and
 * what it prints does not mix with check-config's output.
 */
async function moduleProblem(spec: string, configFile: string): Promise<string | undefined> {
  const path = modulePath(spec, configFile);
  const relative = isAbsolute(spec) ? '' : ` (relative to the configuration file's directory, ${dirname(resolve(configFile))})`;
  if (!existsSync(path)) return `${path} does not exist${relative}`;
  if (!statSync(path).isFile()) return `${path} is not a file`;
  const problem = await importInThread(pathToFileURL(path).href, MODULE_IMPORT_TIMEOUT_MS);
  return problem === undefined ? undefined : `${path} ${problem}`;
}

/** The thread's code: an ES module from a data: URL, which may import() an absolute file: URL. */
const IMPORT_CHECK = `
import { parentPort, workerData } from 'node:worker_threads';
try {
  const m = await import(workerData.url);
  parentPort.postMessage(typeof m.default === 'function' ? null : 'has no default export function (export default async function (event, ctx) { ... })');
} catch (e) {
  parentPort.postMessage('cannot be loaded: ' + String((e && e.message) || e).split('\\n')[0]);
}`;

function importInThread(url: string, timeoutMs: number): Promise<string | undefined> {
  return new Promise((resolvePromise) => {
    const worker = new Worker(new URL(`data:text/javascript,${encodeURIComponent(IMPORT_CHECK)}`), { workerData: { url }, stdout: true, stderr: true });
    worker.stdout.resume();
    worker.stderr.resume();
    const done = (problem: string | undefined) => {
      clearTimeout(timer);
      void worker.terminate();
      resolvePromise(problem);
    };
    const timer = setTimeout(() => done(`did not finish loading within ${timeoutMs / 1000} s (a top-level await that never settles?)`), timeoutMs);
    worker.once('message', (problem: string | null) => done(problem ?? undefined));
    worker.once('error', (e: Error) => done(`cannot be loaded: ${e.message.split('\n')[0] ?? ''}`));
    worker.once('exit', (code) => done(`cannot be loaded: its top level ended the thread (exit code ${code})`));
  });
}

/**
 * A PostgreSQL server that does not answer `SELECT 1` with these credentials within the
 * time serve gives a new connection. Nothing is created or migrated.
 */
async function postgresProblem(url: string, busyTimeoutMs: number): Promise<string | undefined> {
  const { createPool } = await import('../store/postgres/open.js');
  const { postgresError } = await import('../store/postgres/errors.js');
  const pool = createPool(url, { busyTimeoutMs, poolSize: 1 });
  try {
    await pool.query('SELECT 1');
    return undefined;
  } catch (e) {
    return `${postgresError(e, `cannot connect to ${redactUrl(url)}`).message} (check the URL, the password in the service's environment, and that the server accepts this host)`;
  } finally {
    await pool.end().catch(() => undefined);
  }
}

/** A SQLite database serve could not create or write (:memory: is not checked). */
function databaseProblem(database: string): string | undefined {
  if (isPostgresUrl(database) || database === ':memory:') return undefined;
  const user = processUser();
  const dir = dirname(database);
  if (!existsSync(dir)) {
    // serve creates the directory when its parent lets it: find the nearest one that exists.
    let parent = dirname(dir);
    while (!existsSync(parent) && parent !== dirname(parent)) parent = dirname(parent);
    const create = `(install -d -m 0750 -o receiver -g receiver ${dir})`;
    if (!statSync(parent).isDirectory()) return `the directory ${dir} cannot be created: ${parent} is a file ${create}`;
    try {
      accessSync(parent, constants.W_OK | constants.X_OK);
      return undefined;
    } catch {
      return `the directory ${dir} does not exist, and ${user} cannot create it in ${parent} ${create}`;
    }
  }
  if (!statSync(dir).isDirectory()) return `${dir} is not a directory`;
  const dirProblem = writableDirProblem(dir, `SQLite creates ${database}-wal and -shm there; chown it to the service's user`);
  if (dirProblem !== undefined) return dirProblem;
  try {
    assertWritableFiles(database);
  } catch (e) {
    if (!(e instanceof ReceiverError)) throw e;
    return `${e.message}${e.hint === undefined ? '' : ` (try: ${e.hint})`}`;
  }
  return undefined;
}
