import type { RouteConfig } from '../config/schema.js';
import { globMatch, lookup, matchesFilter, parseBody, resolveTemplate, type TemplateContext } from '../template.js';
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

/** The lane a route's effects run in: its `lane`, by default its name. */
export const laneOf = (route: RouteConfig): string => route.lane ?? route.name;

const effectKeyOf = (route: string, businessKey: string) => `${route}:${businessKey}`;

/** The route's source and event-type globs select this event (its filter not yet asked). */
function routeSelects(route: RouteConfig, source: string, eventType: string): boolean {
  return (route.source === '*' || route.source === source) && route.events.some((g) => globMatch(g, eventType));
}

/**
 * At ingest (and catch-up): does any route apply to this delivery (source, event type,
 * filter)? The same rule the drain applies (planRoutes). Undefined when one does, or may:
 * a filter on `{id}` (the event id, unknown before the insert) is left for the drain to
 * decide. Otherwise why none does, one decision per route (routeDecisions): the event is
 * stored done with it. The explanation is built only for such events, from what the check
 * already computed.
 */
export function whyNoRouteApplies(
  routes: readonly RouteConfig[],
  e: { source: string; eventType: string; headers: Record<string, string>; body: Buffer },
): string | undefined {
  const selecting = routes.filter((r) => routeSelects(r, e.source, e.eventType));
  if (selecting.some((r) => r.filter === undefined || Object.hasOwn(r.filter, 'id'))) return undefined;
  let ctx: TemplateContext | undefined;
  if (selecting.length > 0) {
    ctx = { body: parseBody(e.body, e.headers['content-type']), headers: e.headers, source: e.source, type: e.eventType };
    if (selecting.some((r) => matchesFilter(r.filter!, ctx!))) return undefined;
  }
  const lines: string[] = [];
  for (const route of routes) {
    if (route.source !== '*' && route.source !== e.source) continue;
    lines.push(ctx !== undefined && routeSelects(route, e.source, e.eventType) ? filterMismatch(route, ctx) : typeMismatch(route, e.eventType));
  }
  return routeDecisions(lines, e.source);
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
  return planRoutes(routes, event, ctx).plans;
}

/** planEffects, with why each route of the event's source did or did not apply (routeDecisions). */
export function planRoutes(
  routes: readonly RouteConfig[],
  event: EffectEvent,
  ctx: TemplateContext = templateContext(event),
): { plans: RoutePlan[]; decisions: string } {
  const plans: RoutePlan[] = [];
  const lines: string[] = [];
  for (const route of routes) {
    if (route.source !== '*' && route.source !== event.source) continue;
    if (!route.events.some((g) => globMatch(g, event.eventType))) {
      lines.push(typeMismatch(route, event.eventType));
      continue;
    }
    if (route.filter !== undefined && !matchesFilter(route.filter, ctx)) {
      lines.push(filterMismatch(route, ctx));
      continue;
    }
    const businessKey = resolveTemplate(route.key, ctx);
    if (businessKey === undefined) {
      plans.push({ kind: 'failure', route, error: `key template "${route.key}" resolved to nothing for this event` });
      lines.push(`${route.name}: key template "${route.key}" resolved to nothing`);
      continue;
    }
    let version: string | undefined;
    if (route.version !== undefined) {
      version = resolveTemplate(route.version, ctx);
      if (version === undefined) {
        plans.push({ kind: 'failure', route, error: `version template "${route.version}" resolved to nothing for this event` });
        lines.push(`${route.name}: version template "${route.version}" resolved to nothing`);
        continue;
      }
    }
    plans.push({ kind: 'effect', route, businessKey, effectKey: effectKeyOf(route.name, businessKey), version });
    lines.push(`${route.name}: applies (key ${quote(businessKey)}${version === undefined ? '' : `, version ${quote(version)}`})`);
  }
  return { plans, decisions: routeDecisions(lines, event.source) };
}

/** The longest stored decision list, in characters: it is read by a person, and stored with every such event. */
export const ROUTE_DECISIONS_MAX = 1000;
/** A value from the event (type, filter value, key) in a decision: quoted, and cut to this many characters. */
const VALUE_MAX = 60;

/** Sender-chosen text in a decision: JSON-quoted (so it holds no line break), cut. */
function quote(value: unknown): string {
  if (value === undefined) return 'missing';
  const text = JSON.stringify(value) ?? String(value);
  return text.length > VALUE_MAX ? `${text.slice(0, VALUE_MAX - 1)}…` : text;
}

function typeMismatch(route: RouteConfig, eventType: string): string {
  return `${route.name}: event type ${quote(eventType)} not in [${route.events.join(', ')}]`;
}

/** The first filter pair the event does not meet, with the value it has. */
function filterMismatch(route: RouteConfig, ctx: TemplateContext): string {
  for (const [path, want] of Object.entries(route.filter ?? {})) {
    if (!matchesFilter({ [path]: want }, ctx)) return `${route.name}: filter ${path} = ${quote(lookup(path, ctx))}, wanted ${quote(want)}`;
  }
  return `${route.name}: filter not met`;
}

/**
 * The stored decision list: one line per route of the event's source (routes for other
 * sources are left out), or that there is none; cut to ROUTE_DECISIONS_MAX characters.
 */
function routeDecisions(lines: readonly string[], source: string): string {
  if (lines.length === 0) return `no route for source ${quote(source)}`;
  let text = '';
  for (const [i, line] of lines.entries()) {
    const next = i === 0 ? line : `${text}\n${line}`;
    // Room is kept for the line that says how many were left out.
    if (i > 0 && next.length > ROUTE_DECISIONS_MAX - 40) return `${text}\n(${lines.length - i} more route(s) not shown)`;
    text = next;
  }
  return text.length > ROUTE_DECISIONS_MAX ? `${text.slice(0, ROUTE_DECISIONS_MAX - 1)}…` : text;
}
