import type { Config } from '../config/load.js';
import type { Logger } from '../log.js';
import type { Store } from '../store/types.js';

export interface DrainOptions {
  config: Config;
  store: Store;
  logger: Logger;
  now?: () => number;
  random?: () => number;
}

export interface Drain {
  /** A new event was committed: look for work now. */
  wake(): void;
  /** Stops claiming; waits up to graceMs for the running effect, then leaves it to its lease. */
  stop(graceMs: number): Promise<void>;
}

/** Placeholder until the drain lands: claims nothing. */
export function startDrain(_options: DrainOptions): Drain {
  return { wake() {}, async stop() {} };
}
