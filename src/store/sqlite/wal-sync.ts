import { closeSync, fdatasyncSync, openSync } from 'node:fs';
import { open, stat, type FileHandle } from 'node:fs/promises';

/**
 * Durability for `serve`, with no fsync under the write lock and none on the event loop.
 *
 * `serve`'s connections commit with `synchronous=NORMAL`: COMMIT writes the transaction's
 * frames to the write-ahead log (the OS page cache) and releases the lock without waiting
 * for the disk. A commit that must survive a power loss before anything acts on it (an
 * ingest answer, the `running` mark of an external effect) then waits for an fdatasync of
 * the WAL file made after it: that is exactly what `synchronous=FULL` does inside COMMIT,
 * moved out of the lock. It is sound because a WAL is only appended to between checkpoints,
 * and in NORMAL mode SQLite syncs the WAL before it checkpoints and the database file
 * after; frames already checkpointed are durable in the database file, so a WAL restarted
 * over them loses nothing. The WAL file is replaced only when the last connection closes
 * (never while `serve` holds its own), and is reopened if its inode changes.
 *
 * One fdatasync covers every commit made before it started: callers who arrive while one
 * is running share the next one (group sync).
 */
export class WalSync {
  readonly #path: string;
  #file: { handle: FileHandle; ino: number } | undefined;
  #running: Promise<void> | undefined;
  #next: Promise<void> | undefined;
  #soon: NodeJS.Timeout | undefined;
  #syncs = 0;

  /** `dbPath`: the database file; its WAL is `<dbPath>-wal`. */
  constructor(dbPath: string) {
    this.#path = `${dbPath}-wal`;
  }

  /** How many fdatasyncs were made (tests, benchmarks). */
  get syncs(): number {
    return this.#syncs;
  }

  /** Resolves once every commit made before this call is on disk. Runs on libuv's thread pool. */
  sync(): Promise<void> {
    if (this.#running === undefined) {
      const run: Promise<void> = this.#fdatasync().finally(() => {
        if (this.#running === run) this.#running = undefined;
      });
      this.#running = run;
      return run;
    }
    // An fsync already running may have started before the caller's commit: wait for the next.
    this.#next ??= this.#running.then(
      () => this.#startNext(),
      () => this.#startNext(),
    );
    return this.#next;
  }

  #startNext(): Promise<void> {
    this.#next = undefined;
    return this.sync();
  }

  /**
   * Makes recent commits durable within `delayMs`, without anyone waiting: the drain's own
   * bookkeeping, whose loss in a power cut would at worst repeat work, as a crash would.
   */
  syncSoon(delayMs = 100): void {
    if (this.#soon !== undefined) return;
    this.#soon = setTimeout(() => {
      this.#soon = undefined;
      // A failed background sync is retried by the next commit's own sync or syncSoon.
      this.sync().catch(() => {});
    }, delayMs);
    this.#soon.unref();
  }

  /** The same, blocking the calling thread (the ingest worker, which has nothing else to do meanwhile). */
  syncBlocking(): void {
    let fd: number;
    try {
      fd = openSync(this.#path, 'r');
    } catch (e) {
      // No WAL: the last connection closed and checkpointed it into the database file.
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw e;
    }
    try {
      fdatasyncSync(fd);
      this.#syncs++;
    } finally {
      closeSync(fd);
    }
  }

  async #fdatasync(): Promise<void> {
    const file = await this.#open();
    if (file === undefined) return;
    await file.handle.datasync();
    this.#syncs++;
  }

  async #open(): Promise<{ handle: FileHandle; ino: number } | undefined> {
    let ino: number;
    try {
      ino = (await stat(this.#path)).ino;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw e;
    }
    if (this.#file?.ino === ino) return this.#file;
    await this.#file?.handle.close();
    this.#file = undefined;
    const handle = await open(this.#path, 'r');
    this.#file = { handle, ino: (await handle.stat()).ino };
    return this.#file;
  }

  async close(): Promise<void> {
    clearTimeout(this.#soon);
    this.#soon = undefined;
    await this.#running?.catch(() => {});
    await this.#next?.catch(() => {});
    await this.#file?.handle.close();
    this.#file = undefined;
  }
}
