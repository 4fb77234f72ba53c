import type { CatchUpRunRecord, CatchUpStore, FetchedEvent } from './catch-up-types.js';
import type { AttemptRecord, ClaimLimits, DrainStore, EffectFinish, EffectStart, EventPlan, Lease } from './drain-types.js';
import type { DrainBackend } from './drain/backend.js';
import { assignLanes, claimOwners, claimUnits, expireClaims, lookForWork, nextDueAt, planEvents, unplannedEvents } from './drain/claim.js';
import { renewLeases } from './drain/lease.js';
import { beginEffect, finishEffect, recordAttempt } from './drain/ledger.js';
import { runTransactionalEffect } from './drain/module-tx.js';
import { buryUnit, completeUnit, releaseUnits, retryUnit } from './drain/settle.js';
import type { SharedOps } from './ops-steps.js';
import type { ListEventsQuery, ReplayOptions, SearchEventsQuery } from './ops-types.js';

/**
 * What both stores share: the DrainStore, written once in ./drain/ over the backend the
 * store gives (`drainBackend()`, which may open its connection on first use); the operator
 * operations both stores run alike (`sharedOps`, ./ops-steps.ts); and catch-up's
 * (`catchUp`, see each store's catch-up.ts).
 */
export abstract class StoreBase implements Omit<DrainStore, 'claimsAreLocal' | 'moduleTransactionsAtOnce'>, SharedOps, CatchUpStore {
  protected abstract drainBackend(): DrainBackend;
  protected abstract readonly sharedOps: SharedOps;
  protected abstract readonly catchUp: CatchUpStore;

  // DrainStore: planning and claims (drain/claim.ts), leases (drain/lease.ts), the effect
  // ledger (drain/ledger.ts), settles (drain/settle.ts), module effects (drain/module-tx.ts).
  unplannedEvents(limit: number) {
    return unplannedEvents(this.drainBackend(), limit);
  }
  planEvents(plans: readonly EventPlan[], now: number) {
    return planEvents(this.drainBackend(), plans, now);
  }
  assignLanes(lanes: ReadonlyMap<string, string>) {
    return assignLanes(this.drainBackend(), lanes);
  }
  claimUnits(owner: string, now: number, leaseMs: number, limits: ClaimLimits, plans?: readonly EventPlan[]) {
    return claimUnits(this.drainBackend(), owner, now, leaseMs, limits, plans);
  }
  inGroup<T>(fn: () => Promise<T>): Promise<T> {
    return this.drainBackend().inGroup(fn);
  }
  commitGroup() {
    return this.drainBackend().commitGroup();
  }
  renewLeases(leases: readonly Lease[], now: number, leaseMs: number) {
    return renewLeases(this.drainBackend(), leases, now, leaseMs);
  }
  releaseUnits(leases: readonly Lease[], now: number) {
    return releaseUnits(this.drainBackend(), leases, now);
  }
  claimOwners() {
    return claimOwners(this.drainBackend());
  }
  expireClaims(ownerPrefix: string, now: number) {
    return expireClaims(this.drainBackend(), ownerPrefix, now);
  }
  nextDueAt(busyLanes: readonly string[], now: number) {
    return nextDueAt(this.drainBackend(), busyLanes, now);
  }
  lookForWork(limit: number, busyLanes: readonly string[] | undefined, now: number) {
    return lookForWork(this.drainBackend(), limit, busyLanes, now);
  }
  beginEffect(lease: Lease, attempt: number, start: EffectStart, now: number, leaseMs: number) {
    return beginEffect(this.drainBackend(), lease, attempt, start, now, leaseMs);
  }
  finishEffect(finish: EffectFinish, now: number) {
    return finishEffect(this.drainBackend(), finish, now);
  }
  runTransactionalEffect(...[lease, attempt, start, handler, now, leaseMs, options]: Parameters<DrainStore['runTransactionalEffect']>) {
    const completeOnOk = options?.completeOnOk === true;
    return runTransactionalEffect(this.drainBackend(), { lease, attempt, start, handler, now, leaseMs, completeOnOk });
  }
  recordAttempt(record: AttemptRecord) {
    return recordAttempt(this.drainBackend(), record);
  }
  completeUnit(lease: Lease, now: number) {
    return completeUnit(this.drainBackend(), lease, now);
  }
  retryUnit(lease: Lease, error: string, nextAttemptAt: number) {
    return retryUnit(this.drainBackend(), lease, error, nextAttemptAt);
  }
  buryUnit(lease: Lease, error: string, now: number) {
    return buryUnit(this.drainBackend(), lease, error, now);
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
  countExpiredBodyKeys(now: number) {
    return this.sharedOps.countExpiredBodyKeys(now);
  }
  purgeBodyKeysBatch(now: number, limit: number) {
    return this.sharedOps.purgeBodyKeysBatch(now, limit);
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
  laneStats() {
    return this.sharedOps.laneStats();
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
  lockCatchUp(source: string) {
    return this.catchUp.lockCatchUp(source);
  }
}
