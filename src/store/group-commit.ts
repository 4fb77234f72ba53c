import { isReceiverError } from '../errors.js';

/**
 * Group commit: requests that arrive in the same event-loop turn share one transaction.
 * The batch is flushed from setImmediate (a microtask would run before the other
 * requests of the turn have been parsed, and batch nothing). Up to `maxInFlight` batches
 * are in flight at a time (1 unless the committer queues them in order, as the SQLite
 * ingest worker does); requests arriving meanwhile form the next batch.
 *
 * Each request is resolved only after `commit` returns, i.e. after its transaction has
 * committed. If a batch fails for a reason other than the database being unavailable,
 * its items are retried one per transaction, so one bad item cannot fail innocent ones.
 */
export class GroupCommit<I, O> {
  #queue: { item: I; at: number; resolve: (o: O) => void; reject: (e: unknown) => void }[] = [];
  #scheduled = false;
  readonly #inFlight = new Set<Promise<void>>();

  /**
   * @param maxInFlight batches handed to `commit` before the first has returned. Above 1,
   *   `commit` must apply its batches one after another in the order it was called: the
   *   SQLite worker does (one connection, messages in order); a PostgreSQL connection
   *   shared by concurrent transactions would not.
   * `commit` is also given when the oldest of its items was submitted (Date.now()), so that
   * a wait for a lock can count the time the items already spent queued behind other batches.
   */
  constructor(
    private readonly commit: (items: I[], since: number) => Promise<O[]>,
    private readonly maxBatch = 512,
    private readonly maxInFlight = 1,
  ) {}

  submit(item: I): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      this.#queue.push({ item, at: Date.now(), resolve, reject });
      this.#schedule();
    });
  }

  /** Resolves when everything submitted so far has been committed or failed. */
  async settled(): Promise<void> {
    while (this.#inFlight.size > 0 || this.#queue.length > 0 || this.#scheduled) {
      await (this.#inFlight.size > 0 ? Promise.race(this.#inFlight) : new Promise((r) => setImmediate(r)));
    }
  }

  #schedule(): void {
    if (this.#scheduled || this.#inFlight.size >= this.maxInFlight) return;
    this.#scheduled = true;
    setImmediate(() => {
      this.#scheduled = false;
      const flush: Promise<void> = this.#flush().finally(() => {
        this.#inFlight.delete(flush);
        if (this.#queue.length > 0) this.#schedule();
      });
      this.#inFlight.add(flush);
    });
  }

  async #flush(): Promise<void> {
    const batch = this.#queue.splice(0, this.maxBatch);
    const [oldest] = batch;
    if (oldest === undefined) return;
    try {
      const results = await this.commit(
        batch.map((b) => b.item),
        oldest.at,
      );
      batch.forEach((b, i) => b.resolve(results[i] as O));
    } catch (e) {
      if (batch.length === 1 || isReceiverError(e, 'unavailable')) {
        for (const b of batch) b.reject(e);
        return;
      }
      for (const b of batch) {
        try {
          const [result] = await this.commit([b.item], b.at);
          b.resolve(result as O);
        } catch (err) {
          b.reject(err);
        }
      }
    }
  }
}
