import { isReceiverError } from '../errors.js';

/**
 * Group commit: requests that arrive in the same event-loop turn share one transaction.
 * The batch is flushed from setImmediate (a microtask would run before the other
 * requests of the turn have been parsed, and batch nothing). One batch is in flight at a
 * time; requests arriving meanwhile form the next batch.
 *
 * Each request is resolved only after `commit` returns, i.e. after its transaction has
 * committed. If a batch fails for a reason other than the database being unavailable,
 * its items are retried one per transaction, so one bad item cannot fail innocent ones.
 */
export class GroupCommit<I, O> {
  #queue: { item: I; resolve: (o: O) => void; reject: (e: unknown) => void }[] = [];
  #scheduled = false;
  #inFlight: Promise<void> | undefined;

  constructor(
    private readonly commit: (items: I[]) => Promise<O[]>,
    private readonly maxBatch = 512,
  ) {}

  submit(item: I): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      this.#queue.push({ item, resolve, reject });
      this.#schedule();
    });
  }

  /** Resolves when everything submitted so far has been committed or failed. */
  async drain(): Promise<void> {
    while (this.#inFlight !== undefined || this.#queue.length > 0 || this.#scheduled) {
      await (this.#inFlight ?? new Promise((r) => setImmediate(r)));
    }
  }

  #schedule(): void {
    if (this.#scheduled || this.#inFlight !== undefined) return;
    this.#scheduled = true;
    setImmediate(() => {
      this.#scheduled = false;
      this.#inFlight = this.#flush().finally(() => {
        this.#inFlight = undefined;
        if (this.#queue.length > 0) this.#schedule();
      });
    });
  }

  async #flush(): Promise<void> {
    const batch = this.#queue.splice(0, this.maxBatch);
    try {
      const results = await this.commit(batch.map((b) => b.item));
      batch.forEach((b, i) => b.resolve(results[i] as O));
    } catch (e) {
      if (batch.length === 1 || isReceiverError(e, 'unavailable')) {
        for (const b of batch) b.reject(e);
        return;
      }
      for (const b of batch) {
        try {
          const [result] = await this.commit([b.item]);
          b.resolve(result as O);
        } catch (err) {
          b.reject(err);
        }
      }
    }
  }
}
