import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, expectTypeOf, it } from 'vitest';
import { providers, SENSITIVE_HEADERS } from '../src/providers/registry.js';
import type { AttemptOutcome, EventOutcome } from '../src/drain/process.js';
import type { DeliveryOutcome } from '../src/http/ingest.js';
import { ReceiverMetrics } from '../src/http/metrics.js';
import type { LedgerRow } from '../src/store/drain-types.js';
import type { EffectRow, EventSummary, StoreStats } from '../src/store/ops-types.js';
import {
  ATTEMPT_OUTCOMES,
  CATCH_UP_OUTCOMES,
  CATCH_UP_RESULTS,
  DELIVERY_OUTCOMES,
  EFFECT_STATUSES,
  EVENT_ORIGINS,
  EVENT_STATUSES,
  SETTLE_STATUSES,
  type AttemptOutcomeName,
  type DeliveryOutcomeName,
  type EffectStatus,
  type EventStatus,
  type SettleStatus,
} from '../src/vocabulary.js';
import { REPO } from './helpers.js';

/** The words of the first `CHECK (status IN (...))` after `CREATE TABLE <table>` in a schema text. */
function checkedStatuses(sql: string, table: string): string[] {
  const at = sql.search(new RegExp(`CREATE TABLE ${table} \\(`, 'i'));
  const m = /CHECK \(status IN \(([^)]*)\)\)/i.exec(sql.slice(at));
  return [...(m?.[1] ?? '').matchAll(/'([^']*)'/g)].map((x) => x[1]!);
}

describe('one vocabulary (src/vocabulary.ts)', () => {
  it('is what the types of the store, the drain, ingest and the metrics use', () => {
    expectTypeOf<EventSummary['status']>().toEqualTypeOf<EventStatus>();
    expectTypeOf<EffectRow['status']>().toEqualTypeOf<EffectStatus>();
    expectTypeOf<LedgerRow['status']>().toEqualTypeOf<EffectStatus>();
    expectTypeOf<keyof StoreStats['effectsByStatus']>().toEqualTypeOf<EffectStatus>();
    expectTypeOf<AttemptOutcome['outcome']>().toEqualTypeOf<AttemptOutcomeName>();
    expectTypeOf<EventOutcome['status']>().toEqualTypeOf<SettleStatus>();
    expectTypeOf<DeliveryOutcome['outcome']>().toEqualTypeOf<DeliveryOutcomeName>();
  });

  it('names every series /metrics starts at 0', async () => {
    const text = await new ReceiverMetrics({ sources: ['s'], routes: ['r'] }).text();
    for (const o of DELIVERY_OUTCOMES) expect(text).toContain(`receiver_deliveries_total{source="s",outcome="${o}"} 0`);
    for (const o of ATTEMPT_OUTCOMES) expect(text).toContain(`receiver_effect_attempts_total{route="r",outcome="${o}"} 0`);
    for (const s of SETTLE_STATUSES) expect(text).toContain(`receiver_events_settled_total{status="${s}"} 0`);
    const catchUp = await new ReceiverMetrics({ sources: ['s'], catchUpSources: ['s'] }).text();
    for (const r of CATCH_UP_RESULTS) expect(catchUp).toContain(`receiver_catch_up_runs_total{source="s",result="${r}"} 0`);
    for (const o of CATCH_UP_OUTCOMES) expect(catchUp).toContain(`receiver_catch_up_events_total{source="s",outcome="${o}"} 0`);
  });

  it("is what the tables' CHECK constraints allow, on SQLite (schema.sql) and PostgreSQL", () => {
    const sqlite = readFileSync(join(REPO, 'schema.sql'), 'utf8');
    const postgres = readFileSync(join(REPO, 'src/store/postgres/migrations.ts'), 'utf8');
    for (const sql of [sqlite, postgres]) {
      expect(checkedStatuses(sql, 'events')).toEqual([...EVENT_STATUSES]);
      expect(checkedStatuses(sql, 'effects')).toEqual([...EFFECT_STATUSES]);
    }
    // The origin's CHECK is widened by the migrations: the last one written is the one in force.
    const origins = (sql: string) => [...[...sql.matchAll(/CHECK \(origin IN \(([^)]*)\)\)/gi)].at(-1)![1]!.matchAll(/'([^']*)'/g)].map((x) => x[1]!);
    expect(origins(sqlite)).toEqual([...EVENT_ORIGINS]);
    expect(origins(postgres)).toEqual([...EVENT_ORIGINS]);
  });
});

describe('redaction is built from the provider registry', () => {
  it('covers every header a provider declares, lower-cased, and the generic credential headers', () => {
    for (const p of providers.values()) {
      for (const h of p.signatureHeaders) {
        expect(h).toBe(h.toLowerCase());
        expect(SENSITIVE_HEADERS).toContain(h);
      }
    }
    expect(SENSITIVE_HEADERS).toEqual(expect.arrayContaining(['authorization', 'cookie', 'proxy-authorization']));
  });

  it('redacts exactly the headers the hand-written list did', () => {
    expect([...SENSITIVE_HEADERS].sort()).toEqual(
      [
        'authorization',
        'cookie',
        'proxy-authorization',
        'x-gitlab-token',
        'asaas-access-token',
        'stripe-signature',
        'x-hub-signature',
        'x-hub-signature-256',
        'webhook-signature',
        'svix-signature',
        'x-shopify-hmac-sha256',
        'x-slack-signature',
        'paddle-signature',
        'x-signature',
        'x-twilio-signature',
        'x-mailwebhook-signature',
      ].sort(),
    );
  });

  it('names, for each verifying provider, the header its own sign() puts the signature in', () => {
    for (const p of providers.values()) {
      if (p.name === 'none' || p.name === 'mailgun' || p.name === 'hmac-sha256') continue;
      const headers = Object.keys(
        p.sign(p.sample(Date.now()), 'whsec_c2VjcmV0LXNlY3JldA==', Date.now(), { options: {}, keys: new Map() } as never, 'http://127.0.0.1/webhooks/x')
          .headers,
      );
      expect(
        headers.some((h) => p.signatureHeaders.includes(h)),
        p.name,
      ).toBe(true);
    }
  });
});
