import { spawn } from 'node:child_process';
import type { Config } from '../config/load.js';
import { OutputTail, type EffectEvent, type EffectResult } from './types.js';

export interface ExecRequest {
  argv: readonly string[];
  event: EffectEvent;
  businessKey: string;
  effectKey: string;
  attempt: number;
  /** The environment the command starts from (see effectEnvironment). */
  baseEnv: NodeJS.ProcessEnv;
  timeoutMs: number;
  /** Aborted when `serve` stops past its grace: the process group is killed like a timeout. */
  signal?: AbortSignal | undefined;
  cwd?: string | undefined;
}

/**
 * The environment an exec effect inherits. Operators keep tool credentials (deploy keys,
 * API tokens) in the service's environment, so the parent's environment is passed on,
 * minus what belongs to the receiver itself: every variable whose value is one of the
 * receiver's resolved secrets (webhook signing secrets, the metrics token, catch-up's API
 * credentials), and every
 * `RECEIVER_*` variable (RECEIVER_DB may be a postgres:// URL with a password). The
 * documented RECEIVER_* event variables are then set per run.
 */
export function effectEnvironment(
  config: Pick<Config, 'sources' | 'metrics'> & Partial<Pick<Config, 'catchUp'>>,
  parent: NodeJS.ProcessEnv = process.env,
): NodeJS.ProcessEnv {
  const secrets = new Set<string>();
  for (const s of config.sources.values()) {
    for (const x of s.secrets) secrets.add(x.reveal());
    for (const x of s.keys.values()) secrets.add(x.reveal());
  }
  if (config.metrics.token !== undefined) secrets.add(config.metrics.token.reveal());
  for (const c of config.catchUp?.values() ?? []) if (c.credential !== undefined) secrets.add(c.credential.reveal());
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(parent)) {
    if (value === undefined || name.startsWith('RECEIVER_') || secrets.has(value)) continue;
    env[name] = value;
  }
  return env;
}

/** After the main process exits, how long to wait for its output pipes to close. */
const DRAIN_OUTPUT_MS = 1000;

/**
 * Runs an argv (no shell) with the raw body on stdin. Exit 0 is success; anything else is
 * a retryable failure. The command runs in its own process group, so a timeout kills
 * everything it started (SIGKILL to -pid), not just the first process.
 */
export function runExec(req: ExecRequest): Promise<EffectResult> {
  const [file, ...args] = req.argv;
  const env: NodeJS.ProcessEnv = {
    ...req.baseEnv,
    RECEIVER_EVENT_ID: String(req.event.id),
    RECEIVER_SOURCE: req.event.source,
    RECEIVER_DELIVERY_ID: req.event.deliveryId,
    RECEIVER_EVENT_TYPE: req.event.eventType,
    RECEIVER_KEY: req.businessKey,
    RECEIVER_EFFECT_KEY: req.effectKey,
    RECEIVER_ATTEMPT: String(req.attempt),
  };
  return new Promise((resolve) => {
    const tail = new OutputTail();
    let settled = false;
    let killedFor: 'timeout' | 'shutdown' | undefined;
    let exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
    let drainTimer: NodeJS.Timeout | undefined;

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
      clearTimeout(drainTimer);
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
      drainTimer = setTimeout(() => finish(outcome()), DRAIN_OUTPUT_MS);
    });
    child.on('close', () => finish(outcome()));

    // A command that does not read its stdin closes the pipe early: not a failure.
    child.stdin!.on('error', () => {});
    child.stdin!.end(req.event.body);
  });
}
