/**
 * The privileged reader: what lets a serve that became the service's user reload files
 * only root may read. serve started as root reads its configuration, environment file and
 * `file:` secrets, then becomes the service's user for good (service-user.ts); its exec
 * and module effects run as that user and must not read those files, so serve cannot
 * either. Before it changes user, serve starts this small process, which stays root. On
 * each reload serve asks it for the files, and it reads exactly those the configuration
 * names (the configuration file, the environment file, every `file:` secret), as loading
 * the configuration reads them, and answers with their text. It takes no path from
 * serve, runs nothing, and ends when serve's channel closes (serve exited or was killed).
 *
 * Its one channel is an IPC socket to serve. Effects cannot reach it: the socket is not
 * inherited by the processes serve starts (close-on-exec; effects get only stdin, stdout
 * and stderr), serve's /proc is closed to them once it changed user, and a process of the
 * service's user cannot signal or trace a root process.
 */
import { spawn } from 'node:child_process';
import { closeSync, constants, fstatSync, openSync, readSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { loadConfigAndEnv, type ConfigOverrides } from './load.js';
import type { ReadText } from './secret.js';

/** The single executable's hidden mode: started with this argument (and an IPC channel), it is the privileged reader. */
export const READER_ARG = 'receiver-config-reader';

/** A file larger than this is not read (a configuration, an environment file and a secret are a few KiB). */
export const READ_MAX_BYTES = 4 * 1024 * 1024;

/** How long serve waits for the reader's answer. */
const READ_TIMEOUT_MS = 10_000;

/**
 * How the reader is started: arguments to this process's executable (as the module host:
 * dist/config/reader-main.js from a checkout or the package; the single executable runs
 * itself in its hidden mode, useReaderArgs).
 */
let readerArgs: readonly string[] | undefined =
  typeof import.meta.url === 'string' ? [fileURLToPath(new URL('../../dist/config/reader-main.js', import.meta.url))] : undefined;

export function useReaderArgs(args: readonly string[]): void {
  readerArgs = args;
}

/** One file as the reader found it: its text, or the error code reading it gave. */
type FileRead = [path: string, text: string | null, code: string | null];

type ToReader = { type: 'read'; id: number };
type FromReader = { type: 'ready' } | { type: 'files'; id: number; files: FileRead[] };

/**
 * Reads a regular file of at most READ_MAX_BYTES. Opened without blocking and checked
 * before it is read: a FIFO or a device named as a secret is refused, never waited on.
 */
function readBounded(path: string): string {
  const fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw Object.assign(new Error(`${path} is not a file`), { code: 'not a regular file' });
    if (st.size > READ_MAX_BYTES) throw Object.assign(new Error(`${path} is too large`), { code: `larger than ${READ_MAX_BYTES} bytes` });
    const buf = Buffer.alloc(st.size);
    let n = 0;
    while (n < buf.length) {
      const got = readSync(fd, buf, n, buf.length - n, null);
      if (got === 0) break;
      n += got;
    }
    return buf.subarray(0, n).toString('utf8');
  } finally {
    closeSync(fd);
  }
}

/** What loading the configuration reads, read now: the files, in the order loading asks for them. */
export function readConfigFiles(overrides: ConfigOverrides, env: NodeJS.ProcessEnv): FileRead[] {
  const files = new Map<string, FileRead>();
  const recording: ReadText = (path) => {
    let read: FileRead;
    try {
      read = [path, readBounded(path), null];
    } catch (e) {
      read = [path, null, String((e as NodeJS.ErrnoException).code ?? 'error')];
    }
    files.set(path, read);
    if (read[1] === null) throw Object.assign(new Error(`cannot read ${path}`), { code: read[2] });
    return read[1];
  };
  try {
    loadConfigAndEnv(overrides, env, recording);
  } catch {
    // Invalid: serve loads the same files again from this answer and reports it.
  }
  return [...files.values()];
}

