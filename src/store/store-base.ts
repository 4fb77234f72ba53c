import type { CatchUpRunRecord, CatchUpStore, FetchedEvent } from './catch-up-types.js';
import type { ModuleEffect } from './drain-steps.js';
import type { AttemptRecord, DrainStore, EffectFinish, EffectStart, Lease, TransactionalOutcome } from './drain-types.js';
import type { SharedOps } from './ops-steps.js';
import type { ListEventsQuery, ReplayOptions, SearchEventsQuery } from './ops-types.js';

/** A store's function for each DrainStore method: the same arguments, after the connection it runs on. */
type OnConnection<C, T> = { [K in keyof T]: T[K] extends (...args: infer A) => infer R ? (c: C, ...args: A) => R : never };

/** What a store's drain.ts exports: one function per drain operation, taking its connection first. */
export type DrainFunctions<C> = OnConnection<C, Omit<DrainStore, 'claimsAreLocal' | 'runTransactionalEffect' | 'inGroup'>> & {
  runTransactionalEffect(c: C, m: ModuleEffect): Promise<TransactionalOutcome>;
  inGroup<T>(c: C, fn: () => Promise<T>): Promise<T>;
};

/**
 * The DrainStore, shared OpsStore and CatchUpStore methods, written once: each calls the
 * store's own drain function on the connection the store gives (`drainConnection()`,
 * which may open it on first use), the operator operation both stores share
 * (`sharedOps`), or the store's catch-up operations (`catchUp`, see its catch-up.ts).
 */
export abstract class StoreBase<C> implements Omit<DrainStore, 'claimsAreLocal'>, SharedOps, CatchUpStore {
  constructor(private readonly drain: DrainFunctions<C>) {}

  protected abstract drainConnection(): C;
  protected abstract readonly sharedOps: SharedOps;
  protected abstract readonly catchUp: CatchUpStore;

  // DrainStore (claims, leases, the effect ledger): see ./drain-steps.ts and each store's drain.ts.
  claimEvent(owner: string, now: number, leaseMs: number) {
    return this.drain.claimEvent(this.drainConnection(), owner, now, leaseMs);
  }
  claimEvents(owner: string, now: number, leaseMs: number, limit: number) {
    return this.drain.claimEvents(this.drainConnection(), owner, now, leaseMs, limit);
  }
  inGroup<T>(fn: () => Promise<T>): Promise<T> {
    return this.drain.inGroup(this.drainConnection(), fn);
  }
  renewLeases(leases: readonly Lease[], now: number, leaseMs: number) {
    return this.drain.renewLeases(this.drainConnection(), leases, now, leaseMs);
  }
  releaseEvents(leases: readonly Lease[]) {
    return this.drain.releaseEvents(this.drainConnection(), leases);
  }
  claimOwners() {
    return this.drain.claimOwners(this.drainConnection());
  }
  expireClaims(ownerPrefix: string, now: number) {
    return this.drain.expireClaims(this.drainConnection(), ownerPrefix, now);
  }
  nextDueAt() {
    return this.drain.nextDueAt(this.drainConnection());
  }
  renewLease(lease: Lease, now: number, leaseMs: number) {
    return this.drain.renewLease(this.drainConnection(), lease, now, leaseMs);
  }
  beginEffect(lease: Lease, attempt: number, start: EffectStart, now: number, leaseMs: number) {
    return this.drain.beginEffect(this.drainConnection(), lease, attempt, start, now, leaseMs);
  }
  finishEffect(finish: EffectFinish, now: number) {
    return this.drain.finishEffect(this.drainConnection(), finish, now);
  }
  runTransactionalEffect(...[lease, attempt, start, handler, now, leaseMs, options]: Parameters<DrainStore['runTransactionalEffect']>) {
    const completeOnOk = options?.completeOnOk === true;
    const routeDecisions = options?.routeDecisions;
    return this.drain.runTransactionalEffect(this.drainConnection(), { lease, attempt, start, handler, now, leaseMs, completeOnOk, routeDecisions });
  }
  recordAttempt(record: AttemptRecord) {
    return this.drain.recordAttempt(this.drainConnection(), record);
  }
  completeEvent(lease: Lease, now: number, routeDecisions?: string) {
    return this.drain.completeEvent(this.drainConnection(), lease, now, routeDecisions);
  }
  retryEvent(lease: Lease, error: string, nextAttemptAt: number, routeDecisions?: string) {
    return this.drain.retryEvent(this.drainConnection(), lease, error, nextAttemptAt, routeDecisions);
  }
  buryEvent(lease: Lease, error: string, now: number, routeDecisions?: string) {
    return this.drain.buryEvent(this.drainConnection(), lease, error, now, routeDecisions);
  }

  // OpsStore, the operations both stores share: see ./ops-steps.ts. Purge batches and the
  // queue gauges are each store's own.
  countPurgeable(receivedBefore: number) {
    return this.sharedOps.countPurgeable(receivedBefore);
  }
  countBodiesDroppable(receivedBefore: number) {
    return this.sharedOps.countBodiesDroppable(receivedBefore);
  }
  countLedgerPurgeable(finishedBefore: number) {
    return this.sharedOps.countLedgerPurgeable(finishedBefore);
  }
  purgeLedgerBatch(finishedBefore: number, afterKey: string, limit: number) {
    return this.sharedOps.purgeLedgerBatch(finishedBefore, afterKey, limit);
  }
  findEventId(source: string, deliveryId: string) {
    return this.sharedOps.findEventId(source, deliveryId);
  }
  nearDeliveryIds(given: string, options: { source?: string | undefined; limit: number; scanLimit: number }) {
    return this.sharedOps.nearDeliveryIds(given, options);
  }
  startAdminSession(id: string, expiresAt: number, now: number) {
    return this.sharedOps.startAdminSession(id, expiresAt, now);
  }
  isAdminSessionLive(id: string, now: number) {
    return this.sharedOps.isAdminSessionLive(id, now);
  }
  endAdminSession(id: string) {
    return this.sharedOps.endAdminSession(id);
  }
  replayEvents(eventIds: readonly number[], options: ReplayOptions) {
    return this.sharedOps.replayEvents(eventIds, options);
  }
  replayDead(options: ReplayOptions) {
    return this.sharedOps.replayDead(options);
  }
  listEvents(query: ListEventsQuery) {
    return this.sharedOps.listEvents(query);
  }
  searchEvents(query: SearchEventsQuery) {
    return this.sharedOps.searchEvents(query);
  }
  deliveriesPerHour(since: number) {
    return this.sharedOps.deliveriesPerHour(since);
  }
  effectFailuresByRoute(since: number) {
    return this.sharedOps.effectFailuresByRoute(since);
  }
  getEvent(eventId: number) {
    return this.sharedOps.getEvent(eventId);
  }
  stats(now: number) {
    return this.sharedOps.stats(now);
  }

  // CatchUpStore: see ./catch-up-steps.ts and each store's catch-up.ts.
  storedDeliveryIds(source: string, deliveryIds: readonly string[]) {
    return this.catchUp.storedDeliveryIds(source, deliveryIds);
  }
  storeFetched(event: FetchedEvent) {
    return this.catchUp.storeFetched(event);
  }
  catchUpState(source: string) {
    return this.catchUp.catchUpState(source);
  }
  catchUpStates() {
    return this.catchUp.catchUpStates();
  }
  beginCatchUp(source: string, now: number) {
    return this.catchUp.beginCatchUp(source, now);
  }
  recordCatchUp(source: string, run: CatchUpRunRecord) {
    return this.catchUp.recordCatchUp(source, run);
  }
}
