import type { ReplayResult } from '../store/ops-types.js';

/** The JSON document of `replay --json` (and of the admin API's replay routes). */
export function replayJson(result: ReplayResult) {
  return {
    replayed: result.replayed.map((e) => ({
      id: e.eventId,
      source: e.source,
      deliveryId: e.deliveryId,
      previousStatus: e.previousStatus,
      force: e.force,
      ...(e.route === undefined ? {} : { route: e.route }),
    })),
    refused: result.refused.map((r) => ({
      id: r.eventId,
      reason: r.reason,
      ...(r.reason === 'processing'
        ? { leaseOwner: r.leaseOwner ?? null, leaseExpiresAt: r.leaseExpiresAt == null ? null : new Date(r.leaseExpiresAt).toISOString() }
        : {}),
      ...(r.reason === 'no_route' ? { route: r.route, routes: r.routes ?? [] } : {}),
    })),
  };
}
