import type { ResourceLimits } from 'node:worker_threads';

/**
 * V8's limits for serve's ingest and drain threads. Left to itself, each thread's young
 * generation may grow to V8's default of 48 MB (two 16 MB semi-spaces and the young large
 * objects) under a steady load and stays that size when the load stops: the drain thread's
 * held 28 MB resident after 10 s at 1,000 deliveries a second. Capped at 6 MB (2 MB
 * semi-spaces) it takes 4 MB, with no measurable change in CPU time per delivery at 1,000
 * deliveries a second (bench/README.md, "Memory"): the threads' objects live for one
 * delivery or one event, so a scavenge finds few survivors however often it runs. (The
 * unit's node option, which sets the same size on the main thread too, costs throughput
 * at saturation; measured there.) The old generation keeps V8's
 * default limit: a thread that reaches it dies, and a large body must not do that.
 */
export const WORKER_RESOURCE_LIMITS: ResourceLimits = { maxYoungGenerationSizeMb: 6 };
