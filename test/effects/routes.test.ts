import { describe, expect, it } from 'vitest';
import { planEffects, planRoutes, ROUTE_DECISIONS_MAX, whyNoRouteApplies } from '../../src/effects/routes.js';
import type { RouteConfig } from '../../src/config/schema.js';

const effect = { exec: ['true'], timeoutSeconds: 30 };
const routes: RouteConfig[] = [
  { name: 'licence', source: 'stripe', events: ['checkout.session.completed'], key: '{body.data.object.id}', effect },
  { name: 'app', source: 'stripe', events: ['invoice.*'], key: '{body.id}', effect },
  { name: 'subs', source: 'stripe', events: ['invoice.paid'], key: '{body.data.object.subscription}', version: '{body.created}', effect },
  { name: 'deploy', source: 'github', events: ['push'], filter: { 'body.ref': 'refs/heads/main' }, key: '{body.after}', effect },
  { name: 'all', source: '*', events: ['*'], key: '{source}:{id}', effect },
];
const ev = (source: string, eventType: string, body: unknown) => ({
  id: 3,
  source,
  deliveryId: 'd',
  eventType,
  headers: { 'content-type': 'application/json' },
  body: Buffer.from(JSON.stringify(body)),
  receivedAt: 0,
});

describe('routes', () => {
  it('matches source, event-type globs and filters, in configuration order, with resolved keys', () => {
    const plans = planEffects(routes, ev('stripe', 'invoice.paid', { id: 'in_1', created: 1700, data: { object: { subscription: 'sub_9' } } }));
    expect(plans.map((p) => (p.kind === 'effect' ? [p.route.name, p.effectKey, p.version] : [p.route.name, p.error]))).toEqual([
      ['app', 'app:in_1', undefined],
      ['subs', 'subs:sub_9', '1700'],
      ['all', 'all:stripe:3', undefined],
    ]);
    expect(planEffects(routes, ev('github', 'push', { ref: 'refs/heads/dev', after: 'c1' })).map((p) => p.route.name)).toEqual(['all']);
    expect(planEffects(routes, ev('github', 'push', { ref: 'refs/heads/main', after: 'c1' })).map((p) => p.route.name)).toEqual(['deploy', 'all']);
  });

  it("a key or version that resolves to nothing is that route's failure, naming the template", () => {
    const plans = planEffects(routes, ev('stripe', 'invoice.paid', { id: 'in_1', data: { object: {} } }));
    expect(plans.filter((p) => p.kind === 'failure')).toMatchObject([
      { route: { name: 'subs' }, error: 'key template "{body.data.object.subscription}" resolved to nothing for this event' },
    ]);
    const noVersion = planEffects(routes, ev('stripe', 'invoice.paid', { id: 'in_1', data: { object: { subscription: 's' } } }));
    expect(noVersion.filter((p) => p.kind === 'failure')).toMatchObject([{ error: 'version template "{body.created}" resolved to nothing for this event' }]);
    const empty = planEffects(routes, ev('stripe', 'checkout.session.completed', { data: { object: { id: '' } } }));
    expect(empty.filter((p) => p.kind === 'failure')).toHaveLength(1);
  });

  it("templates and filters read the event's own fields only, never what every object inherits", () => {
    const only = (filter: RouteConfig['filter'], key = '{body.id}'): RouteConfig[] => [{ name: 'r', source: '*', events: ['*'], filter, key, effect }];
    // The body has no "constructor": a filter asking for it to be absent matches.
    expect(planEffects(only({ 'body.constructor': null }), ev('s', 't', { id: 'a' }))).toHaveLength(1);
    expect(planEffects(only({ 'header.constructor': null }), ev('s', 't', { id: 'a' }))).toHaveLength(1);
    // Present as the body's own field, it is read like any other.
    expect(planEffects(only(undefined, '{body.constructor}'), ev('s', 't', { constructor: 'c1' }))).toMatchObject([{ kind: 'effect', businessKey: 'c1' }]);
    expect(planEffects(only(undefined, '{body.toString}'), ev('s', 't', { id: 'a' }))).toMatchObject([{ kind: 'failure' }]);
  });

  it('decisions list the routes of the event\'s source (and "*"), each with why, capped in length', () => {
    expect(planRoutes(routes, ev('github', 'push', { ref: 'refs/heads/dev', after: 'c1' })).decisions.split('\n')).toEqual([
      'deploy: filter body.ref = "refs/heads/dev", wanted "refs/heads/main"',
      'all: applies (key "github:3")',
    ]);
    expect(planRoutes(routes, ev('stripe', 'invoice.paid', { id: 'in_1', data: { object: { subscription: 's' } } })).decisions.split('\n')).toEqual([
      'licence: event type "invoice.paid" not in [checkout.session.completed]',
      'app: applies (key "in_1")',
      'subs: version template "{body.created}" resolved to nothing',
      'all: applies (key "stripe:3")',
    ]);
    // At ingest: nothing when a route applies, or may (a filter on {id}).
    const gh = (type: string, body: unknown) => ({ source: 'github', eventType: type, headers: {}, body: Buffer.from(JSON.stringify(body)) });
    const ghRoutes = routes.filter((r) => r.source === 'github');
    expect(whyNoRouteApplies(ghRoutes, gh('push', { ref: 'refs/heads/main' }))).toBeUndefined();
    expect(whyNoRouteApplies(ghRoutes, gh('push', {}))).toBe('deploy: filter body.ref = missing, wanted "refs/heads/main"');
    expect(whyNoRouteApplies(ghRoutes, { ...gh('x', {}), source: 'gitlab' })).toBe('no route for source "gitlab"');
    const many: RouteConfig[] = Array.from({ length: 40 }, (_, i) => ({ name: `route-${i}`, source: 'github', events: ['release'], key: '{id}', effect }));
    const text = whyNoRouteApplies(many, gh('push', {}))!;
    expect(text.length).toBeLessThanOrEqual(ROUTE_DECISIONS_MAX);
    expect(text).toMatch(/^route-0: event type "push" not in \[release\]\n/);
    expect(text).toMatch(/\n\(\d+ more route\(s\) not shown\)$/);
  });
});
