/** Operator operations on the store (purge, replay, events, stats). */
// eslint-disable-next-line @typescript-eslint/no-empty-object-type
export interface OpsStore {}
