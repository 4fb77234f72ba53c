import { ReceiverError } from '../../errors.js';
import type { OpenStoreOptions } from '../open.js';
import type { Store } from '../types.js';

export const PostgresStore = {
  async open(_url: string, _options: OpenStoreOptions): Promise<Store> {
    throw new ReceiverError('config', 'the PostgreSQL store is not built yet', { hint: 'use a SQLite file path for "database"' });
  },
};
