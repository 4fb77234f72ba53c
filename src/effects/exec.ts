import { spawn } from 'node:child_process';
import type { RouteConfig } from '../config/schema.js';
import { OutputTail, type EffectEvent, type EffectResult } from './types.js';

export interface ExecRequest {
  argv: readonly string[];
  event: EffectEvent;
  businessKey: string;
  effectKey: string;
  /** What this run is (the effect key, or `<effect key>#forced-<n>`); default the effect key. */
  runKey?: string | undefined;
  attempt: number;
  /** The variables exec effects may draw on (see effectEnvironment); the command gets only some of them. */
  baseEnv: NodeJS.ProcessEnv;
  /** The route's `effect.env`: names passed on from `baseEnv` besides the minimal ones. */
  passEnv?: readonly string[] | undefined;
  timeoutMs: number;
  /** Aborted when `serve` stops past its grace: the process group is killed like a timeout. */
  signal?: AbortSignal | undefined;
  cwd?: string | undefined;
}

/**
 * The variables every exec effect gets from the service's environment, besides the event
 * variables receiver sets: what a command needs to find programs, a home directory, its
 * locale and time zone. `LC_*` are locale settings (LC_ALL, LC_CTYPE, ...), never credentials.
 */
const MINIMAL_ENV_NAMES: readonly string[] = ['PATH', 'HOME', 'LANG', 'TZ'];
const LOCALE_NAME = /^LC_[A-Z_]+$/;

/** What `effect.env` may name: a shell variable name, not one of receiver's own (`RECEIVER_*`). */
export const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
export const isReceiverVariable = (name: string) => name.startsWith('RECEIVER_');

/**
 * What exec effects may draw on: of the service's environment, only the minimal variables
 * and those some route lists in `effect.env`. Everything else (webhook secrets loaded from
 * the service's environment file, API keys for other tools, receiver's own `RECEIVER_*`
 * settings such as RECEIVER_ADMIN_TOKEN or RECEIVER_DB with its password) never reaches a
 * command, whether or not the configuration references it. This is what crosses to the
 * drain thread; each command then gets only its own route's share (runExec).
 */
export function effectEnvironment(config: { routes: readonly RouteConfig[] }, parent: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  return pickEnvironment(
    parent,
    config.routes.flatMap((r) => r.effect.env ?? []),
  );
}

/** The minimal variables of `from` and nothing else: the whole environment of the module host. */
export function minimalEnvironment(from: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return pickEnvironment(from, []);
}

/** The minimal variables and the `listed` ones of `from`; never a `RECEIVER_*` one. */
function pickEnvironment(from: NodeJS.ProcessEnv, listed: readonly string[]): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(from)) {
    if (value === undefined || isReceiverVariable(name)) continue;
    if (MINIMAL_ENV_NAMES.includes(name) || LOCALE_NAME.test(name) || listed.includes(name)) env[name] = value;
  }
  return env;
}

/** After the main process exits, how long to wait for its output pipes to close. */
const PIPES_CLOSE_MS = 1000;

/**
 * Runs an argv (no shell) with the raw body on stdin. Exit 0 is success; anything else is
 * a retryable failure (see runCommand).
 */
export function runExec(req: ExecRequest): Promise<EffectResult> {
  // Receiver's own event variables only: RECEIVER_* settings never come from baseEnv.
  const env: NodeJS.ProcessEnv = {
    ...pickEnvironment(req.baseEnv, req.passEnv ?? []),
    RECEIVER_EVENT_ID: String(req.event.id),
    RECEIVER_SOURCE: req.event.source,
    RECEIVER_DELIVERY_ID: req.event.deliveryId,
    RECEIVER_EVENT_TYPE: req.event.eventType,
    RECEIVER_KEY: req.businessKey,
    RECEIVER_EFFECT_KEY: req.effectKey,
    RECEIVER_RUN_KEY: req.runKey ?? req.effectKey,
    RECEIVER_ATTEMPT: String(req.attempt),
  };
  return runCommand({ argv: req.argv, env, stdin: req.event.body, timeoutMs: req.timeoutMs, signal: req.signal, cwd: req.cwd });
}

