import type { DrainBackend, ModuleTransaction, WriteOptions } from '../drain/backend.js';
import type { Steps, StmtResult } from '../sql.js';
import { commit, rollbackAndRelease, type Conn } from './conn.js';
import { postgresError } from './errors.js';
import { connectionLost } from './open.js';
import { dialect, runAlone, runSteps } from './steps.js';

/** How long a module effect that gave up waits for its cancelled statement before its connection is closed. */
const GIVE_UP_MS = 1000;

/** Whether `p` settled within `ms` (it is not stopped when it did not). */
function within(p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
  return Promise.race([p.then(() => true), late]).finally(() => clearTimeout(timer));
}

/**
 * The drain's PostgreSQL. Several receivers drain one database together, each process
 * serial. What PostgreSQL differs in (besides its dialect: claims skip rows another
 * transaction holds, and every decision about one effect key takes a transaction-scoped
 * advisory lock on it; see steps.ts):
 * - A statement that is a whole operation runs on its own (autocommit: one round trip);
 *   the others in BEGIN ... COMMIT on one pooled connection, retried after a deadlock.
 *   A COMMIT returns once it is flushed: every commit is durable when it resolves.
 * - A module effect's transaction has a connection of its own, held across the handler,
 *   with no statement timeout (the effect's own timeout bounds the handler); each of the
 *   handler's statements runs under a savepoint, so one that fails leaves the transaction
 *   as it was, and a statement still running when the handler gives up is cancelled.
 */
export class PostgresDrainBackend implements DrainBackend {
  readonly name = 'postgres';
  readonly dialect = dialect;
  readonly #c: Conn;

  constructor(c: Conn) {
    this.#c = c;
  }

  read<T>(what: string, steps: Steps<T>): Promise<T> {
    return runAlone(this.#c, what, steps);
  }

  write<T>(what: string, steps: () => Steps<T>, options: WriteOptions = {}): Promise<T> {
    if (options.oneStatement === true) return runAlone(this.#c, what, steps());
    return this.#c.transaction(what, (client) => runSteps(client, steps()));
  }

  renew(what: string, steps: () => Steps<void>): Promise<void> {
    return runAlone(this.#c, what, steps());
  }

  async sync(): Promise<void> {}

  /** Each step commits on its own: several receivers' drains share the database. */
  inGroup<T>(fn: () => Promise<T>): Promise<T> {
    return fn();
  }

  async commitGroup(): Promise<void> {}

  async moduleTransaction(what: string): Promise<ModuleTransaction> {
    const c = this.#c;
    const client = await c.connect(what);
    try {
      await client.query('BEGIN');
      // Bounded by the effect's timeoutSeconds (the caller's timer, then handlerDone cancels
      // the statement running), not by the pool's statement timeout (busyTimeoutMs, meant
      // for ingest), which would cut a legitimate long query short.
      await client.query(`SELECT set_config('statement_timeout', '0', true)`);
    } catch (e) {
      await rollbackAndRelease(client);
      throw postgresError(e, what);
    }
    let running = 0;
    let chain: Promise<unknown> = Promise.resolve();
    /** Set when the connection was closed under a statement the server would not end. */
    let closed: string | undefined;
    const statement = async (sql: string, params: readonly unknown[]): Promise<StmtResult> => {
      running += 1;
      try {
        await client.query('SAVEPOINT receiver_effect_statement');
        try {
          const result = await client.query(sql, params as unknown[]);
          await client.query('RELEASE SAVEPOINT receiver_effect_statement');
          return { rows: result.rows, changes: result.rowCount ?? 0 };
        } catch (e) {
          await client.query('ROLLBACK TO SAVEPOINT receiver_effect_statement');
          await client.query('RELEASE SAVEPOINT receiver_effect_statement');
          throw e;
        }
      } finally {
        running -= 1;
      }
    };
    return {
      run: (steps) => runSteps(client, steps),
      // One at a time, in call order, whether or not the handler awaits each.
      statement: (sql, params) => {
        const result = chain.then(
          () => statement(sql, params),
          () => statement(sql, params),
        );
        chain = result.catch(() => {});
        return result;
      },
      handlerDone: async (gaveUp) => {
        // A handler that gave up (its timeoutSeconds, a shutdown) is rolled back anyway: a
        // statement of its still running is cancelled rather than waited for (up to the lease).
        // Where the server does not answer at all (a network partition), neither the cancel
        // nor the statement ends: after GIVE_UP_MS the connection is closed instead, which
        // ends the transaction on the server, and the drain goes on.
        if (gaveUp && running > 0) {
          await within(
            c.cancel(what, client).catch(() => undefined),
            GIVE_UP_MS,
          );
          if (!(await within(chain, GIVE_UP_MS))) {
            closed = `the database did not answer within ${GIVE_UP_MS} ms after the effect gave up; its connection was closed`;
            client.release(new Error(closed));
          }
        }
        await chain;
      },
      commit: async () => {
        await commit(client, what);
        client.release();
      },
      rollback: async () => {
        if (closed === undefined) await rollbackAndRelease(client);
      },
      fail: async (e) => {
        if (closed === undefined) await rollbackAndRelease(client);
        return postgresError(e, what);
      },
      connectionLost: () => closed ?? connectionLost(client),
    };
  }
}
