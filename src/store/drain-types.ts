/** Drain operations on the store (claims, leases, the effect ledger). Filled in by the drain. */
// eslint-disable-next-line @typescript-eslint/no-empty-object-type
export interface DrainStore {}