export interface CommandRequest {
  argv: readonly string[];
  /** The command's whole environment. */
  env: NodeJS.ProcessEnv;
  stdin: Buffer;
  timeoutMs: number;
  /** Aborted: the process group is killed like a timeout. */
  signal?: AbortSignal | undefined;
  cwd?: string | undefined;
}

/**
 * Runs an argv (no shell) with `stdin`, bounded: exit 0 is success, anything else a
 * retryable failure; only the output's tail is kept. The command runs in its own process
 * group, so a timeout kills everything it started (SIGKILL to -pid), not just the first
 * process. An exec effect's run, an exec alert destination's.
 */
export function runCommand(req: CommandRequest): Promise<EffectResult> {
  const [file, ...args] = req.argv;
  const env = req.env;
  return new Promise((resolve) => {
    const tail = new OutputTail();
    let settled = false;
    let killedFor: 'timeout' | 'shutdown' | undefined;
    let exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
    let pipesTimer: NodeJS.Timeout | undefined;

    let child: ReturnType<typeof spawn>;
    try {
      child = spawn(file!, args, { cwd: req.cwd, env, detached: true, stdio: ['pipe', 'pipe', 'pipe'] });
    } catch (e) {
      // Node refuses before anything runs: a NUL byte in an argument or environment value
      // (from the delivery id, event type or business key), or E2BIG for values past the
      // kernel's limit. The same event fails the same way every time: a permanent failure.
      const err = e as NodeJS.ErrnoException;
      return resolve({ ok: false, retryable: false, error: `cannot start ${file}: ${err.code ?? err.message}` });
    }

    const killGroup = (why: 'timeout' | 'shutdown') => {
      if (exit !== undefined && why === 'shutdown') return;
      killedFor ??= why;
      try {
        if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
      } catch {
        // Already gone.
      }
    };
    const timer = setTimeout(() => killGroup('timeout'), req.timeoutMs);
    const onAbort = () => killGroup('shutdown');
    req.signal?.addEventListener('abort', onAbort, { once: true });

    const finish = (result: EffectResult) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      clearTimeout(pipesTimer);
      req.signal?.removeEventListener('abort', onAbort);
      child.stdout?.destroy();
      child.stderr?.destroy();
      resolve(result);
    };
    const outcome = (): EffectResult => {
      const output = tail.toString();
      const seconds = req.timeoutMs / 1000;
      if (killedFor === 'timeout') return { ok: false, retryable: true, error: `timed out after ${seconds}s; process group killed`, output, timedOut: true };
      if (killedFor === 'shutdown') return { ok: false, retryable: true, error: 'killed: the receiver is shutting down', output };
      if (exit?.code === 0) return { ok: true, output };
      if (exit?.signal) return { ok: false, retryable: true, error: `${file} was killed by ${exit.signal}`, output };
      return { ok: false, retryable: true, error: `${file} exited with code ${exit?.code ?? 'unknown'}`, output };
    };

    child.stdout!.on('data', (d: Buffer) => tail.push(d));
    child.stderr!.on('data', (d: Buffer) => tail.push(d));
    child.on('error', (e: NodeJS.ErrnoException) => {
      finish({ ok: false, retryable: true, error: `cannot run ${file}: ${e.code ?? e.message}` });
    });
    child.on('exit', (code, signal) => {
      exit = { code, signal };
      clearTimeout(timer);
      // A background process it left behind may hold the pipes open: do not wait for it forever.
      pipesTimer = setTimeout(() => finish(outcome()), PIPES_CLOSE_MS);
    });
    child.on('close', () => finish(outcome()));

    // A command that does not read its stdin closes the pipe early: not a failure.
    child.stdin!.on('error', () => {});
    child.stdin!.end(req.stdin);
  });
}
