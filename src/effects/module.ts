import { AsyncLocalStorage } from 'node:async_hooks';
import { dirname, isAbsolute, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { EffectDb } from '../store/drain-types.js';
import type { EffectEvent } from './types.js';

/** What a module effect's default export receives as its first argument. */
export interface ModuleEvent extends EffectEvent {
  /** The body parsed as JSON (or form fields); undefined when it does not parse. */
  json: unknown;
}

/** The second argument: the keys, the attempt, and the receiver's database inside the effect's transaction. */
export interface ModuleContext {
  event: ModuleEvent;
  route: string;
  /** The business key. */
  key: string;
  effectKey: string;
  /**
   * What this run is: the effect key for an ordinary run (the same on every retry), or
   * `<effect key>#forced-<n>` for a forced replay's run. Pass it on as an idempotency key.
   */
  runKey: string;
  attempt: number;
  /**
   * Writes here commit in the same transaction that marks the effect done, and roll back
   * with it if the handler throws. Await every call; the handle is closed afterwards.
   */
  db: EffectDb;
}

export type ModuleHandler = (event: ModuleEvent, ctx: ModuleContext) => unknown;

const loaded = new Map<string, Promise<ModuleHandler>>();

/** Which module effect an asynchronous callback belongs to (ids only, never the event). */
export interface ModuleOrigin {
  route: string;
  effectKey: string;
  eventId: number;
  attempt: number;
}

const origin = new AsyncLocalStorage<ModuleOrigin>();

/**
 * The module effect whose code is running now, followed through its promises and timers.
 * `serve` reads it in its unhandledRejection handler: a promise a handler created and
 * neither awaited nor caught is that module's mistake, not a receiver bug, and must not
 * take the process down with every other delivery.
 */
export function moduleOrigin(): ModuleOrigin | undefined {
  return origin.getStore();
}

/**
 * A promise a module effect's handler started and did not await, rejected: its own
 * mistake. Logged as one line with the ids and the error's first 200 characters (never a
 * stack or the event), and the receiver keeps going. False when the rejection is not a
 * module's (a bug of the receiver's: the caller ends the process).
 */
export function logModuleRejection(logger: { error(fields: object, msg: string): void }, e: unknown): boolean {
  const from = moduleOrigin();
  if (from === undefined) return false;
  const text = e instanceof Error ? `${e.name}: ${e.message}` : typeof e === 'string' ? e : Object.prototype.toString.call(e);
  logger.error(
    { ...from, error: text.length > 200 ? `${text.slice(0, 200)}...` : text },
    'module effect left a promise rejection unhandled; ignored, the receiver keeps running',
  );
  return true;
}

/** import(); the single executable sets its own (its script cannot import() a file itself). */
let importModule = (url: string): Promise<{ default?: unknown }> => import(url);

export function useModuleImporter(importer: (url: string) => Promise<{ default?: unknown }>): void {
  importModule = importer;
}

/** Resolves a route's `module` relative to the configuration file's directory. */
export function modulePath(spec: string, configFile: string): string {
  return isAbsolute(spec) ? spec : resolve(dirname(resolve(configFile)), spec);
}

/** Imports a module effect once; its default export must be a function. */
export function loadHandler(path: string): Promise<ModuleHandler> {
  let p = loaded.get(path);
  if (p === undefined) {
    p = importModule(pathToFileURL(path).href).then((m) => {
      if (typeof m.default !== 'function')
        throw new Error(`module ${path} has no default export function (export default async function (event, ctx) { ... })`);
      return m.default as ModuleHandler;
    });
    // A failed import (a typo being fixed) is tried again on the next attempt.
    p.catch(() => loaded.delete(path));
    loaded.set(path, p);
  }
  return p;
}

/** A module handler ran past effect.timeoutSeconds (its attempt's outcome is `timeout`). */
export class ModuleTimedOut extends Error {}

/**
 * Calls the handler, rejecting at `timeoutMs` (ModuleTimedOut) or on `signal`. The store then rolls the
 * transaction back and closes `db`, so a handler still running after that cannot write.
 */
export async function callHandler(handler: ModuleHandler, event: ModuleEvent, ctx: ModuleContext, timeoutMs: number, signal?: AbortSignal): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  const limit = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new ModuleTimedOut(`module timed out after ${timeoutMs / 1000}s; its writes were rolled back`)), timeoutMs);
    onAbort = () => reject(new Error('module aborted: the receiver is shutting down; its writes were rolled back'));
    signal?.addEventListener('abort', onAbort, { once: true });
  });
  try {
    const where: ModuleOrigin = { route: ctx.route, effectKey: ctx.effectKey, eventId: event.id, attempt: ctx.attempt };
    await Promise.race([origin.run(where, () => Promise.resolve().then(() => handler(event, ctx))), limit]);
  } finally {
    clearTimeout(timer);
    if (onAbort !== undefined) signal?.removeEventListener('abort', onAbort);
  }
}
