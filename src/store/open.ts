import { SqliteStore } from './sqlite/index.js';
import { assertWritable, assertWritableFiles } from './sqlite/open.js';
import type { Store } from './types.js';

export interface OpenStoreOptions {
  busyTimeoutMs: number;
  /**
   * serve: keep SQLite's own blocking wait short and retry asynchronously, and refuse a
   * SQLite file this process cannot write (it would answer every delivery 503).
   */
  server?: boolean;
  /**
   * serve's drain thread: the main thread has checked the file and runs the ingest thread;
   * this store only drains (no ingest thread of its own), with the same durability.
   */
  drainOnly?: boolean;
}

export function isPostgresUrl(database: string): boolean {
  return /^postgres(ql)?:\/\//.test(database);
}

/** Opens the store the `database` setting names: a postgres:// URL or a SQLite file path. */
export async function openStore(database: string, options: OpenStoreOptions): Promise<Store> {
  if (isPostgresUrl(database)) {
    const { PostgresStore } = await import('./postgres/index.js');
    return PostgresStore.open(database, options);
  }
  if (options.drainOnly === true) return new SqliteStore(database, { busyTimeoutMs: options.busyTimeoutMs, blockingBusyMs: 5, explicitSync: true });
  if (options.server === true) assertWritableFiles(database);
  const store = new SqliteStore(database, { busyTimeoutMs: options.busyTimeoutMs, ...(options.server === true ? { blockingBusyMs: 5, ingestThread: true, explicitSync: true } : {}) });
  try {
    await store.ready();
    if (options.server === true) assertWritable(store.db, database);
  } catch (e) {
    await store.close().catch(() => undefined);
    throw e;
  }
  return store;
}
