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