/** A ReadText over what the reader answered. */
function snapshot(files: FileRead[]): ReadText {
  const byPath = new Map(files.map((f) => [f[0], f]));
  return (path) => {
    const f = byPath.get(path);
    if (f === undefined) throw Object.assign(new Error(`${path} was not read`), { code: 'not read by the privileged reader' });
    if (f[1] === null) throw Object.assign(new Error(`cannot read ${path}`), { code: f[2] });
    return f[1];
  };
}

export interface PrivilegedReader {
  /** The files of the configuration as they are now, read as root. Rejects when the reader is gone or does not answer. */
  read(): Promise<ReadText>;
  /** The reader's process id (tests). */
  pid: number | undefined;
}

/** Starts the reader (serve, as root, before it changes user); resolves once it listens. */
export function startPrivilegedReader(overrides: ConfigOverrides): Promise<PrivilegedReader> {
  if (readerArgs === undefined) return Promise.reject(new Error('no privileged reader: useReaderArgs was not called'));
  const child = spawn(process.execPath, [...readerArgs, JSON.stringify(overrides)], { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] });
  let gone: string | undefined;
  let next = 0;
  const waiting = new Map<number, (files: FileRead[] | Error) => void>();
  const end = (why: string) => {
    gone ??= why;
    for (const w of waiting.values()) w(new Error(`the privileged reader ${gone}; restart the service to reload files only root may read`));
    waiting.clear();
  };
  child.on('exit', (code, signal) => end(`ended (${signal ?? `exit code ${code}`})`));
  child.on('error', (e) => end(`could not run (${e.message})`));
  return new Promise((resolve, reject) => {
    const failed = (e: Error) => reject(new Error(`cannot start the privileged reader: ${e.message}`));
    child.once('error', failed);
    child.once('exit', (code) => failed(new Error(`it exited (code ${code})`)));
    child.on('message', (m: FromReader) => {
      if (m.type === 'ready') {
        // From now on neither the reader nor its channel keeps serve running.
        child.unref();
        child.channel?.unref();
        child.off('error', failed);
        child.removeAllListeners('exit');
        child.on('exit', (code, signal) => end(`ended (${signal ?? `exit code ${code}`})`));
        resolve({
          pid: child.pid,
          read: () =>
            new Promise<ReadText>((done, fail) => {
              if (gone !== undefined) return fail(new Error(`the privileged reader ${gone}; restart the service to reload files only root may read`));
              const id = ++next;
              const timer = setTimeout(() => {
                waiting.delete(id);
                fail(new Error(`the privileged reader did not answer within ${READ_TIMEOUT_MS / 1000} s`));
              }, READ_TIMEOUT_MS);
              waiting.set(id, (r) => {
                clearTimeout(timer);
                if (r instanceof Error) fail(r);
                else done(snapshot(r));
              });
              child.send({ type: 'read', id } satisfies ToReader);
            }),
        });
      } else if (m.type === 'files') {
        const w = waiting.get(m.id);
        waiting.delete(m.id);
        w?.(m.files);
      }
    });
  });
}

/** Runs this process as the privileged reader (see above); argv's last argument is serve's overrides, as JSON. */
export function runPrivilegedReader(overridesJson: string): void {
  const send = process.send?.bind(process);
  if (send === undefined) throw new Error('the privileged reader is started by serve, with an IPC channel');
  const overrides = JSON.parse(overridesJson) as ConfigOverrides;
  // A Ctrl-C or a SIGHUP to the process group is serve's to act on: the reader ends with serve's channel.
  for (const signal of ['SIGINT', 'SIGHUP', 'SIGTERM'] as const) process.on(signal, () => {});
  process.on('disconnect', () => process.exit(0));
  process.on('message', (m: ToReader) => {
    if (typeof m !== 'object' || m === null || m.type !== 'read' || !Number.isSafeInteger(m.id)) return;
    send({ type: 'files', id: m.id, files: readConfigFiles(overrides, process.env) } satisfies FromReader);
  });
  send({ type: 'ready' } satisfies FromReader);
}
