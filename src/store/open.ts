import { SqliteStore } from './sqlite/index.js';
import { assertWritable, assertWritableFiles } from './sqlite/open.js';
import { isPostgresUrl } from '../config/database.js';
import type { OpenStoreOptions, Store } from './types.js';

export type { OpenStoreOptions } from './types.js';

export { isPostgresUrl } from '../config/database.js';

/** Opens the store the `database` setting names: a postgres:// URL or a SQLite file path. */
export async function openStore(database: string, options: OpenStoreOptions): Promise<Store> {
  if (isPostgresUrl(database)) {
    const { PostgresStore } = await import('./postgres/index.js');
    return PostgresStore.open(database, options);
  }
  if (options.drainOnly === true)
    return new SqliteStore(database, { busyTimeoutMs: options.busyTimeoutMs, blockingBusyMs: 5, explicitSync: true, ingestWaiting: options.ingestWaiting });
  if (options.server === true) assertWritableFiles(database);
  const store = new SqliteStore(database, {
    busyTimeoutMs: options.busyTimeoutMs,
    ...(options.server === true ? { blockingBusyMs: 5, ingestThread: true, explicitSync: true } : {}),
  });
  try {
    await store.ready();
    if (options.server === true) assertWritable(store.db, database);
  } catch (e) {
    await store.close().catch(() => undefined);
    throw e;
  }
  return store;
}
