import { randomBytes } from 'node:crypto';
import pg from 'pg';

/**
 * The PostgreSQL server the tests use: RECEIVER_TEST_POSTGRES_URL, else the local server
 * (trust auth). Each test file creates its own databases and drops them at the end.
 *
 * When RECEIVER_TEST_POSTGRES_URL is set (CI sets it in .ci/run), an unreachable server
 * fails the tests. When it is not set and nothing answers locally, PostgreSQL tests are
 * skipped with a visible notice.
 */
export const POSTGRES_ENV = 'RECEIVER_TEST_POSTGRES_URL';
const fromEnv = process.env[POSTGRES_ENV] ?? '';
export const postgresRequired = fromEnv !== '';
export const postgresBaseUrl = postgresRequired ? fromEnv : 'postgres://postgres@127.0.0.1:5432/postgres';

let probe: Promise<boolean> | undefined;

/** bigint columns (ids, counts, ms times) as numbers, as the store reads them. */
const numericInt8 = {
  getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
    oid === pg.types.builtins.INT8 && format !== 'binary' ? (v: string) => Number(v) : pg.types.getTypeParser(oid, format)) as typeof pg.types.getTypeParser,
};

/** Whether the server answers. Throws (a test failure) when it must answer and does not. */
export function postgresAvailable(): Promise<boolean> {
  probe ??= (async () => {
    const client = new pg.Client({ connectionString: postgresBaseUrl, connectionTimeoutMillis: 3000 });
    try {
      await client.connect();
      await client.query('SELECT 1');
      return true;
    } catch (e) {
      const why = e instanceof Error ? e.message || (e as { code?: string }).code || e.name : String(e);
      if (postgresRequired) throw new Error(`${POSTGRES_ENV} is set but PostgreSQL at ${redact(postgresBaseUrl)} does not answer: ${why}`);
      console.warn(`\n*** PostgreSQL tests SKIPPED: nothing answers at ${redact(postgresBaseUrl)} (${why}). Set ${POSTGRES_ENV} to run them. ***\n`);
      return false;
    } finally {
      await client.end().catch(() => {});
    }
  })();
  return probe;
}

function redact(url: string): string {
  return url.replace(/\/\/([^:/@]+):[^@]*@/, '//$1:***@');
}

export interface TestDatabase {
  name: string;
  url: string;
  /** A plain client on the database, for setup and for moving time in SQL. */
  query<R extends pg.QueryResultRow = Record<string, unknown>>(sql: string, params?: unknown[]): Promise<R[]>;
  drop(): Promise<void>;
}

async function admin<T>(fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: postgresBaseUrl, connectionTimeoutMillis: 5000 });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/** CREATE DATABASE receiver_test_<random> on the test server; drop() removes it (with any connections left). */
export async function createTestDatabase(): Promise<TestDatabase> {
  const name = `receiver_test_${randomBytes(6).toString('hex')}`;
  await admin((c) => c.query(`CREATE DATABASE ${name}`));
  const u = new URL(postgresBaseUrl);
  u.pathname = `/${name}`;
  const url = u.toString();
  let client: pg.Client | undefined;
  const connected = async () => {
    if (client === undefined) {
      const c = new pg.Client({ connectionString: url, types: numericInt8 });
      // Tests terminate connections on purpose (and drop() forces them closed): this one is
      // then replaced on its next use instead of failing the run with an unhandled error.
      c.on('error', () => {
        if (client === c) client = undefined;
      });
      client = c;
      await c.connect();
    }
    return client;
  };
  // One client: a query waits for the one before it (pg deprecates queries that overlap on a
  // client, and tests poll several at once with Promise.all).
  let previous: Promise<unknown> = Promise.resolve();
  return {
    name,
    url,
    query<R extends pg.QueryResultRow>(sql: string, params: unknown[] = []) {
      const run = previous.then(async () => (await (await connected()).query<R>(sql, params)).rows);
      previous = run.catch(() => {});
      return run;
    },
    async drop() {
      await client?.end().catch(() => {});
      client = undefined;
      await admin((c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`));
    },
  };
}
