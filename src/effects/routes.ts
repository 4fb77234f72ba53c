import type { RouteConfig } from '../config/schema.js';
import { globMatch, matchesFilter, parseBody, resolveTemplate, type TemplateContext } from '../template.js';
import type { EffectEvent } from './types.js';

/** One route's effect for one event, with its keys resolved. */
export interface PlannedEffect {
  kind: 'effect';
  route: RouteConfig;
  businessKey: string;
  /** `<route>:<business key>`: the effect ledger's key. */
  effectKey: string;
  version?: string | undefined;
}

/** A route that matches the event but whose key or version template resolved to nothing. */
export interface RouteFailure {
  kind: 'failure';
  route: RouteConfig;
  error: string;
}

export type RoutePlan = PlannedEffect | RouteFailure;

export const effectKeyOf = (route: string, businessKey: string) => `${route}:${businessKey}`;

/** The route's source and event-type globs select this event (its filter not yet asked). */
function routeSelects(route: RouteConfig, source: string, eventType: string): boolean {
  return (route.source === '*' || route.source === source) && route.events.some((g) => globMatch(g, eventType));
}

/**
 * At ingest: does any route apply to this delivery (source, event type, filter)? The same
 * rule the drain applies (planEffects); an event none applies to is stored done. A filter
 * on `{id}` (the event id, unknown before the insert) is left for the drain to decide.
 */
export function anyRouteApplies(
  routes: readonly RouteConfig[],
  e: { source: string; eventType: string; headers: Record<string, string>; body: Buffer },
): boolean {
  const selecting = routes.filter((r) => routeSelects(r, e.source, e.eventType));
  if (selecting.some((r) => r.filter === undefined || Object.hasOwn(r.filter, 'id'))) return true;
  if (selecting.length === 0) return false;
  const ctx: TemplateContext = { body: parseBody(e.body, e.headers['content-type']), headers: e.headers, source: e.source, type: e.eventType };
  return selecting.some((r) => matchesFilter(r.filter!, ctx));
}

/** The template context of a stored event: body parsed once, `{id}` is the event id. */
export function templateContext(event: EffectEvent): TemplateContext & { body: unknown } {
  return { body: parseBody(event.body, event.headers['content-type']), headers: event.headers, source: event.source, type: event.eventType, id: event.id };
}

/**
 * The effects an event calls for, in configuration order: routes whose source (or "*"),
 * event-type globs and filter match. A key or version template that resolves to nothing is
 * that route's failure, never a silent skip: the event retries and, if it never resolves,
 * goes dead with the message naming the template.
 */
export function planEffects(routes: readonly RouteConfig[], event: EffectEvent, ctx: TemplateContext = templateContext(event)): RoutePlan[] {
  const plans: RoutePlan[] = [];
  for (const route of routes) {
    if (!routeSelects(route, event.source, event.eventType)) continue;
    if (route.filter !== undefined && !matchesFilter(route.filter, ctx)) continue;
    const businessKey = resolveTemplate(route.key, ctx);
    if (businessKey === undefined) {
      plans.push({ kind: 'failure', route, error: `key template "${route.key}" resolved to nothing for this event` });
      continue;
    }
    let version: string | undefined;
    if (route.version !== undefined) {
      version = resolveTemplate(route.version, ctx);
      if (version === undefined) {
        plans.push({ kind: 'failure', route, error: `version template "${route.version}" resolved to nothing for this event` });
        continue;
      }
    }
    plans.push({ kind: 'effect', route, businessKey, effectKey: effectKeyOf(route.name, businessKey), version });
  }
  return plans;
}
